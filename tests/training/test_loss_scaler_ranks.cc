// hvd::LossScaler across ranks: an overflow seen by one rank only (injected after the gradient
// all-reduce, where nothing else would spread it) skips that step on every rank, the scale moves
// identically everywhere, and the replicas' weights stay bitwise identical. And the strategy's
// 16-bit gradient all-reduce (StrategyOptions::gradient_dtype): values rounded to fp16/bf16, an
// fp16 overflow on one rank seen by every rank. Every rank computes
// the expected schedule itself and checks its own decisions; the replicas are compared with an
// allgather.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype_math.h"
#include "hvd/hvd.h"

namespace {

hvd::TensorRef ref(std::vector<float>& v) {
  return hvd::TensorRef(v.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(v.size())});
}

// Rank r's unscaled gradient element i at step t: small numbers, different on every rank.
float local_gradient(int r, int t, size_t i) {
  return 0.001f *
         static_cast<float>(static_cast<int>((r * 7 + t * 3 + static_cast<int>(i)) % 11) - 5);
}

// Bits of a float vector, to compare replicas exactly.
std::vector<int32_t> bits(const std::vector<float>& v) {
  std::vector<int32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

struct Injection {
  int step;
  std::vector<int> ranks;  // the ranks that see Inf/NaN at that step (after the all-reduce)
  bool nan = false;
};

// Every rank makes the same collective calls whatever it finds (EXPECT, never ASSERT, and the
// control flow follows the planned injections), so a wrong decision fails the test instead of
// leaving the ranks waiting for each other.
//
// Runs `steps` data-parallel SGD steps with a dynamic scaler (growth every `interval` good steps);
// the injected ranks put an Inf (or NaN) into their own copy of the averaged gradient. Checks
// every decision against the schedule computed here, and the replicas' weights at the end.
void run_and_check(const std::string& tag, int steps, int64_t interval,
                   const std::vector<Injection>& injections) {
  const int rank = hvd::rank(), size = hvd::size();
  hvd::LossScalerOptions o;
  o.initial_scale = 1024;
  o.growth_interval = interval;
  o.max_scale = 1 << 14;
  o.name = "test_loss_scaler." + tag;
  hvd::LossScaler scaler(o);
  std::vector<float> w(37, 0.5f), g(37), bias(5), gb(5);  // odd sizes

  double expected_scale = o.initial_scale;
  int64_t expected_run = 0;
  int skipped = 0;
  for (int t = 0; t < steps; ++t) {
    const Injection* inj = nullptr;
    for (const auto& i : injections)
      if (i.step == t) inj = &i;
    bool mine = false;
    int overflowing = 0;
    if (inj) {
      for (int r : inj->ranks)
        if (r < size) {
          ++overflowing;
          mine |= r == rank;
        }
    }
    // The backward pass of a model whose loss was multiplied by the scale.
    const float scale = static_cast<float>(scaler.scale());
    EXPECT_EQ(scaler.scale(), expected_scale) << tag << " step " << t << " on rank " << rank;
    for (size_t i = 0; i < g.size(); ++i) g[i] = local_gradient(rank, t, i) * scale;
    for (size_t i = 0; i < gb.size(); ++i) gb[i] = local_gradient(rank, t + 1, i) * scale;
    hvd::allreduce(ref(g), "test_loss_scaler.g." + tag);
    hvd::allreduce(ref(gb), "test_loss_scaler.gb." + tag);
    if (mine)
      g[3] = inj->nan ? std::numeric_limits<float>::quiet_NaN()
                      : std::numeric_limits<float>::infinity();
    const bool local = scaler.unscale({ref(g), ref(gb)});
    EXPECT_EQ(local, mine) << tag << " step " << t << ": rank " << rank << "'s own check";
    const hvd::LossScaleStep d = scaler.update(local);

    // What every rank must have decided.
    const bool skip = overflowing > 0;
    EXPECT_EQ(d.skipped, skip) << tag << " step " << t << " on rank " << rank;
    EXPECT_EQ(d.overflow_ranks, overflowing) << tag << " step " << t << " on rank " << rank;
    EXPECT_EQ(d.scale, expected_scale) << tag << " step " << t;
    if (skip) {
      expected_scale = std::max(o.min_scale, expected_scale * o.backoff_factor);
      expected_run = 0;
      ++skipped;
    } else if (++expected_run == interval) {
      expected_scale = std::min(o.max_scale, expected_scale * o.growth_factor);
      expected_run = 0;
    }
    EXPECT_EQ(d.next_scale, expected_scale) << tag << " step " << t << " on rank " << rank;
    if (skip) {
      EXPECT_EQ(d.next_scale, d.scale / 2) << "an overflow halves the scale";
      continue;
    }
    // The unscaled average is the plain average of the local gradients (exact scaling by 2^k).
    for (size_t i = 0; i < g.size(); ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += local_gradient(r, t, i);
      want /= size;
      EXPECT_NEAR(g[i], want, 1e-6) << tag << " step " << t << " element " << i;
      w[i] -= 0.1f * g[i];
    }
  }
  EXPECT_EQ(scaler.skipped_steps(), skipped);

  // Every rank saw the same decisions: the replicas are bitwise identical, with the same scale.
  std::vector<int32_t> mine_bits = bits(w);
  const std::vector<int32_t> all = hvd::allgather(mine_bits, "test_loss_scaler.w." + tag);
  for (int r = 0; r < size; ++r)
    EXPECT_TRUE(std::equal(mine_bits.begin(), mine_bits.end(), all.begin() + r * mine_bits.size()))
        << tag << ": rank " << r << "'s weights differ from rank " << rank << "'s";
  const std::vector<double> scales =
      hvd::allgather(std::vector<double>{scaler.scale()}, "test_loss_scaler.s." + tag);
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(scales[r], scaler.scale()) << tag << ": rank " << r << "'s final scale";
}

TEST(LossScalerAcrossRanks, AnOverflowOnTheLastRankOnlySkipsTheStepEverywhereAndHalvesTheScale) {
  hvd::init();
  run_and_check("last", 12, 4, {{5, {hvd::size() - 1}}});
}

TEST(LossScalerAcrossRanks, EveryRankInTurnOverflowsAloneAndEveryRankSkipsThatStep) {
  hvd::init();
  // Rank r overflows at step 2 + 3r (NaN for odd ranks); with a growth interval of 2 the scale
  // also grows between the overflows, identically on every rank.
  std::vector<Injection> inj;
  for (int r = 0; r < 4; ++r) inj.push_back({2 + 3 * r, {r}, r % 2 == 1});
  run_and_check("turns", 16, 2, inj);
}

TEST(LossScalerAcrossRanks, SeveralRanksOverflowingTogetherAreCountedOnce) {
  hvd::init();
  run_and_check("together", 8, 3, {{1, {0, 1, 2, 3}}, {2, {0, 2}}, {6, {1, 3}}});
}

TEST(LossScalerAcrossRanks, UpdateCombinesTheFlagsOfAllRanks) {
  hvd::init();
  hvd::LossScalerOptions o;
  o.name = "test_loss_scaler.flags";
  hvd::LossScaler s(o);
  const int size = hvd::size();
  for (int r = 0; r < size; ++r) {
    const double before = s.scale();
    const hvd::LossScaleStep d = s.update(hvd::rank() == r);
    EXPECT_TRUE(d.skipped) << "rank " << r << " alone overflowed";
    EXPECT_EQ(d.overflow_ranks, 1);
    EXPECT_EQ(s.scale(), before / 2);
  }
  const hvd::LossScaleStep d = s.update(false);
  EXPECT_FALSE(d.skipped);
  EXPECT_EQ(d.overflow_ranks, 0);
  EXPECT_EQ(s.skipped_steps(), size);
}

std::unique_ptr<hvd::Strategy> make_strategy(const hvd::StrategyOptions& o) {
  if (hvd::cross_size() > 1) return std::make_unique<hvd::MultiWorkerMirroredStrategy>(o);
  return std::make_unique<hvd::MirroredStrategy>(o);
}

TEST(SixteenBitGradientAllreduce, GradientsTravelIn16BitsAndAnFp16OverflowReachesEveryRank) {
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  for (hvd::DataType wire : {hvd::DataType::kFloat16, hvd::DataType::kBFloat16}) {
    const std::string tag = hvd::dtype_name(wire);
    hvd::StrategyOptions o;
    o.gradient_dtype = wire;
    auto strategy = make_strategy(o);
    hvd::LossScalerOptions so;
    so.name = "test_loss_scaler.wire." + tag;
    hvd::LossScaler scaler(so);
    // Multiples of 1/4 (exact in both formats, and so is their average over 1..4 ranks), and 0.1
    // on every rank (its average is 0.1 rounded to 16 bits).
    std::vector<float> g(23);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.25f * static_cast<float>(i + rank);
    g[0] = 0.1f;
    strategy->begin_step();
    strategy->gradient_ready("wire." + tag, ref(g));
    EXPECT_TRUE(strategy->synchronize_gradients());
    const float tenth = wire == hvd::DataType::kFloat16
                            ? hvd::half_to_float(hvd::float_to_half(0.1f))
                            : hvd::bfloat16_to_float(hvd::float_to_bfloat16(0.1f));
    // Within one 16-bit ulp of 0.1 rounded (on 3 ranks the runtime's 16-bit average of three equal
    // values can land one ulp off: its partial sums are 16-bit too).
    const float ulp = wire == hvd::DataType::kFloat16 ? 0x1p-14f : 0x1p-11f;
    EXPECT_NEAR(g[0], tenth, ulp * 1.01f) << tag;
    EXPECT_NE(g[0], 0.1f) << tag << ": the gradient did not travel in 16 bits";
    for (size_t i = 1; i < g.size(); ++i)
      EXPECT_EQ(g[i], 0.25f * (static_cast<float>(i) + 0.5f * static_cast<float>(size - 1)))
          << tag << " element " << i;
    // 70000 on the last rank only: beyond fp16's range (Inf for every rank after the all-reduce),
    // within bf16's.
    for (size_t i = 0; i < g.size(); ++i) g[i] = 1.0f;
    if (rank == size - 1) g[5] = 70000.0f;
    strategy->begin_step();
    strategy->gradient_ready("wire." + tag, ref(g));
    EXPECT_TRUE(strategy->synchronize_gradients());
    const bool local = scaler.unscale({ref(g)});
    EXPECT_EQ(local, wire == hvd::DataType::kFloat16) << tag << " on rank " << rank;
    const hvd::LossScaleStep d = scaler.update(local);
    EXPECT_EQ(d.skipped, wire == hvd::DataType::kFloat16) << tag;
    EXPECT_EQ(d.overflow_ranks, wire == hvd::DataType::kFloat16 ? size : 0) << tag;
  }
  hvd::StrategyOptions bad;
  bad.gradient_dtype = hvd::DataType::kInt32;
  EXPECT_THROW(make_strategy(bad), hvd::InvalidArgumentError);
}

}  // namespace
