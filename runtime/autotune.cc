#include "runtime/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "common/logging.h"
#include "common/number_text.h"

namespace hvd {
namespace {

std::string bytes_text(int64_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1 << 10) && b % (1 << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.3f ms" : "%.1f ms", ms);
  return buf;
}

ParameterValues values_of(const TuningTrial& t);

// The value a trial varies, as the log shows it.
std::string varied_value(const TuningTrial& t) {
  if (t.varies == "fusion threshold")
    return t.fusion_threshold_bytes == 0
               ? std::string("HVD_FUSION_THRESHOLD=0 (fusion off)")
               : "HVD_FUSION_THRESHOLD=" + bytes_text(t.fusion_threshold_bytes);
  if (t.varies == "cycle time") return "HVD_CYCLE_TIME=" + number_text(t.cycle_time_ms) + " ms";
  if (t.varies == "fusion window")
    return "HVD_FUSION_WINDOW=" + number_text(t.fusion_window_us) + " us";
  if (t.varies == "confirm") return "again, " + values_of(t).settings();
  return "the starting settings";
}

ParameterValues values_of(const TuningTrial& t) {
  ParameterValues v;
  v.fusion_threshold_bytes = t.fusion_threshold_bytes;
  v.cycle_time_ms = t.cycle_time_ms;
  v.fusion_window_us = t.fusion_window_us;
  return v;
}

TuningTrial trial_of(const ParameterValues& v, const char* varies) {
  TuningTrial t;
  t.fusion_threshold_bytes = v.fusion_threshold_bytes;
  t.cycle_time_ms = v.cycle_time_ms;
  t.fusion_window_us = v.fusion_window_us;
  t.varies = varies;
  return t;
}

}  // namespace

AutotuneSearch::AutotuneSearch(const ParameterValues& start, double keep_margin)
    : start_(start),
      keep_margin_(keep_margin),
      // Fusion off, then up to the default in steps of 4x-16x; cycle times and windows around
      // their defaults (1 ms, 50 us).
      thresholds_{0,
                  int64_t{64} << 10,
                  int64_t{1} << 20,
                  int64_t{4} << 20,
                  int64_t{16} << 20,
                  int64_t{64} << 20},
      cycles_{0.25, 0.5, 1, 2, 5},
      windows_{0, 20, 50, 200} {}

int AutotuneSearch::planned() const {
  return static_cast<int>(1 + thresholds_.size() + cycles_.size() + windows_.size() + 4);
}

ParameterValues AutotuneSearch::values(int trial) const {
  return trial >= 0 && trial < static_cast<int>(trials_.size()) ? values_of(trials_[trial])
                                                                : start_;
}

int AutotuneSearch::best() const {
  int b = -1;
  for (int i = 0; i < static_cast<int>(trials_.size()); ++i)
    if (trials_[i].step_ms >= 0 && (b < 0 || trials_[i].step_ms < trials_[b].step_ms)) b = i;
  return b;
}

const TuningTrial* AutotuneSearch::find(const ParameterValues& v) const {
  for (const auto& t : trials_)
    if (values_of(t) == v) return &t;
  return nullptr;
}

void AutotuneSearch::measured(double step_ms, int steps) {
  if (trials_.empty() || over_) return;
  trials_.back().step_ms = step_ms;
  trials_.back().steps = steps;
}

bool AutotuneSearch::advance() {
  ParameterValues v = values(best());
  const char* varies = "";
  switch (phase_) {
    case Phase::kThreshold:
      if (index_ >= thresholds_.size()) return false;
      v.fusion_threshold_bytes = thresholds_[index_++];
      varies = "fusion threshold";
      break;
    case Phase::kCycle:
      if (index_ >= cycles_.size()) return false;
      v.cycle_time_ms = cycles_[index_++];
      varies = "cycle time";
      break;
    case Phase::kWindow:
      if (index_ >= windows_.size()) return false;
      v.fusion_window_us = windows_[index_++];
      varies = "fusion window";
      break;
    default:
      return false;
  }
  if (find(v)) return advance();  // measured already: the next candidate
  trials_.push_back(trial_of(v, varies));
  return true;
}

std::optional<ParameterValues> AutotuneSearch::next() {
  if (over_) return std::nullopt;
  if (phase_ == Phase::kStart) {
    phase_ = Phase::kThreshold;
    index_ = 0;
    trials_.push_back(trial_of(start_, "start"));
    return start_;
  }
  while (phase_ != Phase::kOver) {
    if (phase_ == Phase::kConfirm) {
      // start, best, start, best: index_ counts them.
      if (index_ < 4) {
        const ParameterValues v = index_++ % 2 == 0 ? start_ : values(candidate_);
        trials_.push_back(trial_of(v, "confirm"));
        return v;
      }
      phase_ = Phase::kOver;
      break;
    }
    if (advance()) return values_of(trials_.back());
    phase_ = phase_ == Phase::kThreshold ? Phase::kCycle
             : phase_ == Phase::kCycle   ? Phase::kWindow
                                         : Phase::kConfirm;
    index_ = 0;
    if (phase_ == Phase::kConfirm) {
      candidate_ = best();
      if (candidate_ <= 0 || values(candidate_) == start_) phase_ = Phase::kOver;  // start won
    }
  }
  decide();
  return std::nullopt;
}

double AutotuneSearch::mean_step(const ParameterValues& v, int* trials) const {
  double sum = 0;
  int n = 0;
  for (const auto& t : trials_)
    if (t.step_ms >= 0 && values_of(t) == v) {
      sum += t.step_ms;
      ++n;
    }
  if (trials) *trials = n;
  return n ? sum / n : -1;
}

// The best replaces the start only when it beats it, over all their trials, beyond the margin.
void AutotuneSearch::decide() {
  over_ = true;
  winner_ = 0;
  if (candidate_ <= 0) return;
  const double start = mean_step(start_), best = mean_step(values(candidate_));
  // The confirmation's pairs: (start, best), (start, best), the last four trials.
  bool every_pair = trials_.size() >= 4;
  for (size_t i = trials_.size() - std::min<size_t>(trials_.size(), 4); i + 1 < trials_.size();
       i += 2)
    every_pair = every_pair && trials_[i + 1].step_ms < trials_[i].step_ms;
  confirmed_ = every_pair;
  if (every_pair && start >= 0 && best >= 0 && best * (1 + keep_margin_) < start)
    winner_ = candidate_;
}

std::string AutotuneSearch::explanation() const {
  if (!over_ || trials_.empty()) return "";
  int n_start = 0, n_best = 0;
  const double start = mean_step(start_, &n_start);
  auto times = [](int n) {
    return n == 1 ? std::string("1 trial") : std::to_string(n) + " trials";
  };
  std::string s;
  if (candidate_ <= 0) {
    s = "The starting settings were the fastest (" + ms_text(start) +
        " a step): nothing to "
        "change.";
  } else {
    const double best = mean_step(values(candidate_), &n_best);
    const std::string vs = "trial " + std::to_string(candidate_) + " (" +
                           varied_value(trials_[candidate_]) + ") took " + ms_text(best) +
                           " a step over " + times(n_best) + ", the starting settings " +
                           ms_text(start) + " over " + times(n_start);
    if (winner_ == 0 && !confirmed_) {
      s = "The fastest, " + vs +
          ", was slower than the starting settings in a pair of the "
          "confirmation: a lucky draw of the noise, so the starting settings stay.";
    } else if (winner_ == 0) {
      s = "The fastest, " + vs + ": within " + number_text(keep_margin_ * 100) +
          " %, under the noise, so the starting settings stay.";
    } else {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.2f", start / std::max(best, 1e-9));
      s = "The fastest, " + vs + ": " + ratio + "x faster, so it wins.";
    }
  }
  // Which setting mattered most: the widest spread of mean steps among the trials varying it.
  const char* names[] = {"fusion threshold", "cycle time", "fusion window"};
  int most = -1;
  double spread = 0;
  const TuningTrial *slow = nullptr, *fast = nullptr;
  for (int k = 0; k < 3; ++k) {
    const TuningTrial *lo = nullptr, *hi = nullptr;
    for (const auto& t : trials_) {
      if (t.varies != names[k] || t.step_ms < 0) continue;  // (confirm trials repeat others)
      if (!lo || t.step_ms < lo->step_ms) lo = &t;
      if (!hi || t.step_ms > hi->step_ms) hi = &t;
    }
    if (lo && hi && hi->step_ms - lo->step_ms > spread) {
      spread = hi->step_ms - lo->step_ms;
      most = k;
      slow = hi;
      fast = lo;
    }
  }
  if (most >= 0)
    s += std::string(" The widest spread among the trials of one setting: the ") + names[most] +
         ", " + ms_text(slow->step_ms) + " a step at " + varied_value(*slow) + ", " +
         ms_text(fast->step_ms) + " at " + varied_value(*fast) + ".";
  return s;
}

Autotuner::Autotuner(const AutotuneOptions& options, Parameters& params)
    : options_(options), params_(params), search_(params.values()) {
  options_.warmup_steps = std::max(options_.warmup_steps, 0);
  options_.steps_per_trial =
      static_cast<int>(std::clamp<int64_t>(options_.steps_per_trial, 1, autotune::kMaxSteps));
  options_.trial_seconds = std::max(options_.trial_seconds, 0.0);
  if (options_.rank == 0)
    std::fprintf(stderr,
                 "hvd autotune: on; %d warm-up steps, then up to %d trials of at least %d steps "
                 "and %g s each (HVD_AUTOTUNE_WARMUP_STEPS, HVD_AUTOTUNE_STEPS_PER_TRIAL, "
                 "HVD_AUTOTUNE_TRIAL_SECONDS), starting from %s\n",
                 options_.warmup_steps, search_.planned(), options_.steps_per_trial,
                 options_.trial_seconds, params.values().settings().c_str());
}

void Autotuner::encode(uint64_t* words) {
  words[0] = autotune::kNothing;
  if (options_.rank != 0) return;
  words[0] = verdict_;
  verdict_ = autotune::kNothing;
}

void Autotuner::decode(const uint64_t* words) {
  const uint64_t w = words[0];
  if (w == autotune::kNothing) return;
  if (w != autotune::kStart) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t ns = (w & ((uint64_t{1} << autotune::kStepShift) - 1)) - 1;
    search_.measured(static_cast<double>(ns) / 1e6, static_cast<int>(w >> autotune::kStepShift));
  }
  if (w != autotune::kStart && options_.rank == 0)
    log_trial(static_cast<int>(search_.trials().size()) - 1);
  begin_trial();
}

