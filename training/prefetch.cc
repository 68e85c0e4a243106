// The bounded prefetch queue of hvd/prefetch.h.
//
// Why it works. Items are claimed by loaders in order (next_claim_), and item i always lives in
// slot i % slots. The consumer gives a slot back when it asks for the next item (released =
// items returned so far), and a loader may claim item i only while i < released + slots: so item
// i + slots is never started before item i's slot was given back, two items never share a slot at
// the same time, and while the consumer holds item c the loaders fill at most c+1..c+depth. The
// consumer waits for the one item it needs (filled_[slot] == item); loaders may finish out of
// order, which does not matter since each item has its own slot. A failed item stops further
// claims at it (claims stop at failed_), so the consumer, which takes items in order, reaches the
// failure after every earlier item and never waits for an item that will not come.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/error.h"
#include "hvd/prefetch.h"

namespace hvd {

struct PrefetchQueue::State {
  int64_t count = 0;
  Fill fill;
  PrefetchOptions options;
  int slots = 1;

  std::mutex mu;
  std::condition_variable loader_cv;    // a slot was given back, a failure, or stop
  std::condition_variable consumer_cv;  // an item was filled
  int64_t next_claim = 0;               // the next item a loader starts
  int64_t taken = 0;                    // items next() returned
  int64_t released = 0;                 // items whose slot the consumer gave back
  int64_t failed = std::numeric_limits<int64_t>::max();  // the first item whose fill threw
  std::vector<int64_t> filled;             // per slot: the item filled in it last (-1: none)
  std::vector<std::exception_ptr> errors;  // per slot: what that fill threw
  std::exception_ptr delivered_error;      // the failure next() has rethrown
  bool stop = false;
  double wait_seconds = 0;
  std::vector<std::thread> loaders;

  void loader_loop();
  void stop_and_join();
};

void PrefetchQueue::State::loader_loop() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    loader_cv.wait(lock, [&] {
      return stop || next_claim >= count || next_claim >= failed || next_claim < released + slots;
    });
    if (stop || next_claim >= count || next_claim >= failed) return;
    const int64_t item = next_claim++;
    const int slot = static_cast<int>(item % slots);
    lock.unlock();
    std::exception_ptr error;
    try {
      fill(item, slot);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    filled[static_cast<size_t>(slot)] = item;
    errors[static_cast<size_t>(slot)] = error;
    if (error && item < failed) {
      failed = item;
      loader_cv.notify_all();  // the other loaders claim nothing past it
    }
    consumer_cv.notify_all();
  }
}

void PrefetchQueue::State::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  loader_cv.notify_all();
  for (auto& t : loaders)
    if (t.joinable()) t.join();
  loaders.clear();
}

int PrefetchQueue::slots_for(const PrefetchOptions& options) {
  if (options.depth < 0)
    throw InvalidArgumentError("PrefetchOptions::depth is " + std::to_string(options.depth) +
                               ": it must be 0 (no prefetch) or more (items filled ahead).");
  if (options.threads < 1)
    throw InvalidArgumentError("PrefetchOptions::threads is " + std::to_string(options.threads) +
                               ": it must be at least 1 (loader threads).");
  if (options.depth == std::numeric_limits<int>::max())
    throw InvalidArgumentError("PrefetchOptions::depth is " + std::to_string(options.depth) +
                               ": too large.");
  return options.depth + 1;
}

PrefetchQueue::PrefetchQueue(int64_t count, Fill fill, const PrefetchOptions& options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.slots = slots_for(options);
  if (count < 0)
    throw InvalidArgumentError("PrefetchQueue: count is " + std::to_string(count) +
                               ": it must be 0 or more (the number of items).");
  if (!fill) throw InvalidArgumentError("PrefetchQueue: the fill function is empty.");
  s.count = count;
  s.fill = std::move(fill);
  s.options = options;
  s.filled.assign(static_cast<size_t>(s.slots), -1);
  s.errors.resize(static_cast<size_t>(s.slots));
  if (options.depth == 0 || count == 0) return;
  const int64_t threads = std::min<int64_t>(options.threads, count);
  try {
    for (int64_t i = 0; i < threads; ++i) s.loaders.emplace_back([&s] { s.loader_loop(); });
  } catch (...) {
    s.stop_and_join();
    throw;
  }
}

PrefetchQueue::~PrefetchQueue() { state_->stop_and_join(); }

int PrefetchQueue::slots() const { return state_->slots; }
int64_t PrefetchQueue::count() const { return state_->count; }
double PrefetchQueue::wait_seconds() const { return state_->wait_seconds; }

int PrefetchQueue::next() {
  State& s = *state_;
  if (s.delivered_error) std::rethrow_exception(s.delivered_error);
  if (s.taken >= s.count) return -1;
  const auto start = std::chrono::steady_clock::now();
  const auto waited = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const int64_t item = s.taken;
  if (s.options.depth == 0) {
    // No prefetch: fill on the caller's thread, now.
    ++s.taken;
    try {
      s.fill(item, 0);
    } catch (...) {
      s.delivered_error = std::current_exception();
      s.wait_seconds += waited();
      throw;
    }
    s.wait_seconds += waited();
    return 0;
  }
  const int slot = static_cast<int>(item % s.slots);
  std::unique_lock<std::mutex> lock(s.mu);
  s.released = s.taken;  // the previous item's slot goes back to the loaders
  s.loader_cv.notify_all();
  s.consumer_cv.wait(lock, [&] { return s.filled[static_cast<size_t>(slot)] == item; });
  ++s.taken;
  s.wait_seconds += waited();
  if (std::exception_ptr e = s.errors[static_cast<size_t>(slot)]) {
    s.delivered_error = e;
    s.stop = true;
    lock.unlock();
    s.loader_cv.notify_all();
    std::rethrow_exception(e);
  }
  return slot;
}

}  // namespace hvd
