// common/thread_cache.h: each thread's stash is its own, made on first use, destroyed (giving back
// what it holds) when the thread exits, and null from then on, also for a thread_local destructor
// that runs after it.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/thread_cache.h"

namespace hvd {
namespace {

std::atomic<int> made{0}, given_back{0};

struct Counted {
  Counted() { made.fetch_add(1); }
  ~Counted() { given_back.fetch_add(1); }
  int items = 0;
};

// A thread_local whose destructor runs after the stash's (constructed before the first get(), so
// destroyed after the stash's owner): it must find no stash.
struct LateUser {
  bool* saw_null = nullptr;
  ~LateUser() {
    if (saw_null) *saw_null = ThreadStash<Counted>::get() == nullptr;
  }
};

TEST(ThreadStash, OnePerThreadMadeOnFirstUseGivenBackAtExit) {
  const int made0 = made.load(), back0 = given_back.load();
  Counted* mine = ThreadStash<Counted>::get();
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(ThreadStash<Counted>::get(), mine);  // the same stash each time
  mine->items = 7;
  Counted* theirs = nullptr;
  bool late_saw_null = false;
  std::thread t([&] {
    static thread_local LateUser late;
    late.saw_null = &late_saw_null;
    theirs = ThreadStash<Counted>::get();
    theirs->items = 1;
  });
  t.join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(made.load() - made0, 2);
  EXPECT_EQ(given_back.load() - back0, 1);  // the other thread's, at its exit
  EXPECT_TRUE(late_saw_null);
  EXPECT_EQ(mine->items, 7);  // this thread's is untouched
}

}  // namespace
}  // namespace hvd
