// A user thread that blocks in Handle::wait() on a request still in the queue closes the fusion
// window at once (runtime/handle.h, WakeSignal): it will submit nothing more until the wait
// returns. ctest runs this with HVD_FUSION_WINDOW=10000000 (10 s, the largest accepted) and
// HVD_CYCLE_TIME=10000 (10 s), so that every wait below would take 10 s if the window were waited
// out: 40 of them would run past the test's 120 s timeout. Every rank checks its own values; a
// wait from a thread other than the submitting one counts too.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

class WaitWindow : public HvdTest {};

// Lone blocking operations: each is submitted, then waited on at once.
// The timer slack of each of this process's threads (/proc/<tid>/timerslack_ns), by thread id.
std::vector<std::pair<long, long>> timer_slacks() {
  std::vector<std::pair<long, long>> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/timerslack_ns");
    long ns = -1;
    if (f >> ns) out.emplace_back(std::stol(e->d_name), ns);
  }
  closedir(d);
  return out;
}

// The background thread's timed waits (the fusion window, the cycle) last what they ask for: it
// runs with a 1 us timer slack, not the kernel's default 50 us, which made a 50 us window last up
// to 100 us (docs/benchmarks.md, "Where a small operation's time goes"). The user's own threads
// keep theirs.
TEST_F(WaitWindow, TheBackgroundThreadWaitsWithAOneMicrosecondTimerSlack) {
  // One operation first: it completes only after the background thread entered its loop, where
  // the slack is set (right after init() the thread may not have run yet).
  std::vector<float> v(4, 1.0f);
  hvd::allreduce(v, "timer_slack.first", hvd::ReduceOp::kSum);
  // Read again for up to 2 s while no thread shows it: under ASan on 4 ranks sharing 2 cores one
  // read in ~20 found none (the values are in the message; not reproduced since). The old library
  // never shows one.
  std::vector<std::pair<long, long>> slacks;
  int one_us = 0;
  long mine = -1;
  for (int attempt = 0; attempt < 40 && one_us == 0; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slacks = timer_slacks();
    if (slacks.empty()) GTEST_SKIP() << "no /proc/<tid>/timerslack_ns on this kernel";
    for (const auto& [tid, ns] : slacks) {
      if (ns == 1000) ++one_us;
      if (tid == static_cast<long>(gettid())) mine = ns;
    }
  }
  std::string all;
  for (const auto& [tid, ns] : slacks) all += " " + std::to_string(tid) + ":" + std::to_string(ns);
  EXPECT_GE(one_us, 1) << "no thread with a 1 us timer slack among " << slacks.size() << " (tid:ns"
                       << all << ")";
  EXPECT_NE(mine, 1000) << "the user's thread's timer slack was changed";
}

TEST_F(WaitWindow, LoneOperationsDoNotWaitOutTheWindow) {
  for (int i = 0; i < 20; ++i) {
    std::vector<float> v(16, static_cast<float>(rank_ + 1 + i));
    hvd::allreduce(v, "lone." + std::to_string(i % 4), hvd::ReduceOp::kSum);
    const float want = static_cast<float>(size_ * (size_ + 1) / 2 + size_ * i);
    for (float x : v) ASSERT_EQ(x, want) << "iteration " << i;
  }
  std::vector<int32_t> b(3, rank_ == 0 ? 7 : -1);
  hvd::broadcast(b, 0, "lone.broadcast");
  for (int32_t x : b) EXPECT_EQ(x, 7);
  const std::vector<int64_t> g = hvd::allgather(std::vector<int64_t>{rank_}, "lone.allgather");
  ASSERT_EQ(g.size(), static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) EXPECT_EQ(g[r], r);
  hvd::barrier();
}

// A burst submitted asynchronously, then waited on last to first.
TEST_F(WaitWindow, BurstThenWait) {
  for (int round = 0; round < 10; ++round) {
    constexpr int kTensors = 8;
    std::vector<std::vector<double>> t(kTensors);
    std::vector<hvd::Handle> h;
    for (int k = 0; k < kTensors; ++k) {
      t[k].assign(5, static_cast<double>(k * 10 + rank_));
      h.push_back(hvd::allreduce_async(std::span<double>(t[k]), "burst." + std::to_string(k),
                                       hvd::ReduceOp::kMax));
    }
    for (int k = kTensors - 1; k >= 0; --k) h[k].wait();
    for (int k = 0; k < kTensors; ++k)
      for (double x : t[k]) ASSERT_EQ(x, static_cast<double>(k * 10 + size_ - 1));
  }
}

// The submitting thread goes on; another thread waits on the handle.
TEST_F(WaitWindow, WaitFromAnotherThread) {
  for (int i = 0; i < 10; ++i) {
    std::vector<int64_t> v(4, rank_ + i);
    hvd::Handle h = hvd::allreduce_async(std::span<int64_t>(v), "threaded", hvd::ReduceOp::kSum);
    std::thread waiter([h]() mutable { h.wait(); });
    waiter.join();
    ASSERT_TRUE(h.ready());
    for (int64_t x : v) ASSERT_EQ(x, static_cast<int64_t>(size_ * (size_ - 1) / 2 + size_ * i));
  }
}

}  // namespace
}  // namespace hvdtest
