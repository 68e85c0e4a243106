#include "runtime/parameters.h"

#include "common/number_text.h"

namespace hvd {

std::string ParameterValues::settings() const {
  return "HVD_FUSION_THRESHOLD=" + std::to_string(fusion_threshold_bytes) +
         " HVD_CYCLE_TIME=" + number_text(cycle_time_ms) +
         " HVD_FUSION_WINDOW=" + number_text(fusion_window_us);
}

ParameterValues Parameters::values() const {
  ParameterValues v;
  v.fusion_threshold_bytes = fusion_threshold_bytes();
  v.cycle_time_ms = cycle_ms_.load(std::memory_order_relaxed);
  v.fusion_window_us = window_us_.load(std::memory_order_relaxed);
  return v;
}

void Parameters::set(const ParameterValues& v) {
  using clock = std::chrono::steady_clock;
  threshold_.store(v.fusion_threshold_bytes, std::memory_order_relaxed);
  cycle_.store(std::chrono::duration_cast<clock::duration>(
                   std::chrono::duration<double, std::milli>(v.cycle_time_ms))
                   .count(),
               std::memory_order_relaxed);
  window_.store(std::chrono::duration_cast<clock::duration>(
                    std::chrono::duration<double, std::micro>(v.fusion_window_us))
                    .count(),
                std::memory_order_relaxed);
  cycle_ms_.store(v.cycle_time_ms, std::memory_order_relaxed);
  window_us_.store(v.fusion_window_us, std::memory_order_relaxed);
}

}  // namespace hvd
