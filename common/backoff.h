#pragma once

// The polling back-off of every busy-wait in hvd (the controller's star exchange, the hierarchical
// ring's MPI_Test loop): spin while an answer is likely to come within microseconds, then yield the
// core, then sleep briefly, because ranks share cores with the trainer's compute threads.
//
//   Backoff backoff;                       // or Backoff(std::chrono::microseconds(20))
//   while (!done()) backoff.pause();
//
// Not thread-safe (one per loop); no MPI, no allocation.

#include <chrono>
#include <cstdint>
#include <thread>

namespace hvd {

class Backoff {
 public:
  static constexpr int64_t kSpinPolls = 2000;    // polls before the first yield
  static constexpr int64_t kYieldPolls = 20000;  // polls before the first sleep

  explicit Backoff(std::chrono::microseconds sleep = std::chrono::microseconds(50))
      : sleep_(sleep) {}

  // One wait between two polls.
  void pause() {
    ++polls_;
    if (polls_ > kYieldPolls)
      std::this_thread::sleep_for(sleep_);
    else if (polls_ > kSpinPolls)
      std::this_thread::yield();
  }
  // Past the spinning phase: a caller may check its (costlier) deadline on every poll from here.
  bool spinning() const { return polls_ <= kSpinPolls; }
  int64_t polls() const { return polls_; }
  void reset() { polls_ = 0; }

 private:
  std::chrono::microseconds sleep_;
  int64_t polls_ = 0;
};

}  // namespace hvd
