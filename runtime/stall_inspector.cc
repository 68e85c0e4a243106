#include "runtime/stall_inspector.h"

#include <algorithm>
#include <cstdio>

#include "common/number_text.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds_of(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

// At most this many tensors are named in one warning or error; the rest are counted.
constexpr size_t kMaxListed = 8;

}  // namespace

StallInspector::StallInspector(const StallOptions& options)
    : options_(options), next_check_(Clock::now()), next_warning_(Clock::now()) {}

double StallInspector::fast_path_patience_seconds() const {
  if (options_.disabled) return 1e18;
  double limit = options_.check_seconds / 2;
  if (options_.shutdown_seconds > 0) limit = std::min(limit, options_.shutdown_seconds / 2);
  return std::max(0.05, std::min(limit, 5.0));
}

std::string StallInspector::rank_list(const std::vector<int>& ranks) {
  return hvd::rank_list(ranks);
}

std::string StallInspector::describe(const Controller::Stall& s) {
  return "'" + s.name + "' (submitted by " + rank_list(s.submitted_ranks) + "; missing " +
         rank_list(s.missing_ranks) + "; " + seconds_text(s.seconds) + ")";
}

StallInspector::Verdict StallInspector::check(const Controller& controller) {
  if (options_.disabled) return {};
  const auto now = Clock::now();
  if (now < next_check_) return {};
  next_check_ = now + seconds_of(kPollSeconds);
  double threshold = options_.check_seconds;
  if (options_.shutdown_seconds > 0) threshold = std::min(threshold, options_.shutdown_seconds);
  return judge(controller.stalled(threshold), now);
}

StallInspector::Verdict StallInspector::judge(const std::vector<Controller::Stall>& stalls,
                                              Clock::time_point now) {
  Verdict v;
  if (options_.disabled) return v;
  // Oldest first: the one that explains the others usually stalled first.
  std::vector<const Controller::Stall*> sorted;
  for (const auto& s : stalls) sorted.push_back(&s);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](auto* a, auto* b) { return a->seconds > b->seconds; });
  auto list_of = [&](double older_than) {
    std::string list;
    size_t n = 0, more = 0;
    for (const auto* s : sorted) {
      if (s->seconds < older_than) continue;
      if (n++ < kMaxListed)
        list += (list.empty() ? "" : "; ") + describe(*s);
      else
        ++more;
    }
    if (more) list += "; and " + std::to_string(more) + " more";
    return list;
  };

  const std::string warn = list_of(options_.check_seconds);
  if (!warn.empty() && now >= next_warning_) {
    next_warning_ = now + seconds_of(options_.check_seconds);
    v.warnings.push_back(
        "stall: tensors submitted by some ranks and not others for more than " +
        number_text(options_.check_seconds) + " s (HVD_STALL_CHECK_TIME_SECONDS): " + warn +
        ". Every rank must submit the same tensors (a rank that skipped a step, returned early or "
        "took another branch?)" +
        (options_.shutdown_seconds > 0
             ? "; hvd shuts down after HVD_STALL_SHUTDOWN_TIME_SECONDS=" +
                   number_text(options_.shutdown_seconds) + " s."
             : "; HVD_STALL_SHUTDOWN_TIME_SECONDS fails them instead of waiting forever."));
  }
  if (options_.shutdown_seconds > 0 && !sorted.empty() &&
      sorted.front()->seconds >= options_.shutdown_seconds) {
    // Every stalled tensor fails, with one message naming them all: the tensor one rank skipped
    // and the one another rank is stuck on are usually two sides of the same mistake.
    const std::string reason = "stalled for more than HVD_STALL_SHUTDOWN_TIME_SECONDS=" +
                               number_text(options_.shutdown_seconds) +
                               " s, so hvd shut down: " + list_of(0) +
                               ". Every rank must submit the same tensors (a rank that skipped a "
                               "step, returned early or took another "
                               "branch?).";
    for (const auto* s : sorted) v.failures.emplace_back(s->name, reason);
    v.shutdown_reason = reason;
  }
  return v;
}

}  // namespace hvd
