#pragma once

// Rank 0's progress display. On a terminal (stdout_is_terminal()) a live single line, redrawn
// with '\r' at most ten times a second: epoch, a bar, loss, accuracy, images/s, wait share, and
// the step's slow rank ("last r2 +41.3ms", or "last -" when no rank was named). Otherwise (a log
// file, a pipe, a CI job) plain lines every log_every steps, each with the rank named most often
// since the last line ("last r2 in 9/10 steps, up to +41.3ms", or "last -"). Either way one line
// per epoch end, with the test accuracy, and with log_steps one "step N loss L" line per step for
// scripts and tests (unchanged: the tests compare them across runs). Other ranks construct it
// disabled: every call is then a no-op.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace train_cnn {

struct StepStats {
  int epoch = 0;  // 0-based
  int epochs = 0;
  int64_t step_in_epoch = 0;  // steps done in this epoch (1 after its first)
  int64_t steps_in_epoch = 0;
  int64_t global_step = 0;  // optimizer steps done in total
  double loss = 0;          // this step's mean loss over the global batch
  double accuracy = 0;      // this step's accuracy over the global batch
  double epoch_loss = 0;    // running means over the epoch so far
  double epoch_accuracy = 0;
  double images_per_s = 0;  // global images per second over the epoch so far
  double lr = 0;
  double wait_share = 0;  // of step time spent waiting for gradient all-reduces, epoch so far
  // This step's hvd::straggler_report() (hvd/straggler.h): the rank named (-1: none beyond the
  // threshold) and the step's largest lateness in milliseconds (whoever was last).
  int slow_rank = -1;
  double lateness_ms = 0;
};

struct EpochStats {
  int epoch = 0;  // 0-based
  int epochs = 0;
  int64_t global_step = 0;
  double train_loss = 0, train_accuracy = 0;
  bool evaluated = false;
  double test_loss = 0, test_accuracy = 0;
  double images_per_s = 0;
  double lr = 0;
  double wait_share = 0;
  double seconds = 0;  // training time of the epoch (evaluation excluded)
};

// Whether stdout ends at a terminal. Open MPI gives every rank a pseudo-terminal whatever mpirun's
// own stdout is (a file, a pipe), so under Open MPI (OMPI_COMM_WORLD_RANK set) this looks at the
// parent's stdout instead: mpirun's, for the ranks it starts on its own node. Elsewhere isatty(1).
bool stdout_is_terminal();

class Progress {
 public:
  Progress(bool enabled, bool terminal, int log_every, bool log_steps);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return enabled_; }
  void step(const StepStats& s);
  void epoch_end(const EpochStats& e);
  // A full line of text (ends a live bar first).
  void line(const std::string& text);

 private:
  void end_bar();

  bool enabled_;
  bool terminal_;
  int log_every_;
  bool log_steps_;
  bool bar_open_ = false;
  // Since the last plain line: steps, and per rank the steps it was named in (the line names the
  // rank named most often, with its largest lateness).
  int64_t steps_since_line_ = 0;
  std::vector<int64_t> named_since_line_;
  std::vector<double> worst_ms_since_line_;
  std::string straggler_text(const StepStats& s);
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace train_cnn
