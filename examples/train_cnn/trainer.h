#pragma once

// The data-parallel training loop of train_cnn: a single-process trainer plus a few hvd lines.
//
// Every rank builds the same replica (Network) and broadcasts rank 0's state; each step it takes
// its slice of the global batch from the strategy's shard, starts each gradient's all-reduce as
// the backward pass finishes it (Strategy::gradient_ready), waits once
// (Strategy::synchronize_gradients) and steps the optimizer with the rate of LrSchedule
// (lr_schedule.h: linearly scaled by the replicas, capped, reached by a warm-up, times
// lr_decay^epoch). The per-step loss and accuracy are all-reduced (sums over replicas)
// so rank 0 reports the global-batch mean. At each epoch end the test set is evaluated sharded
// across ranks (counts combined with an all-reduce sum) and, with --checkpoint-dir, rank 0 saves a
// checkpoint (parameters, optimizer velocity, epoch and step; the data order is a pure function
// of seed and epoch, so that is the whole random state) from which the next run (resuming by
// default) continues bitwise as if never interrupted; --checkpoint-every-steps saves inside epochs
// too. A signal (--stop-signals, hvd/stop.h) on any rank stops every rank after the same step,
// saved: TrainSummary::stopped, and main() exits hvd::kExitRequeue.
//
// Collective: every rank constructs a Trainer with the same flags and calls run(). Errors that
// every rank detects together (bad data on some rank, a checkpoint that does not fit) are thrown
// as AllRanksError on every rank; the caller may then shut hvd down cleanly. Any other exception
// means the ranks may disagree: the caller must exit without hvd::shutdown().

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/batch_loader.h"
#include "data/dataset.h"
#include "flags.h"
#include "hvd/hvd.h"
#include "lr_schedule.h"
#include "metrics_csv.h"
#include "mixed_precision.h"
#include "network.h"
#include "progress.h"

namespace train_cnn {

// An error raised identically on every rank (so hvd can still be shut down collectively).
class AllRanksError : public hvd::InvalidArgumentError {
 public:
  using hvd::InvalidArgumentError::InvalidArgumentError;
};

struct TrainSummary {
  int64_t global_step = 0;  // optimizer steps done in total (a resumed run's earlier ones too)
  int64_t steps_this_run = 0;
  int epochs_done = 0;  // complete epochs in total
  bool evaluated = false;
  double test_loss = 0, test_accuracy = 0;
  double images_per_s = 0;     // training throughput of this run, images of all replicas
  double wait_share = 0;       // share of step time waiting for gradient all-reduces (rank mean)
  double data_wait_share = 0;  // share of step time waiting for the input pipeline (rank mean)
  double seconds = 0;          // wall time of this run's training loop
  // The ranks stopped on a signal (--stop-signals) after an agreed step and rank 0 saved it: the
  // program exits hvd::kExitRequeue, and the same command continues from there.
  bool stopped = false;
};

class Trainer {
 public:
  // Collective. Resolves the device, loads the data, builds the network and (rank 0) opens the
  // metrics file on each rank, then agrees: if any rank failed, every rank throws AllRanksError
  // (the failing rank with its own message, the others naming it). Then builds the strategy,
  // broadcasts rank 0's initial state and, with --resume, restores the newest good checkpoint.
  explicit Trainer(const Flags& flags);
  ~Trainer();

  // Collective: trains until --epochs or --max-steps, reporting on rank 0.
  TrainSummary run();

 private:
  void setup_local();
  void agree_on_setup(const std::string& local_error);
  void resume();
  struct StepResult;
  struct RunTotals;
  // run()'s steps: train_epoch trains from step_in_epoch (advancing it) to the epoch's end, where
  // it fills e and returns true, or to --max-steps (false); end_epoch evaluates, reports and
  // checkpoints a finished epoch; evaluate_at_stop evaluates a run that stopped inside an epoch;
  // report averages the throughput over ranks, writes --dump-weights and prints the summary.
  bool train_epoch(int epoch, int64_t& step_in_epoch, RunTotals& totals, TrainSummary& sum,
                   EpochStats& e);
  void end_epoch(EpochStats& e, TrainSummary& sum);
  void evaluate_at_stop(int epoch, TrainSummary& sum);
  void report(const RunTotals& totals, TrainSummary& sum);
  StepResult train_step(data::BatchLoader& batches, double lr);
  data::LoaderOptions loader_options() const;
  bool evaluates() const;  // a test set is evaluated (not --benchmark, not --test-limit 0)
  // Test loss/accuracy over the first test_limit test images, sharded across ranks.
  model::Evaluation evaluate_test(int epoch);
  // in_background: with --checkpoint-async, the file is written while training goes on
  // (hvd::Checkpointer::save_async); the end of a run and a stop wait for it.
  void save_checkpoint(int next_epoch, int64_t step_in_epoch, bool in_background = false);
  void report_written();  // "checkpoint: saved step N" for the write in the background, if any
  // After a step: --checkpoint-every-steps, then the agreed stop (true: stop the run here).
  bool after_step(int epoch, int64_t next_step_in_epoch);
  void report_stop(int epoch, int64_t step_in_epoch);
  void dump_weights();
  std::string describe_data() const;

  Flags flags_;  // batch_size: this replica's batch (--global-batch-size / ranks when given)
  std::unique_ptr<hvd::StopOnSignal> stop_;  // --stop-signals (none: null)
  int rank_ = 0;
  int size_ = 1;
  DeviceChoice device_;
  data::Dataset train_, test_;
  std::unique_ptr<Network> net_;
  std::vector<std::string> names_;
  std::unique_ptr<hvd::Strategy> strategy_;
  std::string strategy_name_;
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<MixedPrecision> precision_;  // --precision: loss scaling (fp32: inert)
  std::optional<hvd::Checkpointer> checkpointer_;
  std::unique_ptr<Progress> progress_;
  MetricsCsv csv_;
  std::unique_ptr<data::BatchMemory> batch_memory_;  // the input pipeline's buffers (after net_)
  std::vector<double> step_metrics_;  // {loss x batch, correct, batch}, all-reduced each step

  int start_epoch_ = 0;
  int64_t start_step_in_epoch_ = 0;
  int64_t global_step_ = 0;
  int64_t last_saved_step_ = -1;
  int64_t writing_step_ = -1;  // the step written in the background, until a call confirms it
};

}  // namespace train_cnn
