// The straggler measure's pieces without MPI (runtime/straggler.h): the two words a rank sends,
// their combine (the channel's unsigned maximum) in any order and grouping (star or tree), the
// decoded measure, and the window's rule (the largest lateness names its last rank when it reaches
// the threshold; per-rank counts; a take() empties the window and waits only for what it lacks).
#include "runtime/straggler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace hvd {
namespace {

using straggler::combine;
using straggler::decode;
using straggler::encode;
using straggler::kWords;

std::vector<uint64_t> words_of(int64_t wait_us, int rank) {
  std::vector<uint64_t> w(kWords);
  encode(wait_us, rank, w.data());
  return w;
}

// The combine of every rank's words, in the given order.
straggler::Measure combined(const std::vector<int64_t>& waits, const std::vector<int>& order) {
  std::vector<uint64_t> acc(kWords, 0);
  for (int r : order) combine(acc.data(), words_of(waits[static_cast<size_t>(r)], r).data());
  return decode(acc.data());
}

TEST(StragglerWords, TheRankThatWaitedLeastIsLastByTheSpread) {
  const straggler::Measure m = combined({41000, 40500, 120, 40900}, {0, 1, 2, 3});
  ASSERT_TRUE(m.any);
  EXPECT_EQ(m.last_rank, 2);
  EXPECT_EQ(m.first_rank, 0);
  EXPECT_EQ(m.lateness_us, 41000 - 120);
}

TEST(StragglerWords, AnyOrderAndGroupingGivesTheSameMeasure) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + trial % 70;
    std::vector<int64_t> waits(static_cast<size_t>(n));
    for (auto& w : waits) w = rng() % 100000;
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const straggler::Measure a = combined(waits, order);
    std::shuffle(order.begin(), order.end(), rng);
    const straggler::Measure b = combined(waits, order);
    // A tree: pairs first, then the pairs' results.
    std::vector<std::vector<uint64_t>> level;
    for (int r = 0; r < n; ++r) level.push_back(words_of(waits[static_cast<size_t>(r)], r));
    while (level.size() > 1) {
      std::vector<std::vector<uint64_t>> up;
      for (size_t i = 0; i < level.size(); i += 2) {
        up.push_back(level[i]);
        if (i + 1 < level.size()) combine(up.back().data(), level[i + 1].data());
      }
      level = up;
    }
    const straggler::Measure c = decode(level[0].data());
    const auto [lo, hi] = std::minmax_element(waits.begin(), waits.end());
    for (const auto& m : {a, b, c}) {
      ASSERT_TRUE(m.any);
      EXPECT_EQ(m.lateness_us, *hi - *lo);
      EXPECT_EQ(waits[static_cast<size_t>(m.last_rank)], *lo);
      EXPECT_EQ(waits[static_cast<size_t>(m.first_rank)], *hi);
    }
    EXPECT_EQ(a.last_rank, b.last_rank);
    EXPECT_EQ(a.last_rank, c.last_rank);
  }
}

TEST(StragglerWords, ARankWithNothingToMeasureIsNeutral) {
  EXPECT_FALSE(decode(words_of(-1, 3).data()).any);
  std::vector<uint64_t> acc = words_of(-1, 0);
  combine(acc.data(), words_of(500, 1).data());
  combine(acc.data(), words_of(-1, 2).data());
  combine(acc.data(), words_of(100, 3).data());
  const straggler::Measure m = decode(acc.data());
  ASSERT_TRUE(m.any);
  EXPECT_EQ(m.last_rank, 3);
  EXPECT_EQ(m.lateness_us, 400);
}

TEST(StragglerWords, ExtremesStayInRange) {
  const int top = straggler::kMaxRanks - 1;
  std::vector<uint64_t> acc = words_of(0, top);
  combine(acc.data(), words_of(int64_t{1} << 50, 0).data());  // capped at 12 days
  const straggler::Measure m = decode(acc.data());
  ASSERT_TRUE(m.any);
  EXPECT_EQ(m.last_rank, top);
  EXPECT_EQ(m.first_rank, 0);
  EXPECT_EQ(static_cast<uint64_t>(m.lateness_us), straggler::kWaitLimit - 1);
  EXPECT_FALSE(decode(words_of(5, straggler::kMaxRanks).data()).any);  // beyond 2^24 ranks
}

straggler::Measure measure(int last, int64_t lateness_us) {
  return {.any = true, .last_rank = last, .first_rank = 0, .lateness_us = lateness_us};
}

TEST(StragglerWindow, TheLargestLatenessNamesItsRankAtTheThreshold) {
  StragglerWindow w(4, 5.0);
  for (int i = 0; i < 3; ++i) w.released();
  w.add(measure(1, 3000));   // under the threshold: counted nowhere
  w.add(measure(2, 41000));  // the largest
  w.add(measure(3, 6000));
  StragglerReport r = w.take(std::chrono::milliseconds(0), {});
  EXPECT_EQ(r.releases, 3);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.last_rank, 2);
  EXPECT_DOUBLE_EQ(r.lateness_ms, 41.0);
  EXPECT_DOUBLE_EQ(r.threshold_ms, 5.0);
  EXPECT_EQ(r.last_counts, (std::vector<int64_t>{0, 0, 1, 1}));
  // The next window starts empty.
  r = w.take(std::chrono::milliseconds(0), {});
  EXPECT_EQ(r.releases, 0);
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.last_rank, -1);
  EXPECT_EQ(r.last_counts, (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(StragglerWindow, UnderTheThresholdNobodyIsNamed) {
  StragglerWindow w(2, 5.0);
  w.released();
  w.add(measure(1, 4999));
  const StragglerReport r = w.take(std::chrono::milliseconds(0), {});
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.last_rank, 1);
  EXPECT_NEAR(r.lateness_ms, 4.999, 1e-9);
  EXPECT_EQ(r.last_counts, (std::vector<int64_t>{0, 0}));
}

TEST(StragglerWindow, TakeWaitsForTheMeasureOfReleasesAlreadyCounted) {
  StragglerWindow w(2, 5.0);
  w.released();
  int asked = 0;
  std::thread background([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.add(measure(1, 30000));
  });
  const StragglerReport r = w.take(std::chrono::seconds(10), [&] { ++asked; });
  background.join();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(r.releases, 1);
  EXPECT_EQ(r.rank, 1);
  // Nothing missing: no wait, no ask.
  EXPECT_EQ(w.take(std::chrono::seconds(10), [&] { ++asked; }).releases, 0);
  EXPECT_EQ(asked, 1);
}

TEST(StragglerWindow, TakeGivesUpAfterItsPatience) {
  StragglerWindow w(2, 5.0);
  w.released();
  const auto t0 = std::chrono::steady_clock::now();
  const StragglerReport r = w.take(std::chrono::milliseconds(30), {});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
  EXPECT_EQ(r.releases, 0);
  // The late measure lands in the next window.
  w.add(measure(0, 9000));
  EXPECT_EQ(w.take(std::chrono::milliseconds(0), {}).rank, 0);
}

}  // namespace
}  // namespace hvd
