#pragma once

// Tuning that explains itself (docs/tuning.md).
//
// With HVD_AUTOTUNE=1 (hvdrun --autotune), the first steps of the job try settings on the live
// job: the fusion threshold, then the cycle time, then the fusion window, a few steps each; then
// the best and the starting settings once more, alternately. Every rank applies each trial at the
// same negotiation cycle (rank 0 measures the step time and the negotiation carries its verdict),
// the best by measured step time is kept if it beats the starting settings beyond the noise, and
// rank 0 logs each trial, why the winner won, and the winner as a line of HVD_* settings to pin.
// tuning_report() returns the same on every rank once the search is over (see below).

#include <cstdint>
#include <string>
#include <vector>

namespace hvd {

struct TuningTrial {
  int64_t fusion_threshold_bytes = 0;  // HVD_FUSION_THRESHOLD
  double cycle_time_ms = 0;            // HVD_CYCLE_TIME
  double fusion_window_us = 0;         // HVD_FUSION_WINDOW
  // What the trial varies: "start" (the settings the job started with), "fusion threshold",
  // "cycle time" or "fusion window"; "confirm" for the last trials, which measure the starting
  // settings and the best again, alternately, before the verdict.
  std::string varies;
  // The mean time of one step under these settings: the trial's time divided by its steps, on
  // rank 0's clock (a step: from one release of the job's first repeating tensor to the next);
  // -1 while the trial runs.
  double step_ms = -1;
  int steps = 0;  // steps measured
};

struct TuningReport {
  bool enabled = false;  // HVD_AUTOTUNE=1 (and a job of two ranks or more)
  bool done = false;     // the search is over and the winner is in force
  std::string state;     // one line: "off", "warming up", "trial 3 of 14", "done", ...
  // The settings in force now on this rank (the same on every rank).
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  double fusion_window_us = 0;
  std::vector<TuningTrial> trials;  // in the order they ran
  int winner = -1;                  // its index in trials, once done
  std::string settings;             // once done: "HVD_FUSION_THRESHOLD=... HVD_CYCLE_TIME=... ..."
  std::string explanation;          // once done: why the winner won, in a sentence or two
};

// This rank's view; any thread; throws hvd::Error before init(). The search ends at one
// negotiation cycle, the same on every rank, but each thread sees it at its next call: ranks that
// call this at the same step may differ around that cycle. A program that branches on `done`
// agrees first (e.g. an all-reduce of the flag with ReduceOp::kMin, as tests/tuning does).
TuningReport tuning_report();

}  // namespace hvd
