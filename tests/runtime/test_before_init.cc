// The lifecycle seen from outside: every call before init() and after shutdown() throws an
// hvd::Error that says so; init() is idempotent; shutdown() is safe to call twice. This binary
// holds only this test, so that nothing has called init() before it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

// fn must throw hvd::Error whose message says why: it mentions init (before init()) or
// shutdown (after shutdown()).
void expect_not_initialized(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << " did not throw";
  } catch (const hvd::Error& e) {
    EXPECT_TRUE(contains_ci(e.what(), "init") || contains_ci(e.what(), "shutdown"))
        << what << ": the message should say hvd is not running: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw a non-hvd exception: " << e.what();
  }
}

void expect_all_calls_refused(const std::string& when) {
  EXPECT_FALSE(hvd::initialized()) << when;
  expect_not_initialized([] { (void)hvd::rank(); }, "rank() " + when);
  expect_not_initialized([] { (void)hvd::size(); }, "size() " + when);
  expect_not_initialized([] { (void)hvd::local_rank(); }, "local_rank() " + when);
  expect_not_initialized([] { (void)hvd::local_size(); }, "local_size() " + when);
  expect_not_initialized([] { (void)hvd::cross_rank(); }, "cross_rank() " + when);
  expect_not_initialized([] { (void)hvd::cross_size(); }, "cross_size() " + when);
  std::vector<float> v(3, 1.0f);
  expect_not_initialized([&] { (void)hvd::allreduce_async(std::span<float>(v), "lifecycle.ar"); },
                         "allreduce_async() " + when);
}

TEST(Lifecycle, CallsBeforeInitAndAfterShutdownThrow) {
  expect_all_calls_refused("before init()");

  {
    Watchdog w("hvd::init()");
    hvd::init();
    hvd::init();  // idempotent
  }
  ASSERT_TRUE(hvd::initialized());
  const int rank = hvd::rank(), size = hvd::size();
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, size);
  EXPECT_GE(hvd::local_rank(), 0);
  EXPECT_LT(hvd::local_rank(), hvd::local_size());
  EXPECT_GE(hvd::cross_rank(), 0);
  EXPECT_LT(hvd::cross_rank(), hvd::cross_size());
  EXPECT_LE(hvd::local_size() * hvd::cross_size(), size * size);
  // One machine here: every rank on one node.
  EXPECT_EQ(hvd::local_size(), size);
  EXPECT_EQ(hvd::local_rank(), rank);
  EXPECT_EQ(hvd::cross_size(), 1);
  EXPECT_TRUE(hvd::is_homogeneous());

  std::vector<int32_t> v = {rank};
  {
    Watchdog w("allreduce before shutdown");
    hvd::allreduce(v, "lifecycle.sum", ReduceOp::kSum);
  }
  EXPECT_EQ(v[0], size * (size - 1) / 2);

  {
    Watchdog w("hvd::shutdown()");
    hvd::shutdown();
    hvd::shutdown();  // safe twice
  }
  expect_all_calls_refused("after shutdown()");
}

// shutdown() while other threads of the rank keep submitting (all-reduces, and barriers, which
// wait inside the call): each submission either runs (the right sum), fails through its handle
// with an hvd::Error, or throws at once that hvd was shut down; never a crash, a hang or another
// exception, and every thread sees the shutdown within seconds. (After the test above: the test's
// main owns MPI, so hvd::init() works again.) Five rounds of init(), submissions and shutdown():
// the crash this found (a one-rank job's inline all-reduce on the communicators shutdown() had
// freed) came in about one round in six.
void shutdown_while_threads_submit(int round) {
  SCOPED_TRACE("round " + std::to_string(round));
  {
    Watchdog w("hvd::init() again");
    hvd::init();
  }
  const int size = hvd::size();
  constexpr int kThreads = 4;  // the last one calls barrier(), which waits inside the call
  struct Seen {
    int ran = 0, wrong = 0, failed = 0, refused = 0, other = 0;
    std::string other_what;
  };
  std::vector<Seen> seen(kThreads);
  std::atomic<int> running{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Seen& s = seen[t];
      std::vector<float> v(16);
      ++running;
      for (int i = 0;; ++i) {
        std::fill(v.begin(), v.end(), 1.0f);
        if (t == kThreads - 1) {
          try {
            hvd::barrier();
            ++s.ran;
          } catch (const hvd::Error& e) {
            if (contains_ci(e.what(), "called after hvd::shutdown()")) {
              ++s.refused;
              return;
            }
            ++s.failed;  // in flight when hvd shut down
          } catch (const std::exception& e) {
            ++s.other;
            s.other_what = e.what();
            return;
          }
          continue;
        }
        try {
          hvd::Handle h = hvd::allreduce_async(
              std::span<float>(v), "race." + std::to_string(t) + "." + std::to_string(i % 4),
              ReduceOp::kSum);
          try {
            h.wait();
            ++s.ran;
            if (v[15] != static_cast<float>(size)) ++s.wrong;
          } catch (const hvd::Error&) {
            ++s.failed;  // in flight when hvd shut down
          }
        } catch (const hvd::Error& e) {
          if (contains_ci(e.what(), "shutdown")) {
            ++s.refused;
            return;
          }
          ++s.other;
          s.other_what = e.what();
          return;
        } catch (const std::exception& e) {
          ++s.other;
          s.other_what = e.what();
          return;
        }
      }
    });
  while (running.load() < kThreads) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  {
    Watchdog w("hvd::shutdown() while threads submit", 30);
    hvd::shutdown();
  }
  {
    Watchdog w("the submitting threads after shutdown()", 30);
    for (auto& th : threads) th.join();
  }
  for (int t = 0; t < kThreads; ++t) {
    const Seen& s = seen[t];
    EXPECT_EQ(s.other, 0) << "thread " << t << ": " << s.other_what;
    EXPECT_EQ(s.refused, 1) << "thread " << t << " did not see the shutdown";
    EXPECT_EQ(s.wrong, 0) << "thread " << t << ": " << s.wrong << " of " << s.ran << " sums wrong";
    EXPECT_GT(s.ran, 0) << "thread " << t << " ran nothing in 40 ms";
  }
  EXPECT_FALSE(hvd::initialized());
}

TEST(Lifecycle, ShutdownWhileThreadsSubmit) {
  for (int round = 0; round < 5; ++round) shutdown_while_threads_submit(round);
}

}  // namespace
}  // namespace hvdtest
