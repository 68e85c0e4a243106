// The hierarchical all-reduce over MPI on fake nodes (HVD_TEST_FAKE_LOCAL_SIZE=2: nodes of two
// consecutive ranks). ctest runs it with 1..4 ranks: 4 ranks are 2 nodes x 2 (the hierarchical
// algorithm runs), 3 ranks are 2 + 1 (not homogeneous: the op declines and says so), 1 and 2
// ranks are one node (the op declines: nothing to save).
//
// Part 1 drives the op directly (ops/hierarchical/hierarchical_ops.h), so it proves the algorithm
// whichever backend the runtime would pick: every op x dtype x size 0, 1, 7, 1000003 (odd sizes
// leave remainders that do not divide by local_size), prescale/postscale, a fused batch.
// Part 2 goes through the public API with HVD_HIERARCHICAL_ALLREDUCE=1 set by ctest: results must
// be right whether the runtime takes the hierarchical path or falls back to the flat one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "ops/hierarchical/hierarchical_ops.h"
#include "common/logging.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

using hvd::ops::CollectiveType;
using hvd::ops::OpBatch;
using hvd::ops::OpEntry;
using hvd::ops::hierarchical::MpiHierarchicalAllreduce;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Captures what the calling code writes to stdout and stderr (the log writes info lines to the
// one, warnings to the other).
class OutputCapture {
 public:
  OutputCapture() {
    flush();
    path_ = "/tmp/hvd_test_hier_" + std::to_string(getpid()) + ".log";
    int fd = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    saved_out_ = dup(1);
    saved_err_ = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  std::string finish() {
    flush();
    dup2(saved_out_, 1);
    dup2(saved_err_, 2);
    close(saved_out_);
    close(saved_err_);
    std::ifstream f(path_);
    std::stringstream s;
    s << f.rdbuf();
    std::remove(path_.c_str());
    return s.str();
  }

 private:
  static void flush() {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(stdout);
    std::fflush(stderr);
  }
  std::string path_;
  int saved_out_ = -1, saved_err_ = -1;
};

OpBatch batch_of(DataType t, ReduceOp op, int size, std::vector<Buffer>& ins,
                 std::vector<Buffer>& outs, double prescale = 1.0, double postscale = 1.0) {
  OpBatch b;
  b.type = CollectiveType::kAllreduce;
  b.dtype = t;
  b.reduce_op = op;
  b.contributors = size;
  b.prescale = prescale;
  b.postscale = postscale;
  for (size_t i = 0; i < ins.size(); ++i) {
    OpEntry e;
    e.name = "t" + std::to_string(i);
    e.input = ins[i].ref();
    e.output = outs.empty() ? ins[i].ref() : outs[i].ref();
    b.entries.push_back(std::move(e));
  }
  return b;
}

TEST(HierarchicalOp, DecisionFollowsTheFakeTopologyAndIsLogged) {
  const int size = world_size();
  hvd::set_log_level(hvd::LogLevel::kInfo);
  hvd::comm::MpiContext ctx(2);
  const auto& topo = ctx.topology();
  EXPECT_EQ(topo.local_rank, world_rank() % 2);
  EXPECT_EQ(topo.homogeneous, size % 2 == 0 || size == 1);
  hvd::ops::FusionBuffer buffer;
  OutputCapture capture;
  MpiHierarchicalAllreduce op(ctx, buffer);
  const std::string log = capture.finish();
  hvd::set_log_level(hvd::LogLevel::kWarning);
  Buffer b(DataType::kFloat32, 4);
  std::vector<Buffer> ins{b}, outs;
  const OpBatch batch = batch_of(DataType::kFloat32, ReduceOp::kSum, size, ins, outs);
  EXPECT_EQ(op.enabled(batch), size == 4) << "size " << size;
  OpBatch gpu = batch;
  gpu.device = hvd::Device::cuda(0);
  EXPECT_FALSE(op.enabled(gpu)) << "the MPI hierarchical op takes CPU tensors only";
  if (world_rank() == 0) {
    if (size == 4) {
      EXPECT_NE(log.find("hierarchical allreduce on: 2 nodes x 2 ranks"), std::string::npos) << log;
    }
    if (size == 3) {
      EXPECT_NE(log.find("not homogeneous"), std::string::npos) << log;
      EXPECT_NE(log.find("flat allreduce"), std::string::npos) << log;
    }
    if (size <= 2) {
      EXPECT_NE(log.find("one node"), std::string::npos) << log;
    }
  } else {
    EXPECT_EQ(log.find("hierarchical"), std::string::npos)
        << "only rank 0 logs the decision: " << log;
  }
}

TEST(HierarchicalOp, EveryOpDtypeAndSizeOnTwoByTwo) {
  const int size = world_size(), rank = world_rank();
  if (size != 4)
    GTEST_SKIP() << "the algorithm runs on 2 x 2 fake nodes only (4 ranks); here " << size;
  hvd::comm::MpiContext ctx(2);
  hvd::ops::FusionBuffer buffer;
  MpiHierarchicalAllreduce op(ctx, buffer);
  for (ReduceOp rop : all_ops()) {
    for (DataType t : all_dtypes()) {
      for (int64_t n : all_sizes()) {
        for (bool in_place : {true, false}) {
          std::vector<Buffer> ins{Buffer(t, n)}, outs;
          ins[0].fill([&](int64_t i) { return reduce_contrib(rop, t, rank, size, i); });
          if (!in_place) outs.emplace_back(t, n);
          OpBatch b = batch_of(t, rop, size, ins, outs);
          ASSERT_TRUE(op.enabled(b));
          op.execute(b);
          const std::string what = std::string("hierarchical ") + op_str(rop) +
                                   " n=" + std::to_string(n) +
                                   (in_place ? " in place" : " out of place");
          const double tol = (rop == ReduceOp::kAverage && is_16bit_float(t)) ? 1e-3 : 0.0;
          check_values(
              in_place ? ins[0] : outs[0],
              [&](int64_t i) { return reduce_expected(rop, t, size, i, 1, 1); }, what, tol);
          if (!in_place) {  // the input is left alone
            check_values(
                ins[0], [&](int64_t i) { return reduce_contrib(rop, t, rank, size, i); },
                what + " input");
          }
        }
      }
    }
  }
}

// Tensors above 16 MiB are cut into chunks whose phases run at the same time (in-node
// reduce-scatter of one chunk, cross-node phase of the previous one, in-node all-gather of the one
// before): several chunks, sizes that divide by nothing, 16- and 64-bit types.
TEST(HierarchicalOp, PipelinedChunksOnTwoByTwo) {
  const int size = world_size(), rank = world_rank();
  if (size != 4)
    GTEST_SKIP() << "the algorithm runs on 2 x 2 fake nodes only (4 ranks); here " << size;
  hvd::comm::MpiContext ctx(2);
  hvd::ops::FusionBuffer buffer;
  MpiHierarchicalAllreduce op(ctx, buffer);
  for (auto [t, n] : {std::pair{DataType::kFloat32, int64_t{9000007}},
                      std::pair{DataType::kFloat16, int64_t{12000011}},
                      std::pair{DataType::kFloat64, int64_t{4000037}}}) {
    for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::vector<Buffer> ins{Buffer(t, n)}, outs;
      ins[0].fill([&](int64_t i) { return reduce_contrib(rop, t, rank, size, i); });
      OpBatch b = batch_of(t, rop, size, ins, outs);
      op.execute(b);
      check_values(
          ins[0], [&](int64_t i) { return reduce_expected(rop, t, size, i, 1, 1); },
          std::string("pipelined hierarchical ") + op_str(rop) + " n=" + std::to_string(n));
    }
  }
}

TEST(HierarchicalOp, FusedBatchWithScalingOnTwoByTwo) {
  const int size = world_size(), rank = world_rank();
  if (size != 4)
    GTEST_SKIP() << "the algorithm runs on 2 x 2 fake nodes only (4 ranks); here " << size;
  hvd::comm::MpiContext ctx(2);
  hvd::ops::FusionBuffer buffer;
  MpiHierarchicalAllreduce op(ctx, buffer);
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat16, DataType::kInt32, DataType::kFloat64}) {
    std::vector<Buffer> ins, outs;
    for (int k = 0; k < 9; ++k) {  // sizes 0, 1, 3, ..., odd totals
      ins.emplace_back(t, (k * 5) % 11);
      ins.back().fill(
          [&](int64_t i) { return reduce_contrib(ReduceOp::kSum, t, rank, size, i + k); });
    }
    OpBatch b = batch_of(t, ReduceOp::kSum, size, ins, outs, 2.0, 0.25);
    op.execute(b);
    for (int k = 0; k < 9; ++k)
      check_values(
          ins[k],
          [&](int64_t i) { return reduce_expected(ReduceOp::kSum, t, size, i + k, 2.0, 0.25); },
          "fused hierarchical tensor " + std::to_string(k));
  }
}

