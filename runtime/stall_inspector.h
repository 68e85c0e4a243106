#pragma once

// The stall inspector (rank 0): finds tensors that some ranks submitted and others did not.
//
// It looks at the controller's table a few times a second (cheap) and logs a warning as soon as
// the oldest stalled tensor is HVD_STALL_CHECK_TIME_SECONDS old (measured from its first
// submission on any rank; see Request::waited_seconds), then again every
// HVD_STALL_CHECK_TIME_SECONDS while a stall lasts. Each warning names every stalled tensor, the
// ranks that submitted it and the ranks that did not. With HVD_STALL_SHUTDOWN_TIME_SECONDS > 0,
// once a tensor has stalled that long every stalled tensor is failed on every rank that submitted
// it, all with one message that lists them all, and the runtime shuts down (the job's waits throw,
// so it ends non-zero instead of hanging). HVD_STALL_CHECK_DISABLE=1 turns it off.
//
// Thread safety: background thread of rank 0 only. It decides; the controller carries the decision
// to the other ranks (error responses on the next slow path).

#include <chrono>
#include <string>
#include <vector>

#include "runtime/controller.h"

namespace hvd {

struct StallOptions {
  double check_seconds = 60;
  double shutdown_seconds = 0;  // 0: warn only
  bool disabled = false;
};

class StallInspector {
 public:
  explicit StallInspector(const StallOptions& options);

  struct Verdict {
    std::vector<std::string> warnings;                          // log lines
    std::vector<std::pair<std::string, std::string>> failures;  // tensor name -> error message
    std::string shutdown_reason;                                // non-empty: shut down
  };
  // Rank 0, once per cycle. Looks at the controller's table every kPollSeconds.
  Verdict check(const Controller& controller);
  // The same decision on a given list of stalls at a given time (unit-testable).
  Verdict judge(const std::vector<Controller::Stall>& stalls,
                std::chrono::steady_clock::time_point now);

  // How long a cached tensor may wait for the other ranks on the fast path before it is sent to
  // rank 0 (so that the inspector can see it): half the check interval, at most 5 s.
  double fast_path_patience_seconds() const;

  // "'a' (submitted by rank 0; missing ranks 1, 3; 12.0 s)"
  static std::string describe(const Controller::Stall& s);
  // "rank 3", "ranks 0-2, 5" (runs of consecutive ranks collapsed; at most 16 runs listed).
  static std::string rank_list(const std::vector<int>& ranks);

  static constexpr double kPollSeconds = 0.25;

 private:
  StallOptions options_;
  std::chrono::steady_clock::time_point next_check_;
  std::chrono::steady_clock::time_point next_warning_;
};

}  // namespace hvd
