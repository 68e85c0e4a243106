#include "runtime/stall_inspector.h"

#include <algorithm>
#include <cstdio>

namespace hvd {

StallInspector::StallInspector(const StallOptions& options)
    : options_(options),
      next_check_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options.check_seconds))),
      next_warning_(next_check_) {}

double StallInspector::fast_path_patience_seconds() const {
  if (options_.disabled) return 1e18;
  double limit = options_.check_seconds / 2;
  if (options_.shutdown_seconds > 0) limit = std::min(limit, options_.shutdown_seconds / 2);
  return std::max(0.05, std::min(limit, 5.0));
}

std::string StallInspector::describe(const Controller::Stall& s) {
  std::string ranks;
  for (size_t i = 0; i < s.missing_ranks.size(); ++i) ranks += (i ? ", " : "") + std::to_string(s.missing_ranks[i]);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f s", s.seconds);
  return "'" + s.name + "' (missing rank" + (s.missing_ranks.size() == 1 ? " " : "s ") + ranks + "; waiting " + secs + ")";
}

StallInspector::Verdict StallInspector::check(const Controller& controller) {
  Verdict v;
  if (options_.disabled) return v;
  auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return v;
  next_check_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(std::min(options_.check_seconds,
                                                                 options_.shutdown_seconds > 0 ? options_.shutdown_seconds / 4 + 0.05 : 1e18)));
  std::vector<Controller::Stall> stalls = controller.stalled(std::min(options_.check_seconds,
                                                                      options_.shutdown_seconds > 0 ? options_.shutdown_seconds : 1e18));
  std::string list;
  for (const auto& s : stalls) {
    if (s.seconds >= options_.check_seconds) list += (list.empty() ? "" : ", ") + describe(s);
    if (options_.shutdown_seconds > 0 && s.seconds >= options_.shutdown_seconds) {
      std::string ranks;
      for (size_t i = 0; i < s.missing_ranks.size(); ++i) ranks += (i ? ", " : "") + std::to_string(s.missing_ranks[i]);
      v.failures.emplace_back(
          s.name, "stalled: rank" + std::string(s.missing_ranks.size() == 1 ? " " : "s ") + ranks +
                      " did not submit '" + s.name + "' within HVD_STALL_SHUTDOWN_TIME_SECONDS=" +
                      std::to_string(static_cast<int>(options_.shutdown_seconds)) +
                      " s, so hvd shut down. Make every rank submit the same tensors (a rank that returned early, "
                      "skipped a step or took another branch?).");
    }
  }
  if (!list.empty() && now >= next_warning_) {
    next_warning_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(options_.check_seconds));
    v.warnings.push_back("stall: tensors submitted by some ranks and not others for more than " +
                         std::to_string(static_cast<int>(options_.check_seconds)) + " s: " + list +
                         ". Every rank must submit the same tensors; HVD_STALL_SHUTDOWN_TIME_SECONDS fails them.");
  }
  if (!v.failures.empty()) v.shutdown_reason = v.failures.front().second;
  return v;
}

}  // namespace hvd
