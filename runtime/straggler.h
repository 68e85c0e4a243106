#pragma once

// The slow rank, named every step (hvd/straggler.h; docs/reliability.md, "The slow rank").
//
// The measure. The response list of a cycle is the same on every rank. For the operations a cycle
// released, each rank knows how long it waited: from the arrival of the last of its own tensors
// among them (its submission, or for a tensor in a lane the pop that took it) to the end of the
// cycle that released them, on its own clock (no clock is compared across ranks). The rank that
// arrived last waited the least; every other rank waited about its lateness longer.
//
// The combine. In the next cycle every rank adds two words to its control vector (the controller's
// [flags | hit bits | valid bits | these]), which the channel combines by unsigned maximum
// (comm::ControlChannel::set_max_words) while it ANDs the rest:
//   first = (wait + 1) << 24 | rank             the maximum: the largest wait, and whose
//   last  = (kWaitLimit - wait) << 24 | rank    the maximum: the smallest wait, and whose
// Maximum is associative and commutative, so the binomial tree forwards the two words level by
// level in the messages it sends anyway. A rank with nothing to measure (none of its tensors in
// the release: it had joined) sends zeros, which every real word exceeds. The reply carries the
// combined vector down to every rank, so every rank decodes the same measure: which rank was last
// (`last`), and by how much (largest wait - smallest). Ranks are channel ranks below 2^24; waits
// are microseconds, at most 2^40 - 2 (12 days).
//
// The window (StragglerWindow). The background thread counts releases and adds each measure as it
// arrives; a user thread's take() returns the window since the previous take(), after waiting
// (bounded) for the measure of the releases already counted.
//
// Thread safety: encode/decode are pure; StragglerWindow's methods may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "hvd/straggler.h"

namespace hvd {

class Timeline;

namespace straggler {

inline constexpr size_t kWords = 2;
inline constexpr int kRankBits = 24;
inline constexpr int kMaxRanks = 1 << kRankBits;
inline constexpr uint64_t kWaitLimit = (uint64_t{1} << 40) - 1;

// This rank's two words for a release it waited `wait_us` for (< 0: nothing to measure, zeros).
void encode(int64_t wait_us, int rank, uint64_t* words);
// Combines two ranks' words (what the channel does): the maximum of each.
void combine(uint64_t* into, const uint64_t* from);

struct Measure {
  bool any = false;         // some rank measured the release
  int last_rank = -1;       // waited the least: arrived last
  int first_rank = -1;      // waited the most
  int64_t lateness_us = 0;  // largest wait - smallest
};
Measure decode(const uint64_t* words);

}  // namespace straggler

class StragglerWindow {
 public:
  // `size`: the ranks (of the global set); `threshold_ms`: HVD_STRAGGLER_THRESHOLD_MS;
  // `timeline`: rank 0's, or null.
  StragglerWindow(int size, double threshold_ms, Timeline* timeline = nullptr);

  // Background thread: a cycle released operations (its measure comes with the next cycle).
  void released() { released_.fetch_add(1, std::memory_order_release); }
  // Background thread: the measure of the oldest release not yet measured arrived.
  void add(const straggler::Measure& m);

  // The report since the previous take(). Waits first, at most `patience`, until every release
  // counted when it was called has been measured; `ask_cycle` (may be empty) is called when it
  // has to wait (to start the next cycle at once).
  StragglerReport take(std::chrono::milliseconds patience, const std::function<void()>& ask_cycle);

  double threshold_ms() const { return threshold_ms_; }
  int64_t released_count() const { return released_.load(std::memory_order_acquire); }

 private:
  const int size_;
  const double threshold_ms_;
  Timeline* const timeline_;
  std::atomic<int64_t> released_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t measured_ = 0;  // under mu_
  StragglerReport window_;
};

}  // namespace hvd