void Autotuner::begin_trial() {
  std::optional<ParameterValues> v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    v = search_.next();
    if (v)
      state_ = "trial " + std::to_string(search_.trials().size() - 1) + " (of at most " +
               std::to_string(search_.planned() - 1) + " after the start)";
    else
      state_ = "done";
  }
  if (v) {
    params_.set(*v);
    stage_ = Stage::kTrial;
    trial_started_ = false;
    return;
  }
  params_.set(search_.values(search_.winner()));
  active_ = false;
  stage_ = Stage::kOver;
  if (options_.rank == 0) log_end();
}

void Autotuner::cycle_done(bool step, clock::time_point now) {
  if (!step || options_.rank != 0) return;
  switch (stage_) {
    case Stage::kWarmup:
      if (++warm_steps_ >= options_.warmup_steps) {
        verdict_ = autotune::kStart;
        stage_ = Stage::kStarting;
      }
      return;
    case Stage::kTrial:
      // The first marker after the settings took effect ends the step that straddled them; the
      // trial times the steps after it (a lost marker starts the timing again at the next one).
      if (!trial_started_) {
        trial_started_ = true;
        trial_begin_ = now;
        timed_steps_ = 0;
        return;
      }
      ++timed_steps_;
      if (timed_steps_ >= options_.steps_per_trial &&
          (now - trial_begin_ >= std::chrono::duration<double>(options_.trial_seconds) ||
           static_cast<uint64_t>(timed_steps_) >= autotune::kMaxSteps)) {
        const double mean =
            std::chrono::duration<double, std::nano>(now - trial_begin_).count() / timed_steps_;
        const uint64_t ns = std::min<uint64_t>(
            static_cast<uint64_t>(std::llround(std::max(mean, 0.0))), autotune::kMaxNs);
        verdict_ = static_cast<uint64_t>(timed_steps_) << autotune::kStepShift | (ns + 1);
        stage_ = Stage::kWaitingVerdict;
      }
      return;
    default:
      return;
  }
}

