#pragma once

// The live performance parameters: the settings the background thread reads every cycle instead of
// once at init(), so that they can change while the job runs (HVD_AUTOTUNE, runtime/autotune.h).
//
// - The fusion threshold: every controller reads it each cycle, when it fuses the cycle's
//   responses (runtime/controller.cc fast_path, runtime/fusion.h). The ranks must fuse alike, so a
//   change is applied on every rank at the same cycle: the global set's negotiation carries it
//   (runtime/autotune.h), and every set's cycles follow the global set's on every rank.
// - The cycle time and the fusion window: the pacer reads them before each wait
//   (runtime/cycle_pacer.h). They are local timing, but change with the threshold all the same.
//
// They start from the Config (HVD_FUSION_THRESHOLD, HVD_CYCLE_TIME, HVD_FUSION_WINDOW). Reads are
// relaxed atomics (a cycle reads each value once); set() is the background thread's.
//
// Thread safety: any thread reads; the background thread writes.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace hvd {

struct ParameterValues {
  int64_t fusion_threshold_bytes = 64 << 20;
  double cycle_time_ms = 1.0;
  double fusion_window_us = 50;
  bool operator==(const ParameterValues&) const = default;
  // "HVD_FUSION_THRESHOLD=67108864 HVD_CYCLE_TIME=1 HVD_FUSION_WINDOW=50": a line a user can pin.
  std::string settings() const;
};

class Parameters {
 public:
  explicit Parameters(const ParameterValues& start) { set(start); }

  int64_t fusion_threshold_bytes() const { return threshold_.load(std::memory_order_relaxed); }
  std::chrono::steady_clock::duration cycle() const {
    return std::chrono::steady_clock::duration(cycle_.load(std::memory_order_relaxed));
  }
  std::chrono::steady_clock::duration fusion_window() const {
    return std::chrono::steady_clock::duration(window_.load(std::memory_order_relaxed));
  }
  ParameterValues values() const;
  void set(const ParameterValues& v);

 private:
  std::atomic<int64_t> threshold_{0};
  std::atomic<int64_t> cycle_{0};                   // steady_clock ticks
  std::atomic<int64_t> window_{0};                  // steady_clock ticks
  std::atomic<double> cycle_ms_{0}, window_us_{0};  // as given (values() returns them unrounded)
};

}  // namespace hvd
