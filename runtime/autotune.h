#pragma once

// HVD_AUTOTUNE=1: the live parameters (runtime/parameters.h) are searched on the running job
// (hvd/tuning.h; docs/tuning.md).
//
// The search (AutotuneSearch) is a pure function of the step times it is given, and runs on every
// rank: each rank computes the same next trial from the same inputs, so the ranks need to agree
// on the step times only. Coordinate descent over short candidate lists, in the order the settings
// matter most on the measurements (docs/benchmarks.md): trial 0 is the starting settings; then
// each fusion threshold at the starting cycle time and window; then each cycle time at the best
// threshold so far; then each fusion window at the best two. A combination already measured is not
// run again. The winner is the trial with the shortest mean step, unless the starting settings
// are within `keep_margin` (3 %) of it: a difference under the noise does not change the job's
// settings.
//
// The agreement (Autotuner). Rank 0 measures: a step is the interval between two releases of the
// job's step marker (the first cached tensor the fast path releases after tuning starts: a tensor
// that every step submits). After HVD_AUTOTUNE_WARMUP_STEPS steps it starts the search; each trial
// skips the step in which its settings took effect and then times HVD_AUTOTUNE_STEPS_PER_TRIAL
// steps. Its verdict travels as one word of the global set's control vector (in the AND part:
// the other ranks send all ones, so the AND is rank 0's word):
//   all ones       nothing this cycle
//   0              start: the first trial begins
//   1 + t          the running trial ended with a mean step of t nanoseconds
// Every rank decodes it in the same cycle, feeds its search, and sets the next trial's values (or,
// after the last, the winner's) before the cycle fuses its responses: the ranks fuse alike. The
// word is in the vector while the search runs (the same cycles on every rank) and gone after.
//
// Thread safety: encode/decode/cycle_done are the background thread's; report() any thread.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hvd/tuning.h"
#include "runtime/parameters.h"

namespace hvd {

class AutotuneSearch {
 public:
  AutotuneSearch(const ParameterValues& start, double keep_margin = 0.03);

  // The values of the next trial to run, or nullopt when the search is over (then winner()). Call
  // once at the start and once after each measured().
  std::optional<ParameterValues> next();
  // The trial next() returned took `step_ms` a step (mean) over `steps` steps.
  void measured(double step_ms, int steps);

  const std::vector<TuningTrial>& trials() const { return trials_; }
  bool over() const { return over_; }
  int planned() const;  // trials in all (an estimate while running: the lists minus repeats)
  // Once over(): the index of the winning trial, and why it won.
  int winner() const { return winner_; }
  ParameterValues values(int trial) const;
  std::string explanation() const;

 private:
  enum class Phase { kStart, kThreshold, kCycle, kWindow, kConfirm, kOver };
  int best() const;  // the measured trial with the shortest step; -1: none
  // The mean step of every trial of these values (the start and the best run more than once).
  double mean_step(const ParameterValues& v, int* trials = nullptr) const;
  void decide();  // the verdict, once the phases are over
  const TuningTrial* find(const ParameterValues& v) const;
  bool advance();  // the next candidate of the present phase (or the next phase) into trials_

  ParameterValues start_;
  double keep_margin_;
  std::vector<int64_t> thresholds_;
  std::vector<double> cycles_, windows_;
  Phase phase_ = Phase::kStart;
  size_t index_ = 0;        // the next candidate of the phase
  int candidate_ = -1;      // kConfirm: the best trial, measured again against the start
  bool confirmed_ = false;  // the candidate beat the start in both confirmation pairs
  std::vector<TuningTrial> trials_;
  bool over_ = false;
  int winner_ = -1;
};

struct AutotuneOptions {
  int rank = 0;
  int warmup_steps = 10;     // HVD_AUTOTUNE_WARMUP_STEPS
  int steps_per_trial = 10;  // HVD_AUTOTUNE_STEPS_PER_TRIAL: at least these steps,
  double trial_seconds = 1;  // HVD_AUTOTUNE_TRIAL_SECONDS: and at least this long
  std::string log_path;      // HVD_AUTOTUNE_LOG (rank 0 writes it; empty: none)
};

namespace autotune {
inline constexpr size_t kWords = 1;
inline constexpr uint64_t kNothing = ~uint64_t{0};
inline constexpr uint64_t kStart = 0;
// A verdict: the trial's steps in the top 20 bits, 1 + its mean step in ns in the low 44 (4.8 h).
inline constexpr int kStepShift = 44;
inline constexpr uint64_t kMaxSteps = (uint64_t{1} << (64 - kStepShift)) - 2;
inline constexpr uint64_t kMaxNs = (uint64_t{1} << kStepShift) - 2;
}  // namespace autotune

class Autotuner {
 public:
  using clock = std::chrono::steady_clock;
  // `params` outlives the tuner.
  Autotuner(const AutotuneOptions& options, Parameters& params);

  // Background thread, every rank: the control vector holds autotune::kWords for the search this
  // cycle (the same answer on every rank).
  bool active() const { return active_; }
  // This rank's word(s) for the cycle: rank 0's verdict, if any; all ones elsewhere.
  void encode(uint64_t* words);
  // After the AND: applies a verdict (the next trial's values, or the winner's).
  void decode(const uint64_t* words);
  // Rank 0, after each cycle: `step`: the step marker was released in it.
  void cycle_done(bool step, clock::time_point now);
  // Rank 0: the marker went (its cache entry was erased): the interval in progress is dropped.
  void marker_lost() { trial_started_ = false; }
  // Rank 0 looks for the step marker while the search runs.
  bool wants_marker() const { return active_ && options_.rank == 0; }

  TuningReport report() const;

 private:
  void begin_trial();  // every rank: the search's next trial (or the winner) takes effect
  void log_trial(int index);
  void log_end();
  void write_log() const;

  AutotuneOptions options_;
  Parameters& params_;
  bool active_ = true;
  // Rank 0's measure.
  enum class Stage { kWarmup, kStarting, kTrial, kWaitingVerdict, kOver };
  Stage stage_ = Stage::kWarmup;
  int warm_steps_ = 0;
  bool trial_started_ = false;       // the trial's first marker (its settle step's end) was seen
  clock::time_point trial_begin_{};  // the first timed step's start
  int timed_steps_ = 0;
  uint64_t verdict_ = autotune::kNothing;  // to send with the next cycle

  mutable std::mutex mu_;  // guards search_ and state_ for report()
  AutotuneSearch search_;
  std::string state_ = "warming up";
};

}  // namespace hvd
