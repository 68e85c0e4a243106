// A job of one rank runs a CPU tensor's collective on the calling thread (runtime/runtime.cc,
// Runtime::runs_inline; HVD_SINGLE_RANK_INLINE): the handle is ready when the async call returns,
// with the values the background thread would have produced. With HVD_SINGLE_RANK_INLINE=0 (the
// ctest registration .np1.background also sets a 1 s cycle and a 0.5 s fusion window) the same
// calls go through the background thread: not ready at return, same values. With several ranks
// every operation is negotiated; the values are checked there too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

using SingleRank = HvdTest;

bool inline_expected() {
  const char* v = std::getenv("HVD_SINGLE_RANK_INLINE");
  return hvd::size() == 1 && !(v != nullptr && std::string(v) == "0");
}

bool background_expected() {
  const char* v = std::getenv("HVD_SINGLE_RANK_INLINE");
  return hvd::size() == 1 && v != nullptr && std::string(v) == "0";
}

// Checks the handle's state right after the async call returned, then waits.
void expect_path(hvd::Handle& h, const std::string& what) {
  if (inline_expected()) {
    EXPECT_TRUE(h.ready()) << what << ": not run at submission";
  }
  // The background path waits the fusion window (0.5 s in the .background registration) first.
  if (background_expected()) {
    EXPECT_FALSE(h.ready()) << what << ": done before a cycle";
  }
  h.wait();
}

TEST_F(SingleRank, AllreduceOutOfPlaceInPlaceAndScaled) {
  const int n = hvd::size(), r = hvd::rank();
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{70000}}) {
    std::vector<float> in(count), out(count, -1.0f);
    for (int64_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * (i % 7));
    hvd::TensorRef tin(in.data(), hvd::DataType::kFloat32, {count});
    hvd::TensorRef tout(out.data(), hvd::DataType::kFloat32, {count});
    const std::string tag = std::to_string(count);
    hvd::Handle h = hvd::allreduce_async(tin, tout, "single.sum." + tag, hvd::ReduceOp::kSum);
    expect_path(h, "sum of " + tag);
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(out[i], ranks_sum * static_cast<float>(i % 7));

    h = hvd::allreduce_async(tin, tin, "single.avg." + tag, hvd::ReduceOp::kAverage, 2.0, 0.5);
    expect_path(h, "average of " + tag);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_FLOAT_EQ(in[i], ranks_sum / static_cast<float>(n) * static_cast<float>(i % 7));
  }
}

TEST_F(SingleRank, EveryOtherCollective) {
  const int n = hvd::size(), r = hvd::rank();
  std::vector<int32_t> b = {r, r + 10, r + 20};
  hvd::Handle h = hvd::broadcast_async(hvd::TensorRef(b.data(), hvd::DataType::kInt32, {3}), n - 1,
                                       "single.broadcast");
  expect_path(h, "broadcast");
  EXPECT_EQ(b, (std::vector<int32_t>{n - 1, n + 9, n + 19}));

  std::vector<int64_t> g = {r, r};
  h = hvd::allgather_async(hvd::TensorRef(g.data(), hvd::DataType::kInt64, {1, 2}),
                           "single.allgather");
  expect_path(h, "allgather");
  ASSERT_EQ(h.output().shape(), (std::vector<int64_t>{n, 2}));
  const auto* got = static_cast<const int64_t*>(h.output().data());
  for (int k = 0; k < n; ++k) EXPECT_EQ(got[2 * k], k);

  std::vector<double> a(n);
  for (int k = 0; k < n; ++k) a[k] = 100.0 * r + k;  // row k goes to rank k
  h = hvd::alltoall_async(hvd::TensorRef(a.data(), hvd::DataType::kFloat64, {n}), {},
                          "single.alltoall");
  expect_path(h, "alltoall");
  ASSERT_EQ(h.output().shape(), (std::vector<int64_t>{n}));
  for (int k = 0; k < n; ++k)
    EXPECT_EQ(static_cast<const double*>(h.output().data())[k], 100.0 * k + r);
  EXPECT_EQ(h.received_splits(), std::vector<int64_t>(n, 1));

  std::vector<float> s(2 * n, static_cast<float>(r + 1));
  h = hvd::reducescatter_async(hvd::TensorRef(s.data(), hvd::DataType::kFloat32, {2 * n}),
                               "single.reducescatter", hvd::ReduceOp::kMax);
  expect_path(h, "reducescatter");
  ASSERT_EQ(h.output().shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(static_cast<const float*>(h.output().data())[1], static_cast<float>(n));
}

// A request with a local error goes through the background thread on one rank too, so its message
// is the one every rank gets with several ranks.
TEST_F(SingleRank, BadArgumentsFailAsOnTheBackgroundPath) {
  const int n = hvd::size();
  std::vector<float> x(4, 1.0f);
  hvd::TensorRef t(x.data(), hvd::DataType::kFloat32, {4});
  // A local check (root out of range) fails the operation with rank 0's message, on every rank.
  hvd::Handle h = hvd::broadcast_async(t, n + 2, "single.bad_root");
  try {
    h.wait();
    ADD_FAILURE() << "a root out of range did not fail";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast of 'single.bad_root' failed: rank"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  // The runtime still works afterwards.
  hvd::allreduce(t, "single.after_error", hvd::ReduceOp::kSum);
  EXPECT_EQ(x[3], static_cast<float>(n));
}

}  // namespace
}  // namespace hvdtest
