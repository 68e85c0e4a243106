// The pool behind detail::make_handle_state() (runtime/handle.cc): the memory of dropped handle
// states is reused, a reused block holds a fresh state (nothing of the previous operation's
// result, error or count), the pool never keeps more than its bound, and states made and dropped
// on different threads (the user thread submits and waits, the background thread completes) stay
// correct. Under AddressSanitizer the pool is bypassed (plain make_shared) and only the state
// checks run.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "hvd/collectives.h"
#include "hvd/error.h"
#include "runtime/handle.h"

namespace hvd::detail {
namespace {

TEST(HandlePool, DroppedStatesAreReused) {
  if (!handle_pool_enabled()) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  std::vector<std::shared_ptr<HandleState>> states;
  for (int i = 0; i < 100; ++i) states.push_back(make_handle_state(1));
  const std::size_t before = handle_pool_size();
  std::vector<const HandleState*> addresses;
  for (const auto& s : states) addresses.push_back(s.get());
  states.clear();
  EXPECT_EQ(handle_pool_size(), before + 100);
  // The next ones come from the pool (last dropped first), not from malloc.
  for (int i = 0; i < 100; ++i) states.push_back(make_handle_state(1));
  EXPECT_EQ(handle_pool_size(), before);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(states[i].get(), addresses[99 - i]) << i;
}

TEST(HandlePool, AReusedBlockHoldsAFreshState) {
  auto old = make_handle_state(3);
  old->fail(ErrorKind::kCommunication, "rank 1 was lost");
  old->results().output = Tensor(DataType::kFloat32, {4, 4});
  old->results().received_splits = {1, 2, 3};
  old->set_join_result(2);
  old->popped_by = 77;
  const HandleState* address = old.get();
  old.reset();
  auto s = make_handle_state(2);
  if (handle_pool_enabled()) {
    EXPECT_EQ(s.get(), address);
  }
  EXPECT_FALSE(s->done());
  EXPECT_EQ(s->pending.load(), 2);
  EXPECT_EQ(s->error_kind, ErrorKind::kNone);
  EXPECT_EQ(s->results_if_any(), nullptr) << "the previous state's results were kept";
  EXPECT_TRUE(s->results().error.empty());
  EXPECT_EQ(s->results().output.size_bytes(), 0u);
  EXPECT_TRUE(s->results().received_splits.empty());
  EXPECT_EQ(s->join_result, -1);
  EXPECT_EQ(s->popped_by, 0u);
  // It completes after its own count, as a new state does.
  Handle h(s);
  s->complete_one();
  EXPECT_FALSE(s->done());
  s->complete_one();
  h.wait();
  EXPECT_TRUE(s->done());
}

// A state with its control block fills one 64-byte block, and the states made one after another
// (a step's submissions) lie side by side: a walk over a step's handles reads one line per handle,
// in address order. (The results that few operations leave are made only when asked for.)
TEST(HandlePool, AStepsStatesAreOneCacheLineEachSideBySide) {
  if (!handle_pool_enabled()) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  EXPECT_LE(sizeof(HandleState) + 16, 64u);
  // A trainer's steps: each submission's handle replaces the last step's in its place.
  std::vector<std::shared_ptr<HandleState>> states(1000);
  for (int step = 0; step < 3; ++step)
    for (auto& s : states) s = make_handle_state(1);
  int adjacent = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto a = reinterpret_cast<uintptr_t>(states[i].get());
    // The state follows the control block (16 bytes) in its block; the block is line-aligned.
    EXPECT_EQ((a - 16) % 64, 0u) << i;
    if (i > 0) {
      const auto b = reinterpret_cast<uintptr_t>(states[i - 1].get());
      adjacent += (a > b ? a - b : b - a) == 64;
    }
    EXPECT_EQ(states[i]->results_if_any(), nullptr) << i;
  }
  // (Before KeepsAtMostItsBound, which leaves the region's blocks and operator new's mixed.)
  EXPECT_GE(adjacent, 990) << "a step's states are not side by side";
}

TEST(HandlePool, KeepsAtMostItsBound) {
  if (!handle_pool_enabled()) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  std::vector<std::shared_ptr<HandleState>> states;
  for (int i = 0; i < 20000; ++i) states.push_back(make_handle_state(1));
  states.clear();
  // Every block of the region (8192), others while the shared list held fewer than 8192, and up
  // to 128 of this thread's own.
  EXPECT_GE(handle_pool_size(), 8192u);
  EXPECT_LE(handle_pool_size(), 2 * 8192u + 128u);
}

// One thread makes states and waits on them, another completes (or fails) them and drops its
// reference, sometimes before and sometimes after the waiter: every wait sees its own outcome.
TEST(HandlePool, StatesCrossThreads) {
  constexpr int kRounds = 2000;
  std::vector<std::shared_ptr<HandleState>> made(kRounds);
  std::vector<std::thread> workers;
  for (int round = 0; round < kRounds; round += 100) {
    std::vector<Handle> handles;
    for (int i = round; i < round + 100; ++i) {
      made[i] = make_handle_state(1);
      handles.emplace_back(made[i]);
    }
    std::thread completer([&made, round] {
      for (int i = round; i < round + 100; ++i) {
        std::shared_ptr<HandleState> s = std::move(made[i]);
        if (i % 7 == 0)
          s->fail(ErrorKind::kInvalidArgument, "tensor " + std::to_string(i) + " failed");
        else
          s->complete_one();
      }
    });
    for (int i = 0; i < 100; ++i) {
      const int k = round + i;
      if (k % 7 == 0) {
        try {
          handles[i].wait();
          ADD_FAILURE() << "tensor " << k << " did not throw";
        } catch (const InvalidArgumentError& e) {
          EXPECT_EQ(std::string(e.what()), "tensor " + std::to_string(k) + " failed");
        }
      } else {
        EXPECT_NO_THROW(handles[i].wait()) << k;
      }
    }
    completer.join();
  }
}

// A Handle may be dropped while its thread exits, by another thread_local's destructor that runs
// after the pool's own per-thread part is gone (destructors run in the reverse order of
// construction): the block goes straight to the shared list, where this thread finds it.
TEST(HandlePool, AStateDroppedWhileItsThreadExitsGoesToTheSharedList) {
  if (!handle_pool_enabled()) GTEST_SKIP() << "the pool is bypassed under AddressSanitizer";
  struct Holder {
    std::shared_ptr<HandleState> state;
  };
  // Empty the shared list and this thread's own blocks into states held here, so that the
  // worker's first state is a fresh block and the shared list's count is known.
  std::vector<std::shared_ptr<HandleState>> hold;
  while (handle_pool_size() > 0) hold.push_back(make_handle_state(1));
  std::thread([] {
    thread_local Holder holder;  // constructed first: destroyed after the pool's part
    holder.state = make_handle_state(1);
    holder.state->complete_one();
  }).join();
  EXPECT_EQ(handle_pool_size(), 1u) << "the exiting thread's block was not given back";
  std::shared_ptr<HandleState> again = make_handle_state(2);
  EXPECT_FALSE(again->done());
  EXPECT_EQ(again->pending.load(), 2);
  EXPECT_EQ(handle_pool_size(), 0u);
}

// Completion takes no lock (runtime/handle.h): the last complete_one() and a fail() that race on
// one state settle on exactly one outcome, which every waiter sees, whether it blocked before the
// race or arrived after it; a state with several tensors completes only after the last of them.
TEST(HandleState, CompletionAndFailureRaceToOneOutcome) {
  constexpr int kRounds = 500;
  int failed = 0, completed = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto s = make_handle_state(2);
    std::vector<std::thread> waiters;
    std::atomic<int> threw{0}, returned{0};
    for (int w = 0; w < 3; ++w)
      waiters.emplace_back([&, s] {
        try {
          Handle(s).wait();
          returned.fetch_add(1);
        } catch (const CommunicationError& e) {
          EXPECT_EQ(std::string(e.what()), "lost");
          threw.fetch_add(1);
        }
      });
    s->complete_one();
    EXPECT_FALSE(s->done()) << "done after 1 of 2 tensors, round " << round;
    std::thread failer([s] { s->fail(ErrorKind::kCommunication, "lost"); });
    s->complete_one();
    failer.join();
    for (auto& t : waiters) t.join();
    ASSERT_TRUE(s->done());
    // Every waiter saw the same outcome, and a late one sees it too.
    EXPECT_TRUE((threw == 3 && returned == 0) || (threw == 0 && returned == 3))
        << "round " << round << ": " << threw << " threw, " << returned << " returned";
    const bool error = s->error_kind != ErrorKind::kNone;
    EXPECT_EQ(error, threw == 3) << round;
    if (error) {
      ++failed;
      EXPECT_THROW(Handle(s).wait(), CommunicationError);
    } else {
      ++completed;
      EXPECT_NO_THROW(Handle(s).wait());
    }
    // Completion after the outcome changes nothing.
    s->complete_one();
    s->fail(ErrorKind::kInternal, "later");
    EXPECT_EQ(s->error_kind != ErrorKind::kNone, error);
  }
  EXPECT_EQ(failed + completed, kRounds);
}

}  // namespace
}  // namespace hvd::detail