// Rings of three: 6 ranks as 3 nodes x 2 (the cross-node ring has three members) and as
// 2 nodes x 3 (the in-node rings have three), sizes that leave remainders at both levels, and
// large enough (1 000 003) to span several 1 MiB segments per block. Run by test_hierarchical_6.
TEST(HierarchicalOp, RingsOfThreeOnSixRanks) {
  const int size = world_size(), rank = world_rank();
  if (size != 6) GTEST_SKIP() << "needs 6 ranks (3 x 2 and 2 x 3 fake nodes); here " << size;
  for (int local : {2, 3}) {
    hvd::comm::MpiContext ctx(local);
    hvd::ops::FusionBuffer buffer;
    MpiHierarchicalAllreduce op(ctx, buffer);
    for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kProduct}) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
        for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{7}, int64_t{1000003}, int64_t{6000011}}) {
          std::vector<Buffer> ins{Buffer(t, n)}, outs;
          ins[0].fill([&](int64_t i) { return reduce_contrib(rop, t, rank, size, i); });
          OpBatch b = batch_of(t, rop, size, ins, outs);
          ASSERT_TRUE(op.enabled(b)) << "local size " << local;
          op.execute(b);
          check_values(
              ins[0], [&](int64_t i) { return reduce_expected(rop, t, size, i, 1, 1); },
              std::string("hierarchical ") + op_str(rop) + " on " + std::to_string(size / local) +
                  " x " + std::to_string(local) + " n=" + std::to_string(n));
        }
      }
    }
  }
}

