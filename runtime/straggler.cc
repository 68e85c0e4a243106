#include "runtime/straggler.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "runtime/timeline.h"

namespace hvd {
namespace straggler {
namespace {
constexpr uint64_t kRankMask = (uint64_t{1} << kRankBits) - 1;
}  // namespace

void encode(int64_t wait_us, int rank, uint64_t* words) {
  if (wait_us < 0 || rank < 0 || rank >= kMaxRanks) {
    words[0] = words[1] = 0;
    return;
  }
  const uint64_t w = std::min<uint64_t>(static_cast<uint64_t>(wait_us), kWaitLimit - 1);
  const uint64_t r = static_cast<uint64_t>(rank);
  words[0] = (w + 1) << kRankBits | r;
  words[1] = (kWaitLimit - w) << kRankBits | r;
}

void combine(uint64_t* into, const uint64_t* from) {
  for (size_t i = 0; i < kWords; ++i) into[i] = std::max(into[i], from[i]);
}

Measure decode(const uint64_t* words) {
  Measure m;
  if (words[0] == 0 || words[1] == 0) return m;
  const int64_t largest = static_cast<int64_t>((words[0] >> kRankBits) - 1);
  const int64_t smallest = static_cast<int64_t>(kWaitLimit - (words[1] >> kRankBits));
  m.any = true;
  m.first_rank = static_cast<int>(words[0] & kRankMask);
  m.last_rank = static_cast<int>(words[1] & kRankMask);
  m.lateness_us = std::max<int64_t>(0, largest - smallest);
  return m;
}

}  // namespace straggler

StragglerWindow::StragglerWindow(int size, double threshold_ms, Timeline* timeline)
    : size_(size), threshold_ms_(threshold_ms), timeline_(timeline) {
  window_.threshold_ms = threshold_ms_;
  window_.last_counts.assign(static_cast<size_t>(size_), 0);
}

void StragglerWindow::add(const straggler::Measure& m) {
  const double ms = static_cast<double>(m.lateness_us) / 1000.0;
  const bool named = m.any && ms >= threshold_ms_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++measured_;
    ++window_.releases;
    if (m.any && (window_.last_rank < 0 || ms > window_.lateness_ms)) {
      window_.lateness_ms = ms;
      window_.last_rank = m.last_rank;
    }
    if (named && m.last_rank < size_) ++window_.last_counts[static_cast<size_t>(m.last_rank)];
  }
  cv_.notify_all();
  if (named && timeline_) {
    char args[96];
    std::snprintf(args, sizeof(args), "{\"rank\":%d,\"lateness_ms\":%.3f}", m.last_rank, ms);
    timeline_->instant("STRAGGLER", args);
  }
}

StragglerReport StragglerWindow::take(std::chrono::milliseconds patience,
                                      const std::function<void()>& ask_cycle) {
  const int64_t target = released_.load(std::memory_order_acquire);
  std::unique_lock<std::mutex> lock(mu_);
  if (measured_ < target) {
    if (ask_cycle) {
      lock.unlock();
      ask_cycle();
      lock.lock();
    }
    cv_.wait_for(lock, patience, [&] { return measured_ >= target; });
  }
  StragglerReport out = window_;
  if (out.last_rank >= 0 && out.lateness_ms >= threshold_ms_) out.rank = out.last_rank;
  window_.releases = 0;
  window_.lateness_ms = 0;
  window_.last_rank = -1;
  std::fill(window_.last_counts.begin(), window_.last_counts.end(), 0);
  return out;
}

}  // namespace hvd
