#pragma once

// The stall inspector (rank 0): finds tensors that some ranks submitted and others did not.
//
// Every HVD_STALL_CHECK_TIME_SECONDS it logs a warning naming each such tensor, the ranks that have
// not submitted it and for how long. With HVD_STALL_SHUTDOWN_TIME_SECONDS > 0, tensors stalled that
// long are failed on every rank that submitted them, with a message saying the same, and the
// runtime shuts down (the job's waits throw, so it ends non-zero instead of hanging).
// HVD_STALL_CHECK_DISABLE=1 turns it off.
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
    std::vector<std::string> warnings;                         // log lines
    std::vector<std::pair<std::string, std::string>> failures; // tensor name -> error message
    std::string shutdown_reason;                               // non-empty: shut down
  };
  // Rank 0, once per cycle. Looks at the controller's table only when a check is due.
  Verdict check(const Controller& controller);

  // How long a cached tensor may wait for the other ranks on the fast path before it is sent to
  // rank 0 (so that the inspector can see it): half the check interval, at most 5 s.
  double fast_path_patience_seconds() const;

  // "'a' (missing ranks 1, 3; 12.0 s)"
  static std::string describe(const Controller::Stall& s);

 private:
  StallOptions options_;
  std::chrono::steady_clock::time_point next_check_;
  std::chrono::steady_clock::time_point next_warning_;
};

}  // namespace hvd
