// Mirrored strategies: sharding, learning rates, parameter broadcast, overlapped gradient
// reduction and accumulation. Every rank checks the values it computes itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "hvd/hvd.h"

namespace {

hvd::TensorRef ref(std::vector<float>& v) {
  return hvd::TensorRef(v.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(v.size())});
}

std::unique_ptr<hvd::Strategy> make(const hvd::StrategyOptions& o = {}) {
  if (hvd::cross_size() > 1) return std::make_unique<hvd::MultiWorkerMirroredStrategy>(o);
  return std::make_unique<hvd::MirroredStrategy>(o);
}

TEST(Strategy, ShardsGiveEveryReplicaTheSameStepsAndDisjointSlicesOfEachGlobalBatch) {
  hvd::init();
  hvd::StrategyOptions o;
  o.shuffle_seed = 42;
  auto s = make(o);
  const int64_t n = 1003, b = 7;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    hvd::Shard shard = s->shard(n, b, epoch);
    EXPECT_EQ(shard.steps, n / (b * hvd::size()));
    std::vector<int64_t> all = hvd::allgather(shard.indices, "shard.e" + std::to_string(epoch));
    std::set<int64_t> seen(all.begin(), all.end());
    EXPECT_EQ(seen.size(), all.size()) << "two replicas got the same sample";
    EXPECT_TRUE(std::all_of(all.begin(), all.end(), [&](int64_t i) { return i >= 0 && i < n; }));
    std::vector<int64_t> steps =
        hvd::allgather(std::vector<int64_t>{shard.steps}, "shard.steps" + std::to_string(epoch));
    for (int64_t x : steps) EXPECT_EQ(x, shard.steps);
  }
  // A different epoch shuffles differently; the same epoch identically.
  EXPECT_NE(s->shard(n, b, 0).indices, s->shard(n, b, 1).indices);
  EXPECT_EQ(s->shard(n, b, 3).indices, s->shard(n, b, 3).indices);
  EXPECT_THROW(s->shard(n, 0, 0), hvd::InvalidArgumentError);
}

TEST(Strategy, ConcatenatedSlicesEqualTheSingleReplicaBatch) {
  // With the same global batch, replica r's slice is the r-th part of the batch one replica with
  // the whole global batch would see: reconstruct it from the shuffle of [0, n).
  hvd::init();
  auto s = make();
  const int64_t n = 96, b = 4;
  hvd::Shard mine = s->shard(n, b, 0);
  std::vector<int64_t> all = hvd::allgather(mine.indices, "slices");
  // all = rank0's (steps x b), rank1's ...; rebuild step-major global batches.
  const int64_t g = b * hvd::size();
  std::vector<int64_t> global;
  for (int64_t step = 0; step < mine.steps; ++step)
    for (int r = 0; r < hvd::size(); ++r)
      for (int64_t i = 0; i < b; ++i) global.push_back(all[(r * mine.steps + step) * b + i]);
  EXPECT_EQ(static_cast<int64_t>(global.size()), mine.steps * g);
  std::set<int64_t> distinct(global.begin(), global.end());
  EXPECT_EQ(distinct.size(), global.size());
}

TEST(Strategy, LearningRateIsScaledLinearlyWithWarmup) {
  hvd::init();
  hvd::StrategyOptions o;
  o.base_learning_rate = 0.1;
  o.warmup_steps = 10;
  auto s = make(o);
  const double target = 0.1 * hvd::size();
  EXPECT_DOUBLE_EQ(s->learning_rate(0), 0.1);
  EXPECT_NEAR(s->learning_rate(5), 0.1 + (target - 0.1) * 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(s->learning_rate(10), target);
  EXPECT_DOUBLE_EQ(s->learning_rate(1000), target);
  o.scale_learning_rate = false;
  EXPECT_DOUBLE_EQ(make(o)->learning_rate(1000), 0.1);
  EXPECT_EQ(s->global_batch(32), 32 * hvd::size());
  EXPECT_EQ(s->num_replicas_in_sync(), hvd::size());
  EXPECT_EQ(s->replica_id(), hvd::rank());
}

TEST(Strategy, BroadcastParametersCopiesRankZerosValues) {
  hvd::init();
  auto s = make();
  std::vector<float> w(33, static_cast<float>(hvd::rank() + 5));
  std::vector<float> m(1, static_cast<float>(-hvd::rank()));
  s->broadcast_parameters({{"w", ref(w)}, {"m", ref(m)}});
  for (float x : w) EXPECT_EQ(x, 5.0f);
  EXPECT_EQ(m[0], 0.0f);
}

TEST(Strategy, GradientsReadyInAnyOrderAreAveraged) {
  hvd::init();
  auto s = make();
  const int n = 6;
  std::vector<std::vector<float>> grads(n);
  for (int i = 0; i < n; ++i)
    grads[i].assign(10 + i * 100, static_cast<float>((hvd::rank() + 1) * (i + 1)));
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < n; ++i)
      std::fill(grads[i].begin(), grads[i].end(), static_cast<float>((hvd::rank() + 1) * (i + 1)));
    s->begin_step();
    // Backward order differs per rank: rotate by rank.
    for (int k = 0; k < n; ++k) {
      int i = (k + hvd::rank()) % n;
      s->gradient_ready("g" + std::to_string(i), ref(grads[i]));
    }
    EXPECT_TRUE(s->synchronize_gradients());
    const double mean_rank_plus_one = (hvd::size() + 1) / 2.0;
    for (int i = 0; i < n; ++i)
      for (float x : grads[i]) ASSERT_NEAR(x, mean_rank_plus_one * (i + 1), 1e-5);
  }
  EXPECT_GE(s->wait_seconds(), 0.0);
}

