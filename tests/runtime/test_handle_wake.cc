// Completing a handle wakes a thread only when one waits on that handle (runtime/handle.h,
// HandleState::kWaiter). This executable defines syscall(), which libc's callers in libhvd (the
// futex calls of std::atomic's wait and notify) then reach instead of libc's: it counts the futex
// calls each thread makes and passes every call on to libc's syscall().
//
// The defect it catches: std::atomic::notify_all() made a futex system call for each handle
// completed in the bucket of one a user thread waited on (libstdc++ keeps one waiter count per
// bucket of a 16-entry table hashed by address; the pool's blocks put a quarter of the handles in
// each of four buckets): the library before the fix makes 250 calls in the first test.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/handle.h"

namespace {
thread_local long t_futex_calls = 0;
}  // namespace

extern "C" long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_futex) ++t_futex_calls;
  using Real = long (*)(long, ...);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "syscall"));
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

namespace hvd::detail {
namespace {

// Waits until `state` carries the waiter mark (at most 5 s: then the test's expectations say what
// went wrong), then a little longer: the waiting thread is then in its futex wait.
void until_waited(const HandleState& state) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!(state.phase.load() & HandleState::kWaiter) && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  EXPECT_TRUE(state.phase.load() & HandleState::kWaiter) << "the waiter never marked the handle";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(HandleWake, CompletingHandlesNobodyWaitsOnMakesNoSystemCall) {
  std::vector<std::shared_ptr<HandleState>> states;
  for (int i = 0; i < 1000; ++i) states.push_back(make_handle_state(1));
  auto waited = make_handle_state(1);
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    waited->wait_done();
    woke = true;
  });
  until_waited(*waited);
  const long before = t_futex_calls;
  for (auto& s : states) s->complete_one();
  EXPECT_EQ(t_futex_calls - before, 0) << "futex calls while completing 1000 handles no thread "
                                          "waits on (one thread waits on another handle)";
  for (auto& s : states) EXPECT_TRUE(s->done());
  EXPECT_FALSE(woke.load());
  // The waited handle: its completion wakes the waiter, with one call.
  waited->complete_one();
  EXPECT_EQ(t_futex_calls - before, 1);
  waiter.join();
  EXPECT_TRUE(woke.load());
}

// A failure wakes a waiter too, and a handle completed before anyone waits needs no wake-up.
TEST(HandleWake, FailuresWakeWaitersAndDoneHandlesNeedNoWait) {
  auto failed = make_handle_state(2);
  std::thread waiter([&] { failed->wait_done(); });
  until_waited(*failed);
  failed->complete_one();  // one of two: still running
  failed->fail(ErrorKind::kCommunication, "rank 1 was lost");
  waiter.join();
  EXPECT_TRUE(failed->done());
  EXPECT_EQ(failed->results().error, "rank 1 was lost");
  auto early = make_handle_state(1);
  early->complete_one();
  const long before = t_futex_calls;
  early->wait_done();
  EXPECT_EQ(t_futex_calls, before);
}

// Many waiters on one handle, and waiters arriving while the handle completes: every one returns.
TEST(HandleWake, EveryWaiterReturns) {
  for (int round = 0; round < 200; ++round) {
    auto s = make_handle_state(1);
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i) waiters.emplace_back([&] { s->wait_done(); });
    if (round % 2) std::this_thread::sleep_for(std::chrono::microseconds(50));
    s->complete_one();
    for (auto& w : waiters) w.join();
    EXPECT_TRUE(s->done());
  }
}

}  // namespace
}  // namespace hvd::detail
