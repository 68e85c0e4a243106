// Errors that never hang: mismatches across ranks fail the operation on EVERY rank with a message
// naming the tensor and what differed; bad roots and splits, and a name already in flight, are
// clear errors. After each, a normal operation proves the runtime is still usable.
//
// The case where only one rank passes bad alltoall splits comes last: a runtime that rejects it
// locally on that rank leaves the others waiting, and the Watchdog then ends the job (a message).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"
#include "tests/support/error_catalogue_gtest.h"

namespace hvdtest {
namespace {

// Runs an operation that must fail with hvd::Error, at enqueue or at wait. Returns what(), or ""
// after recording a failure when nothing was thrown. The message must match exactly one row of
// docs/errors.md and repeat no prefix.
std::string expect_hvd_error(const std::function<hvd::Handle()>& op, const std::string& what,
                             bool expect_invalid_argument = true) {
  try {
    Watchdog w(what);
    hvd::Handle h = op();
    h.wait();
  } catch (const hvd::Error& e) {
    EXPECT_EQ(catalogue_mismatch(catalogue(), e.what()), "") << what;
    EXPECT_EQ(repeated_prefix(e.what()), "") << what << ": " << e.what();
    if (expect_invalid_argument) {
      EXPECT_NE(dynamic_cast<const hvd::InvalidArgumentError*>(&e), nullptr)
          << what
          << ": expected hvd::InvalidArgumentError (include/hvd/error.h: mismatched tensors, bad "
          << "arguments), got another hvd::Error: " << e.what();
    }
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-hvd exception on rank " << hvd::rank() << ": "
                  << e.what();
    return e.what();
  }
  ADD_FAILURE() << what << ": no error on rank " << hvd::rank();
  return "";
}

// A plain allreduce that must succeed after an error.
void expect_still_usable(const std::string& after) {
  std::vector<int32_t> v = {hvd::rank(), 1, 2};
  const std::string name = after + ".then_ok";
  try {
    Watchdog w(name);
    hvd::allreduce(v, name, ReduceOp::kSum);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the runtime is not usable after '" << after << "': " << e.what();
    return;
  }
  const int n = hvd::size();
  EXPECT_EQ(v, (std::vector<int32_t>{n * (n - 1) / 2, n, 2 * n})) << "after " << after;
}

class Errors : public HvdTest {};

#define SKIP_IF_ONE_RANK() \
  if (size_ < 2) GTEST_SKIP() << "a mismatch across ranks needs at least two ranks"

TEST_F(Errors, MismatchedShapeFailsOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.shape.fc1";
  std::vector<float> data(8, 1.0f);
  const int64_t n = rank_ == 0 ? 4 : 8;  // rank 0 sends [4], the others [8]
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::allreduce_async(hvd::TensorRef(data.data(), DataType::kFloat32, {n}),
                                    hvd::TensorRef(data.data(), DataType::kFloat32, {n}), name,
                                    ReduceOp::kSum);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "shape")) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedShapeSameElementCountFails) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.shape2d";
  std::vector<float> data(12, 1.0f);
  std::vector<int64_t> shape = rank_ == 0 ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4, 3};
  const std::string msg = expect_hvd_error(
      [&] {
        hvd::TensorRef t(data.data(), DataType::kFloat32, shape);
        return hvd::allreduce_async(t, t, name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "shape")) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedDtypeFailsOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.dtype";
  std::vector<int32_t> data(5, 1);  // 4-byte elements either way
  const DataType t = rank_ == 0 ? DataType::kFloat32 : DataType::kInt32;
  const std::string msg = expect_hvd_error(
      [&] {
        hvd::TensorRef ref(data.data(), t, {5});
        return hvd::allreduce_async(ref, ref, name, ReduceOp::kSum);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "type") ||
              (contains_ci(msg, "float32") && contains_ci(msg, "int32")))
      << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedReduceOpFailsOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.reduce_op";
  std::vector<double> data(3, 1.0);
  const ReduceOp op = rank_ == 0 ? ReduceOp::kSum : ReduceOp::kMax;
  const std::string msg = expect_hvd_error(
      [&] {
        hvd::TensorRef ref(data.data(), DataType::kFloat64, {3});
        return hvd::allreduce_async(ref, ref, name, op);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "op") || (contains_ci(msg, "sum") && contains_ci(msg, "max")))
      << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedPrescaleFailsOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.prescale";
  std::vector<float> data(3, 1.0f);
  const double prescale = rank_ == 0 ? 1.0 : 0.5;
  const std::string msg = expect_hvd_error(
      [&] {
        hvd::TensorRef ref(data.data(), DataType::kFloat32, {3});
        return hvd::allreduce_async(ref, ref, name, ReduceOp::kSum, prescale, 1.0);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "scale")) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedPostscaleFailsOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.postscale";
  std::vector<float> data(3, 1.0f);
  const double postscale = rank_ == size_ - 1 ? 3.0 : 1.0;
  const std::string msg = expect_hvd_error(
      [&] {
        hvd::TensorRef ref(data.data(), DataType::kFloat32, {3});
        return hvd::allreduce_async(ref, ref, name, ReduceOp::kAverage, 1.0, postscale);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "scale")) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedBroadcastRootFailsOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.root";
  std::vector<float> data(4, static_cast<float>(rank_));
  const int root = rank_ == 0 ? 0 : 1;
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::broadcast_async(hvd::TensorRef(data.data(), DataType::kFloat32, {4}), root,
                                    name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "root")) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, DifferentCollectivesUnderOneNameFailOnEveryRank) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.kind";
  std::vector<float> data(4, 1.0f);
  const std::string msg = expect_hvd_error(
      [&] {
        hvd::TensorRef ref(data.data(), DataType::kFloat32, {4});
        return rank_ == 0 ? hvd::allreduce_async(ref, ref, name, ReduceOp::kSum)
                          : hvd::allgather_async(ref, name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, MismatchedAllgatherInnerDimensionsFail) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.allgather.inner";
  std::vector<float> data(12, 1.0f);
  std::vector<int64_t> shape =
      rank_ == 0 ? std::vector<int64_t>{2, 6} : std::vector<int64_t>{2, 3, 2};
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::allgather_async(hvd::TensorRef(data.data(), DataType::kFloat32, shape), name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_TRUE(contains_ci(msg, "shape")) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, BroadcastRootOutOfRange) {
  for (int root : {size_, -1, size_ + 5}) {
    const std::string name = "err.root_range." + std::to_string(root + 1);
    std::vector<int32_t> data(3, 1);
    const std::string msg = expect_hvd_error(
        [&] {
          return hvd::broadcast_async(hvd::TensorRef(data.data(), DataType::kInt32, {3}), root,
                                      name);
        },
        name);
    EXPECT_TRUE(contains_ci(msg, "root")) << msg;
    EXPECT_NE(msg.find(std::to_string(root)), std::string::npos)
        << "the message should name the bad root: " << msg;
    expect_still_usable(name);
  }
}

TEST_F(Errors, AlltoallSplitsThatDoNotAddUp) {
  const std::string name = "err.splits.sum";
  std::vector<float> data(10, 1.0f);
  std::vector<int64_t> splits(size_, 1);
  splits[0] = 12 - size_;  // sums to 11 rows, the tensor has 10
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::alltoall_async(hvd::TensorRef(data.data(), DataType::kFloat32, {10}), splits,
                                   name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, AlltoallSplitsWithTheWrongCount) {
  const std::string name = "err.splits.count";
  std::vector<float> data(10, 1.0f);
  std::vector<int64_t> splits(static_cast<std::size_t>(size_) + 1, 0);
  splits[0] = 10;  // adds up, but one entry too many
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::alltoall_async(hvd::TensorRef(data.data(), DataType::kFloat32, {10}), splits,
                                   name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, AlltoallNegativeSplit) {
  const std::string name = "err.splits.negative";
  std::vector<float> data(4, 1.0f);
  // Adds up to the 4 rows, but with a negative entry: {-4} on one rank, {5, 0, ..., -1} otherwise.
  std::vector<int64_t> splits(size_, 0);
  if (size_ == 1) {
    splits[0] = -4;
  } else {
    splits[0] = 5;
    splits[size_ - 1] = -1;
  }
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::alltoall_async(hvd::TensorRef(data.data(), DataType::kFloat32, {4}), splits,
                                   name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  expect_still_usable(name);
}

TEST_F(Errors, AlltoallEqualPartsThatDoNotDivide) {
  if (size_ < 2) GTEST_SKIP() << "every row count divides by one rank";
  const std::string name = "err.splits.equal";
  std::vector<float> data(static_cast<std::size_t>(size_) + 1,
                          1.0f);  // size + 1 rows, no splits given
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::alltoall_async(hvd::TensorRef(data.data(), DataType::kFloat32, {size_ + 1}), {},
                                   name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  expect_still_usable(name);
}

// The same name enqueued twice on one rank without waiting: the second is rejected (at once, or
// through its handle); the first completes normally.
TEST_F(Errors, DuplicateNameInFlight) {
  const std::string name = "err.duplicate";
  std::vector<int32_t> a = {rank_, 10}, b = {100, 100};
  hvd::Handle first, second;
  bool second_rejected = false;
  std::string msg;
  {
    SlowNegotiation slow;  // the first must still be in flight when the second comes
    Watchdog w(name);
    try {
      first = hvd::allreduce_async(std::span<int32_t>(a), name, ReduceOp::kSum);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the first enqueue of '" << name << "' threw: " << e.what();
    }
    try {
      second = hvd::allreduce_async(std::span<int32_t>(b), name, ReduceOp::kSum);
      second.wait();
    } catch (const hvd::InvalidArgumentError& e) {
      second_rejected = true;
      msg = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the duplicate threw something other than hvd::InvalidArgumentError: "
                    << e.what();
      second_rejected = true;
    }
    wait_ok(first, name + " (first)");
  }
  EXPECT_TRUE(second_rejected) << "enqueueing '" << name << "' twice on one rank must be an error";
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_EQ(a, (std::vector<int32_t>{size_ * (size_ - 1) / 2, 10 * size_}))
      << "the first operation must succeed";
  EXPECT_EQ(b, (std::vector<int32_t>{100, 100}))
      << "the rejected duplicate must not touch its buffer";
  expect_still_usable(name);
}

// Only rank 0 passes splits that do not add up; every rank must still get an error (none hangs).
TEST_F(Errors, AlltoallBadSplitsOnOneRankOnlyFailEverywhere) {
  SKIP_IF_ONE_RANK();
  const std::string name = "err.splits.one_rank";
  std::vector<float> data(static_cast<std::size_t>(size_), 1.0f);
  std::vector<int64_t> splits(size_, 1);
  if (rank_ == 0) splits[0] = 2;  // sums to size + 1 on rank 0 only
  const std::string msg = expect_hvd_error(
      [&] {
        return hvd::alltoall_async(hvd::TensorRef(data.data(), DataType::kFloat32, {size_}), splits,
                                   name);
      },
      name);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  expect_still_usable(name);
}

}  // namespace
}  // namespace hvdtest
