// The steady state allocates nothing per tensor (issue 11, target 1: "no per-tensor heap
// allocation on the steady-state path"). Once a step's tensors have been negotiated and cached,
// every further step of K all-reduces (one allreduce_async each, or one grouped call) must not
// call operator new once per tensor, on any of the process's threads (the user's and hvd's
// background thread alike): this binary replaces the global operator new and counts every call.
// The allowance is one call per 4 tensors, room for a cycle's own vectors (a step may take
// several cycles when ranks share cores), so one allocation per tensor (K = 1000 a step) fails at
// once. Every rank checks its own values and its own count.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/sanitizers.h"
#include "hvd/hvd.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

constexpr int kTensors = 1000;
constexpr int kElements = 64;
constexpr int kWarmup = 10;
constexpr int kMeasured = 20;
// operator new calls allowed per step over all threads: a step's fixed costs (each cycle's
// vectors, the grouped call's by-value vectors), never one per tensor.
constexpr long kPerStepAllowance = kTensors / 4;

class SteadyAllocations : public HvdTest {
 protected:
  void SetUp() override {
    HvdTest::SetUp();
    ins_.assign(kTensors, std::vector<float>(kElements));
    outs_.assign(kTensors, std::vector<float>(kElements));
    for (int k = 0; k < kTensors; ++k) names_.push_back("steady." + std::to_string(k));
  }

  // Input k of step s on this rank; the sum over ranks is checked below.
  float value(int s, int k, int r) const { return static_cast<float>((s % 7) + k % 5 + r); }
  float sum(int s, int k) const {
    float want = 0;
    for (int r = 0; r < size_; ++r) want += value(s, k, r);
    return want;
  }

  void fill(int s) {
    for (int k = 0; k < kTensors; ++k) {
      for (float& x : ins_[k]) x = value(s, k, rank_);
    }
  }

  // Checks the outputs of step s; counts the wrong tensors (checked outside the counted window).
  int wrong(int s) const {
    int bad = 0;
    for (int k = 0; k < kTensors; ++k) {
      for (float x : outs_[k]) {
        if (x != sum(s, k)) {
          ++bad;
          break;
        }
      }
    }
    return bad;
  }

  // Runs kWarmup + kMeasured steps with `step`, and returns operator new calls per measured step.
  template <typename Step>
  double run(const char* what, Step step) {
    Watchdog w(what, 120);
    int bad = 0;
    long counted = 0;
    for (int s = 0; s < kWarmup + kMeasured; ++s) {
      fill(s);
      const long before = allocations();
      step();
      const long after = allocations();
      if (s >= kWarmup) counted += after - before;
      bad += wrong(s);
    }
    EXPECT_EQ(bad, 0) << what << ": wrong outputs on rank " << rank_;
    const double per_step = static_cast<double>(counted) / kMeasured;
    std::printf("[rank %d] %s: %.2f operator new calls per step of %d tensors\n", rank_, what,
                per_step, kTensors);
    return per_step;
  }

  std::vector<std::vector<float>> ins_, outs_;
  std::vector<std::string> names_;
};

hvd::TensorRef ref(std::vector<float>& v) {
  return hvd::TensorRef(v.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(v.size())});
}

TEST_F(SteadyAllocations, OneAllreduceAsyncPerTensor) {
  if (hvd::kAddressSanitizer)
    GTEST_SKIP()
        << "under AddressSanitizer every handle is allocated on its own (runtime/handle.cc)";
  std::vector<hvd::TensorRef> ins, outs;
  for (int k = 0; k < kTensors; ++k) {
    ins.push_back(ref(ins_[k]));
    outs.push_back(ref(outs_[k]));
  }
  std::vector<hvd::Handle> handles(kTensors);
  const double per_step = run("allreduce_async per tensor", [&] {
    for (int k = 0; k < kTensors; ++k) {
      handles[k] = hvd::allreduce_async(ins[k], outs[k], names_[k], hvd::ReduceOp::kSum);
    }
    for (hvd::Handle& h : handles) h.wait();
  });
  EXPECT_LE(per_step, kPerStepAllowance)
      << "rank " << rank_ << ": the steady state allocates per tensor (" << kTensors
      << " tensors a step)";
}

TEST_F(SteadyAllocations, OneGroupedCallPerStep) {
  std::vector<hvd::TensorRef> ins, outs;
  for (int k = 0; k < kTensors; ++k) {
    ins.push_back(ref(ins_[k]));
    outs.push_back(ref(outs_[k]));
  }
  const double per_step = run("grouped_allreduce_async", [&] {
    hvd::Handle h = hvd::grouped_allreduce_async(ins, outs, "steady.group", hvd::ReduceOp::kSum);
    h.wait();
  });
  // The call takes its two vectors of TensorRefs by value: the caller's copies are two
  // allocations a step, and hvd has a few of its own; none per member. (A member's shape once
  // became a temporary std::vector here, 1000 allocations a step.)
  EXPECT_LE(per_step, kPerStepAllowance)
      << "rank " << rank_ << ": the steady state allocates per group member (" << kTensors
      << " members a step)";
}

}  // namespace
}  // namespace hvdtest
