// Deterministic reductions (HVD_DETERMINISTIC, hvd::set_deterministic) on 1-4 ranks. Every rank
// makes every rank's operands from one formula, so each rank computes the expected result itself:
// the fold of the ranks' values in rank order (0, 1, ...), in double, rounded once. The operands'
// magnitudes span 2^60, so the order of a sum shows in its bits. Checked bit for bit:
// - many tensors at once, submitted in a new order each round (new fusion layouts, buffer sizes
//   and positions), float64 and float32, sum and product: every element equals the rank-order fold;
// - averages and grouped all-reduces: the same bits in every layout;
// - switching the mode between steps of cached tensors (their lanes and cache entries follow);
// - a rank that reduces one way while another does not: the operation fails on every rank, naming
//   them, and the next operation works;
// - StrategyOptions::deterministic turns the mode on.
// DET_TEST_OFF=1 runs the same tests with the mode off: on 3 and 4 ranks the layout tests then fail
// (MPI_Allreduce's order depends on the buffer), which shows that they can.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/throws_with.h"

namespace {

class Deterministic : public testing::Test {
 protected:
  void SetUp() override {
    hvd::init();
    hvd::set_deterministic(std::getenv("DET_TEST_OFF") == nullptr);
  }
  void TearDown() override { hvd::set_deterministic(false); }
};

// Rank r's operand for element i of tensor t: magnitudes from 2^-20 to 2^40, both signs. From one
// splitmix64 hash of (r, t, i), not a seeded std::mt19937_64 per element: seeding one costs 312
// words of state, and the test makes about a million operands (the expected values make every
// rank's), which under TSan took test_deterministic.np4 past its 300 s timeout.
double operand(int r, int t, int64_t i) {
  uint64_t z = static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(t) * 7919u +
               static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  const double mant = 1.0 + static_cast<double>(z >> 11) * std::ldexp(1.0, -53);  // [1, 2)
  const int exp = static_cast<int>(((z >> 1) & 1023) % 61) - 20;                  // -20 .. 40
  const double v = std::ldexp(mant, exp);
  return (z & 1) ? -v : v;
}

template <class T>
T expected(int t, int64_t i, hvd::ReduceOp op) {
  double acc = static_cast<double>(static_cast<T>(operand(0, t, i)));
  for (int r = 1; r < hvd::size(); ++r) {
    const double x = static_cast<double>(static_cast<T>(operand(r, t, i)));
    acc = op == hvd::ReduceOp::kProduct ? acc * x : acc + x;
  }
  return static_cast<T>(acc);
}

template <class T>
hvd::DataType dtype_of() {
  return sizeof(T) == 8 ? hvd::DataType::kFloat64 : hvd::DataType::kFloat32;
}

const std::vector<int64_t> kSizes = {1, 3, 17, 1000, 4096, 5, 70000, 2, 333, 12345, 8, 64};

// One round: every tensor submitted at once in `order`, then waited for.
template <class T>
std::vector<std::vector<T>> reduce_round(const std::vector<int>& order, hvd::ReduceOp op,
                                         const std::string& tag) {
  std::vector<std::vector<T>> data(kSizes.size());
  std::vector<hvd::Handle> handles;
  for (int t : order) {
    auto& v = data[static_cast<size_t>(t)];
    v.resize(static_cast<size_t>(kSizes[static_cast<size_t>(t)]));
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
      v[static_cast<size_t>(i)] = static_cast<T>(operand(hvd::rank(), t, i));
    handles.push_back(hvd::allreduce_async(
        hvd::TensorRef(v.data(), dtype_of<T>(), {static_cast<int64_t>(v.size())}),
        hvd::TensorRef(v.data(), dtype_of<T>(), {static_cast<int64_t>(v.size())}),
        tag + "." + std::to_string(t), op));
  }
  for (auto& h : handles) h.wait();
  return data;
}

std::vector<int> shuffled(int round) {
  std::vector<int> order(kSizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 gen(static_cast<unsigned>(round));  // the same order on every rank
  std::shuffle(order.begin(), order.end(), gen);
  return order;
}

template <class T>
void check_rank_order(hvd::ReduceOp op, const char* what) {
  for (int round = 0; round < 6; ++round) {
    auto data =
        reduce_round<T>(shuffled(round), op, std::string(what) + ".r" + std::to_string(round));
    for (size_t t = 0; t < data.size(); ++t)
      for (size_t i = 0; i < data[t].size(); ++i) {
        const T want = expected<T>(static_cast<int>(t), static_cast<int64_t>(i), op);
        ASSERT_EQ(std::memcmp(&data[t][i], &want, sizeof(T)), 0)
            << what << " round " << round << " tensor " << t << " element " << i << ": got "
            << data[t][i] << ", the rank-order fold is " << want << " (rank " << hvd::rank() << ")";
      }
  }
}

TEST_F(Deterministic, Float64SumIsTheRankOrderFoldInEveryLayout) {
  check_rank_order<double>(hvd::ReduceOp::kSum, "f64.sum");
}
TEST_F(Deterministic, Float32SumIsTheRankOrderFoldInEveryLayout) {
  check_rank_order<float>(hvd::ReduceOp::kSum, "f32.sum");
}
TEST_F(Deterministic, ProductIsTheRankOrderFoldInEveryLayout) {
  check_rank_order<double>(hvd::ReduceOp::kProduct, "f64.prod");
}

// Averages are the sum scaled afterwards: the same bits in every layout.
TEST_F(Deterministic, AverageIsTheSameInEveryLayout) {
  const auto first = reduce_round<double>(shuffled(0), hvd::ReduceOp::kAverage, "avg.first");
  for (int round = 1; round < 5; ++round) {
    const auto again = reduce_round<double>(shuffled(round), hvd::ReduceOp::kAverage,
                                            "avg.r" + std::to_string(round));
    for (size_t t = 0; t < first.size(); ++t)
      ASSERT_EQ(std::memcmp(first[t].data(), again[t].data(), first[t].size() * sizeof(double)), 0)
          << "tensor " << t << " round " << round;
  }
}

TEST_F(Deterministic, GroupedAllreduceIsTheRankOrderFold) {
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<double>> data;
    std::vector<hvd::TensorRef> refs;
    const std::vector<int> order = shuffled(round + 10);
    for (int t : order) {
      std::vector<double> v(static_cast<size_t>(kSizes[static_cast<size_t>(t)]));
      for (size_t i = 0; i < v.size(); ++i) v[i] = operand(hvd::rank(), t, static_cast<int64_t>(i));
      data.push_back(std::move(v));
    }
    for (auto& v : data)
      refs.emplace_back(v.data(), hvd::DataType::kFloat64,
                        std::vector<int64_t>{static_cast<int64_t>(v.size())});
    hvd::grouped_allreduce(refs, "group.r" + std::to_string(round), hvd::ReduceOp::kSum);
    for (size_t k = 0; k < order.size(); ++k)
      for (size_t i = 0; i < data[k].size(); ++i) {
        const double want =
            expected<double>(order[k], static_cast<int64_t>(i), hvd::ReduceOp::kSum);
        ASSERT_EQ(std::memcmp(&data[k][i], &want, sizeof(double)), 0)
            << "member " << k << " element " << i;
      }
  }
}

// The same names every step (cached responses, lanes): switched off, on, off, on.
TEST_F(Deterministic, SwitchesBetweenStepsOfCachedTensors) {
  const std::vector<int> order = shuffled(3);
  for (int step = 0; step < 8; ++step) {
    const bool on = (step / 2) % 2 == 1;
    hvd::set_deterministic(on);
    EXPECT_EQ(hvd::deterministic(), on);
    auto data = reduce_round<double>(order, hvd::ReduceOp::kSum, "steps");
    for (size_t t = 0; t < data.size(); ++t)
      for (size_t i = 0; i < data[t].size(); ++i) {
        const double want =
            expected<double>(static_cast<int>(t), static_cast<int64_t>(i), hvd::ReduceOp::kSum);
        if (on) {
          ASSERT_EQ(std::memcmp(&data[t][i], &want, sizeof(double)), 0)
              << "step " << step << " tensor " << t << " element " << i;
        } else {
          // Any order: within the rounding of a sum of size() terms of magnitude <= 2^41.
          ASSERT_NEAR(data[t][i], want, hvd::size() * std::ldexp(1.0, 41 - 52))
              << "step " << step << " tensor " << t << " element " << i;
        }
      }
  }
}

TEST_F(Deterministic, RanksThatDisagreeFailOnEveryRank) {
  if (hvd::size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  hvd::set_deterministic(hvd::rank() != 1);
  std::vector<double> v(10, 1.0);
  hvd::TensorRef t(v.data(), hvd::DataType::kFloat64, {10});
  EXPECT_TRUE(hvdtest::throws_with([&] { hvd::allreduce(t, "disagree", hvd::ReduceOp::kSum); },
                                   "deterministically"));
  hvd::set_deterministic(true);
  std::fill(v.begin(), v.end(), 1.0);
  hvd::allreduce(t, "agree", hvd::ReduceOp::kSum);
  EXPECT_EQ(v[0], hvd::size());
}

TEST_F(Deterministic, StrategyOptionTurnsItOn) {
  hvd::set_deterministic(false);
  hvd::StrategyOptions o;
  o.deterministic = true;
  hvd::MultiWorkerMirroredStrategy strategy(o);
  EXPECT_TRUE(hvd::deterministic());
}

}  // namespace