TEST(Strategy, AccumulationCommunicatesEveryKthStepWithTheMeanOverStepsAndReplicas) {
  hvd::init();
  hvd::StrategyOptions o;
  o.accumulation_steps = 3;
  auto s = make(o);
  std::vector<float> g(5);
  double sum = 0;
  for (int step = 0; step < 3; ++step) {
    float v = static_cast<float>((hvd::rank() + 1) * (step + 1));
    std::fill(g.begin(), g.end(), v);
    s->begin_step();
    s->gradient_ready("acc", ref(g));
    bool stepped = s->synchronize_gradients();
    EXPECT_EQ(stepped, step == 2);
    if (!stepped) {
      for (float x : g) EXPECT_EQ(x, v);  // untouched: no communication
    }
    sum += step + 1;
  }
  // mean over steps of mean over ranks of (rank+1)*(step+1) = mean(rank+1) * mean(step+1)
  const double want = (hvd::size() + 1) / 2.0 * (sum / 3);
  for (float x : g) EXPECT_NEAR(x, want, 1e-5);
}

// A gradient on a device this process cannot reach (cuda:64) is refused by name on the rank that
// passes it, before anything is submitted (so no rank waits for it), with or without
// accumulation, in a build with CUDA or without; the strategy goes on with CPU gradients.
TEST(Strategy, UnreachableDeviceGradientIsNamedBeforeAnythingIsSubmitted) {
  hvd::init();
  for (int k : {1, 2}) {
    hvd::StrategyOptions o;
    o.accumulation_steps = k;
    auto s = make(o);
    float fake = 0;  // never dereferenced
    s->begin_step();
    try {
      s->gradient_ready("w",
                        hvd::TensorRef(&fake, hvd::DataType::kFloat32, {1}, hvd::Device::cuda(64)));
      ADD_FAILURE() << "no error";
    } catch (const hvd::InvalidArgumentError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cuda:64"), std::string::npos) << msg;
    }
    std::vector<float> g(3, static_cast<float>(hvd::rank() + 1));
    for (int step = 0; step < k; ++step) {
      s->begin_step();
      s->gradient_ready("after", ref(g));
      s->synchronize_gradients();
    }
    for (float x : g) EXPECT_NEAR(x, (hvd::size() + 1) / 2.0, 1e-6);  // the mean of the ranks
  }
}

TEST(Strategy, MirroredRefusesSeveralNodesAndPointsToMultiWorker) {
  hvd::init();
  if (hvd::cross_size() > 1) {
    try {
      hvd::MirroredStrategy s;
      ADD_FAILURE() << "MirroredStrategy accepted " << hvd::cross_size() << " nodes";
    } catch (const hvd::InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("MultiWorkerMirroredStrategy"), std::string::npos)
          << e.what();
    }
  } else {
    EXPECT_NO_THROW(hvd::MirroredStrategy s);
  }
  EXPECT_NO_THROW(hvd::MultiWorkerMirroredStrategy s);
  hvd::StrategyOptions bad;
  bad.accumulation_steps = 0;
  EXPECT_THROW(hvd::MultiWorkerMirroredStrategy s(bad), hvd::InvalidArgumentError);
}

}  // namespace