void Autotuner::log_trial(int index) {
  if (index < 0) return;
  const TuningTrial t = search_.trials()[index];
  std::fprintf(stderr, "hvd autotune: trial %d, %s: mean step %s over %d steps\n", index,
               varied_value(t).c_str(), ms_text(t.step_ms).c_str(), t.steps);
  write_log();
}

void Autotuner::log_end() {
  const std::string line = search_.values(search_.winner()).settings();
  std::fprintf(stderr,
               "hvd autotune: done after %zu trials. %s\nhvd autotune: in force now; pin it in the "
               "job script with: %s\n",
               search_.trials().size(), search_.explanation().c_str(), line.c_str());
  write_log();
}

// HVD_AUTOTUNE_LOG: one row per measured trial, rewritten after each (a job that ends in the middle
// of the search leaves the trials so far); the winner is marked once the search is over.
void Autotuner::write_log() const {
  if (options_.log_path.empty()) return;
  std::ofstream out(options_.log_path, std::ios::trunc);
  if (!out) {
    HVD_LOG(Warning) << "HVD_AUTOTUNE_LOG: cannot write " << options_.log_path;
    return;
  }
  out << "trial,varies,HVD_FUSION_THRESHOLD,HVD_CYCLE_TIME,HVD_FUSION_WINDOW,step_ms,steps,"
         "winner\n";
  const auto& trials = search_.trials();
  for (size_t i = 0; i < trials.size(); ++i) {
    const TuningTrial& t = trials[i];
    if (t.step_ms < 0) continue;
    out << i << ',' << t.varies << ',' << t.fusion_threshold_bytes << ','
        << number_text(t.cycle_time_ms) << ',' << number_text(t.fusion_window_us) << ','
        << t.step_ms << ',' << t.steps << ','
        << (search_.over() && static_cast<int>(i) == search_.winner() ? 1 : 0) << '\n';
  }
}

TuningReport Autotuner::report() const {
  TuningReport r;
  r.enabled = true;
  const ParameterValues now = params_.values();
  r.fusion_threshold_bytes = now.fusion_threshold_bytes;
  r.cycle_time_ms = now.cycle_time_ms;
  r.fusion_window_us = now.fusion_window_us;
  std::lock_guard<std::mutex> lock(mu_);
  r.state = state_;
  r.trials = search_.trials();
  r.done = search_.over();
  if (r.done) {
    r.winner = search_.winner();
    r.settings = search_.values(r.winner).settings();
    r.explanation = search_.explanation();
  }
  return r;
}

}  // namespace hvd
