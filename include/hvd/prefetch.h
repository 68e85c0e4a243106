#pragma once

// Input pipelines that keep the accelerator fed: loader threads prepare the next items (batches)
// while the training thread works on the current one, through a bounded queue.
//
//   struct Batch {
//     std::vector<float> pixels;
//   };
//   hvd::Prefetcher<Batch> loader(steps, [](int64_t step, Batch& b) {  // on a loader thread:
//     b.pixels.assign(784, static_cast<float>(step));                 //   read, decode, ...
//   }, {.depth = 2});
//   while (Batch* batch = loader.next()) {  // step order; waits only when the loader is behind
//     w = batch->pixels;
//     train_one_step();
//   }
//
// Contract.
// Order: items 0..count-1 are filled once each by fill(item, slot) and delivered by next() in
// item order, whatever the number of loader threads, so a trainer sees the same batches in the
// same order with any depth: its results do not depend on it.
// Bound: while the consumer holds item c (from next() until its next call), loaders fill at most
// items c+1..c+depth (before the first next(), items 0..depth). There are depth + 1 slots, reused
// in a ring (item i in slot i % slots()); a slot's buffers keep their capacity between items.
// Depth 0 is no prefetch and no thread: next() fills its item on the calling thread.
// Errors: fill runs on the loader threads (with threads > 1, concurrently for different items and
// slots). An exception it throws is rethrown by the next() that would have returned that item,
// after every earlier item was delivered; no later item is started, and every later next()
// rethrows it too.
// Shutdown: destruction at any point (the consumer stopping early, an exception unwinding) stops
// the loaders: a fill in progress runs to its end, no other starts, the threads are joined. It
// never waits for the consumer; errors of items never asked for are dropped.
// wait_seconds(): the time next() spent waiting for items (with depth 0: filling them), i.e. the
// time the consumer was held up by its input pipeline.
// Thread safety: next(), wait_seconds() and the destructor on one consumer thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace hvd {

struct PrefetchOptions {
  int depth = 2;    // items filled ahead of the one the consumer holds; 0: no prefetch
  int threads = 1;  // loader threads (ignored with depth 0)
};

// The queue behind Prefetcher, over slot numbers: fill(item, slot) fills slot 0..slots()-1, which
// the caller owns the buffers of; next() returns the slot of the next item (or -1 after the last).
// Use it when the slots are not one C++ object each (e.g. pinned host memory plus device copies).
class PrefetchQueue {
 public:
  using Fill = std::function<void(int64_t item, int slot)>;

  // Starts the loader threads. Throws InvalidArgumentError for a negative count or depth, threads
  // below 1 or an empty fill.
  PrefetchQueue(int64_t count, Fill fill, const PrefetchOptions& options = {});
  ~PrefetchQueue();
  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // depth + 1: the slots a queue with these options uses (checks the options as the constructor).
  static int slots_for(const PrefetchOptions& options);
  int slots() const;
  int64_t count() const;

  // Gives the previous item's slot back to the loaders, waits for the next item and returns its
  // slot, which is the caller's until its next call; -1 when all count items were returned.
  // Rethrows the exception that filling this item threw.
  int next();
  double wait_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A PrefetchQueue whose slots are Slot objects (default-constructed, or made by make_slot on the
// constructing thread before any loader starts).
template <class Slot>
class Prefetcher {
 public:
  using Fill = std::function<void(int64_t item, Slot& slot)>;

  Prefetcher(int64_t count, Fill fill, const PrefetchOptions& options = {},
             const std::function<Slot()>& make_slot = {})
      : slots_(make_slots(options, make_slot)),
        fill_(std::move(fill)),
        queue_(count,
               fill_ ? PrefetchQueue::Fill([this](int64_t i, int s) { fill_(i, slots_[s]); })
                     : PrefetchQueue::Fill(),
               options) {}
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next item, valid until the next call; nullptr after the last. Rethrows fill's exception.
  Slot* next() {
    const int s = queue_.next();
    return s < 0 ? nullptr : &slots_[static_cast<size_t>(s)];
  }
  int64_t count() const { return queue_.count(); }
  double wait_seconds() const { return queue_.wait_seconds(); }

 private:
  static std::vector<Slot> make_slots(const PrefetchOptions& options,
                                      const std::function<Slot()>& make_slot) {
    const int n = PrefetchQueue::slots_for(options);
    std::vector<Slot> slots;
    slots.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) slots.push_back(make_slot ? make_slot() : Slot());
    return slots;
  }

  // Declared before queue_: they outlive the loader threads, which queue_'s destructor joins.
  std::vector<Slot> slots_;
  Fill fill_;
  PrefetchQueue queue_;
};

}  // namespace hvd
