// hvd::PrefetchQueue and hvd::Prefetcher (hvd/prefetch.h), without MPI: items arrive in order
// with any depth and thread count, loaders never run more than depth items ahead, a loader's
// exception reaches the consumer at its item, destruction mid-stream stops the loaders without a
// deadlock, and depth 0 fills on the consumer's thread only when asked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hvd/error.h"
#include "hvd/prefetch.h"

namespace hvdtest {
namespace {

using namespace std::chrono_literals;

struct Item {
  int64_t index = -1;
  std::vector<int64_t> payload;  // reused buffer: its contents must be this item's
};

// A small deterministic jitter, so that loaders finish out of order.
std::chrono::microseconds jitter(int64_t i) { return std::chrono::microseconds((i * 37) % 200); }

// Polls cond for up to 10 s (loaders are threads: give them time on a loaded machine).
template <class Cond>
bool eventually(Cond cond) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class PrefetchOrder : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PrefetchOrder, DeliversEveryItemOnceInOrderWithItsOwnContents) {
  const auto [depth, threads] = GetParam();
  for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}}) {
    std::atomic<int64_t> fills{0};
    hvd::Prefetcher<Item> p(count,
                            [&](int64_t i, Item& item) {
                              std::this_thread::sleep_for(jitter(i));
                              item.index = i;
                              item.payload.assign(static_cast<size_t>(i % 5 + 1), i * 3);
                              ++fills;
                            },
                            {.depth = depth, .threads = threads});
    EXPECT_EQ(p.count(), count);
    for (int64_t i = 0; i < count; ++i) {
      Item* item = p.next();
      ASSERT_NE(item, nullptr) << "item " << i << " of " << count;
      EXPECT_EQ(item->index, i);
      EXPECT_EQ(item->payload, std::vector<int64_t>(static_cast<size_t>(i % 5 + 1), i * 3));
    }
    EXPECT_EQ(p.next(), nullptr);
    EXPECT_EQ(p.next(), nullptr);
    EXPECT_EQ(fills.load(), count) << "every item filled exactly once";
    EXPECT_GE(p.wait_seconds(), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(DepthsAndThreads, PrefetchOrder,
                         ::testing::Values(std::make_tuple(0, 1), std::make_tuple(1, 1),
                                           std::make_tuple(2, 1), std::make_tuple(3, 3),
                                           std::make_tuple(5, 2), std::make_tuple(1, 4)));

TEST(Prefetch, SlotsAreARingOfDepthPlusOne) {
  EXPECT_EQ(hvd::PrefetchQueue::slots_for({.depth = 0}), 1);
  EXPECT_EQ(hvd::PrefetchQueue::slots_for({.depth = 3, .threads = 2}), 4);
  std::vector<int> seen;
  std::mutex mu;
  hvd::PrefetchQueue q(9,
                       [&](int64_t i, int slot) {
                         std::lock_guard<std::mutex> lock(mu);
                         EXPECT_EQ(slot, i % 3) << "item " << i;
                       },
                       {.depth = 2});
  EXPECT_EQ(q.slots(), 3);
  for (int i = 0; i < 9; ++i) seen.push_back(q.next());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(q.next(), -1);
}

// While the consumer holds item c, the loaders reach c + depth and no further.
class PrefetchBound : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PrefetchBound, LoadersStayAtMostDepthAhead) {
  const auto [depth, threads] = GetParam();
  constexpr int64_t kCount = 20;
  std::atomic<int64_t> highest{-1};  // the highest item whose fill has started
  hvd::Prefetcher<Item> p(kCount,
                          [&](int64_t i, Item& item) {
                            int64_t h = highest.load();
                            while (i > h && !highest.compare_exchange_weak(h, i)) {}
                            item.index = i;
                          },
                          {.depth = depth, .threads = threads});
  // Before the first next(): the ring's depth + 1 slots, items 0..depth.
  ASSERT_TRUE(eventually([&] { return highest.load() == depth; })) << "highest " << highest;
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(highest.load(), depth) << "started past the free slots before any next()";
  for (int64_t c = 0; c < kCount; ++c) {
    Item* item = p.next();
    ASSERT_NE(item, nullptr);
    ASSERT_EQ(item->index, c);
    const int64_t limit = std::min(c + depth, kCount - 1);
    ASSERT_TRUE(eventually([&] { return highest.load() == limit; }))
        << "holding " << c << ": highest started " << highest << ", expected " << limit;
    std::this_thread::sleep_for(2ms);
    ASSERT_EQ(highest.load(), limit) << "holding item " << c << " with depth " << depth;
  }
}

INSTANTIATE_TEST_SUITE_P(DepthsAndThreads, PrefetchBound,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(2, 1),
                                           std::make_tuple(3, 3), std::make_tuple(4, 2)));

TEST(Prefetch, DepthZeroFillsOnTheCallersThreadWhenAsked) {
  const std::thread::id me = std::this_thread::get_id();
  int fills = 0;
  hvd::Prefetcher<Item> p(3,
                          [&](int64_t i, Item& item) {
                            EXPECT_EQ(std::this_thread::get_id(), me);
                            ++fills;
                            item.index = i;
                            std::this_thread::sleep_for(5ms);
                          },
                          {.depth = 0, .threads = 4});
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(fills, 0) << "no fill before next()";
  for (int64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(p.next()->index, i);
    EXPECT_EQ(fills, i + 1);
  }
  EXPECT_EQ(p.next(), nullptr);
  // The consumer did all the loading: at least the 3 x 5 ms of sleep counts as waiting.
  EXPECT_GE(p.wait_seconds(), 0.015);
}

