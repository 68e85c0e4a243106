// 10,000 small allreduces in a loop must not grow the process: resident memory after 1,000 warm-up
// operations and after 10,000 more differs by at most a few MiB.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

// VmRSS of this process in KiB, from /proc/self/status (-1 if unavailable).
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

class Memory : public HvdTest {};

TEST_F(Memory, TenThousandSmallAllreducesDoNotGrowMemory) {
#if defined(HVD_SANITIZER_BUILD)
  GTEST_SKIP() << "resident memory is not meaningful under a sanitizer (quarantine, shadow memory)";
#endif
  // Names are reused (as a training loop does), 8 in flight at a time.
  constexpr int kInFlight = 8;
  std::vector<std::vector<float>> bufs(kInFlight, std::vector<float>(16));
  std::vector<std::string> names;
  for (int k = 0; k < kInFlight; ++k) names.push_back("mem." + std::to_string(k));
  int64_t wrong = 0;
  auto run_ops = [&](int count, int first_step) {
    for (int done = 0; done < count; done += kInFlight) {
      const int step = first_step + done / kInFlight;
      std::vector<hvd::Handle> hs(kInFlight);
      for (int k = 0; k < kInFlight; ++k) {
        for (int i = 0; i < 16; ++i) bufs[k][i] = static_cast<float>((step + k + i) % 7 + rank_);
        hs[k] = enqueue(
            [&] {
              return hvd::allreduce_async(std::span<float>(bufs[k]), names[k], ReduceOp::kSum);
            },
            names[k]);
      }
      for (int k = 0; k < kInFlight; ++k) {
        if (!wait_ok(hs[k], names[k])) {
          ++wrong;
          continue;
        }
        for (int i = 0; i < 16; ++i) {
          wrong += bufs[k][i] !=
                   static_cast<float>(size_ * ((step + k + i) % 7) + size_ * (size_ - 1) / 2);
        }
      }
      if (wrong > 0) break;  // same data on every rank, so every rank stops at the same step
    }
  };
  {
    Watchdog w("1,000 warm-up allreduces", 180);
    run_ops(1000, 0);
  }
  const long before = rss_kib();
  {
    Watchdog w("10,000 allreduces", 300);
    run_ops(10000, 1000);
  }
  const long after = rss_kib();
  std::printf(
      "[rank %d] VmRSS after 1,000 warm-up allreduces: %ld KiB; after 10,000 more: %ld KiB (%+ld "
      "KiB)\n",
      rank_, before, after, after - before);
  EXPECT_EQ(wrong, 0) << "wrong results in the loop";
  ASSERT_GT(before, 0) << "cannot read VmRSS from /proc/self/status";
  EXPECT_LE(after - before, 4 * 1024) << "rank " << rank_ << " grew from " << before << " KiB to "
                                      << after << " KiB over 10,000 allreduces";
}

}  // namespace
}  // namespace hvdtest