// Through the public API, with HVD_HIERARCHICAL_ALLREDUCE=1 and fake nodes set by ctest.
class HierarchicalApi : public HvdTest {};

TEST_F(HierarchicalApi, AllreduceIsCorrectOnFakeNodes) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      std::vector<Buffer> bufs;
      std::vector<hvd::Handle> handles;
      for (int64_t n : all_sizes()) {
        bufs.emplace_back(t, n);
        bufs.back().fill([&](int64_t i) { return reduce_contrib(op, t, rank_, size_, i); });
      }
      Watchdog w(std::string("hierarchical api ") + op_str(op));
      for (size_t k = 0; k < bufs.size(); ++k) {
        const std::string name =
            std::string("hier.") + op_str(op) + "." + type_str(t) + "." + std::to_string(k);
        handles.push_back(enqueue(
            [&] { return hvd::allreduce_async(bufs[k].ref(), bufs[k].ref(), name, op); }, name));
      }
      for (size_t k = 0; k < bufs.size(); ++k) {
        if (!wait_ok(handles[k], "hier api")) continue;
        const double tol = (op == ReduceOp::kAverage && is_16bit_float(t)) ? 1e-3 : 0.0;
        check_values(
            bufs[k], [&](int64_t i) { return reduce_expected(op, t, size_, i, 1, 1); },
            std::string("hierarchical api ") + op_str(op), tol);
      }
    }
  }
  EXPECT_EQ(hvd::local_size(), size_ == 1 ? 1 : (rank_ < 2 ? 2 : size_ - 2));
}

}  // namespace
}  // namespace hvdtest