struct LoaderFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PrefetchErrors : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PrefetchErrors, ALoadersExceptionReachesTheConsumerAtItsItem) {
  const auto [depth, threads] = GetParam();
  constexpr int64_t kBad = 5;
  std::atomic<int64_t> highest{-1};
  hvd::Prefetcher<Item> p(50,
                          [&](int64_t i, Item& item) {
                            int64_t h = highest.load();
                            while (i > h && !highest.compare_exchange_weak(h, i)) {}
                            std::this_thread::sleep_for(jitter(i));
                            if (i == kBad)
                              throw LoaderFailure("cannot decode item " + std::to_string(i));
                            item.index = i;
                          },
                          {.depth = depth, .threads = threads});
  for (int64_t i = 0; i < kBad; ++i) ASSERT_EQ(p.next()->index, i) << "items before the failure";
  for (int again = 0; again < 2; ++again) {
    try {
      p.next();
      FAIL() << "next() returned item " << kBad << " although its fill threw";
    } catch (const LoaderFailure& e) {
      EXPECT_STREQ(e.what(), "cannot decode item 5");
    }
  }
  // Nothing was started past the ring the consumer's position allowed (it asked for item 5).
  EXPECT_LE(highest.load(), kBad + depth);
}

INSTANTIATE_TEST_SUITE_P(DepthsAndThreads, PrefetchErrors,
                         ::testing::Values(std::make_tuple(0, 1), std::make_tuple(2, 1),
                                           std::make_tuple(3, 3)));

TEST(Prefetch, DestroyingMidStreamStopsTheLoadersWithoutWaitingForTheConsumer) {
  for (const int threads : {1, 3}) {
    std::atomic<int64_t> started{0}, finished{0};
    {
      hvd::Prefetcher<Item> p(
          1000,
          [&](int64_t i, Item& item) {
            ++started;
            std::this_thread::sleep_for(i == 1 ? 100ms : 1ms);  // one fill in progress at the end
            item.index = i;
            ++finished;
          },
          {.depth = 4, .threads = threads});
      ASSERT_EQ(p.next()->index, 0);
      ASSERT_TRUE(eventually([&] { return started.load() >= 2; }));
      // The consumer stops here, holding item 0, with loaders blocked on a full ring or in a fill.
    }
    EXPECT_EQ(started.load(), finished.load()) << "a fill was abandoned mid-way";
    EXPECT_LE(started.load(), 5) << "loaders went past the ring";
  }
}

TEST(Prefetch, DestroyingWithAPendingFailureDropsIt) {
  std::atomic<bool> threw{false};
  {
    hvd::Prefetcher<Item> p(10,
                            [&](int64_t i, Item&) {
                              if (i == 1) {
                                threw = true;
                                throw LoaderFailure("never asked for");
                              }
                            },
                            {.depth = 3});
    ASSERT_NE(p.next(), nullptr);
    ASSERT_TRUE(eventually([&] { return threw.load(); }));
  }  // no terminate, no exception from the destructor
  SUCCEED();
}

TEST(Prefetch, SlotsComeFromMakeSlotAndKeepTheirCapacity) {
  int made = 0;
  std::set<const int64_t*> buffers;
  hvd::Prefetcher<Item> p(
      12, [](int64_t i, Item& item) { item.payload.assign(64, i); }, {.depth = 2},
      [&] {
        ++made;
        Item item;
        item.payload.reserve(64);
        return item;
      });
  EXPECT_EQ(made, 3);
  while (Item* item = p.next()) buffers.insert(item->payload.data());
  EXPECT_EQ(buffers.size(), 3u) << "the ring's three buffers are reused, not reallocated";
}

TEST(Prefetch, BadOptionsAreRefusedWithTheFix) {
  const auto fill = [](int64_t, int) {};
  try {
    hvd::PrefetchQueue q(4, fill, {.depth = -1});
    FAIL() << "depth -1 accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(),
                 "PrefetchOptions::depth is -1: it must be 0 (no prefetch) or more (items filled "
                 "ahead).");
  }
  try {
    hvd::PrefetchQueue q(4, fill, {.depth = 2, .threads = 0});
    FAIL() << "0 threads accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(),
                 "PrefetchOptions::threads is 0: it must be at least 1 (loader threads).");
  }
  try {
    hvd::PrefetchQueue q(-3, fill);
    FAIL() << "count -3 accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(),
                 "PrefetchQueue: count is -3: it must be 0 or more (the number of items).");
  }
  EXPECT_THROW(hvd::PrefetchQueue(4, hvd::PrefetchQueue::Fill()), hvd::InvalidArgumentError);
  EXPECT_THROW(hvd::Prefetcher<Item>(4, hvd::Prefetcher<Item>::Fill()), hvd::InvalidArgumentError);
}

}  // namespace
}  // namespace hvdtest
