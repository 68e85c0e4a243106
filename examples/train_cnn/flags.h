#pragma once

// The command line of train_cnn (Boost.Program_options). parse_flags() is pure: it reads argv,
// validates every value and either returns the flags or throws hvd::InvalidArgumentError with one
// sentence naming the flag, the value given and what is accepted. It runs before hvd::init(), so
// every rank rejects a bad command line the same way, at once, without communicating.

#include <cstdint>
#include <string>
#include <vector>

#include "model/recompute.h"

namespace train_cnn {

struct Flags {
  // Schedule. Defaults: the schedule that reaches 0.919 test accuracy in 5 epochs (MODEL.md).
  int epochs = 5;
  int batch_size = 64;  // per replica; with global_batch_size, the batch --lr is given for
  // Images per step over all replicas, kept whatever the number of ranks (0: batch_size x ranks):
  // each rank takes global_batch_size / ranks, and the rate is scaled by global / batch_size.
  int64_t global_batch_size = 0;
  // The rate schedule (lr_schedule.h): lr x replicas, capped at max_lr, reached by a linear
  // warm-up (Goyal et al. 2017), times lr_decay^epoch.
  double lr = 0.05;  // one replica's rate for its batch; x replicas unless !lr_scaling
  bool lr_scaling = true;
  double max_lr = 0.4;        // cap on the scaled rate (0: none): then as if lr = max_lr / replicas
  double lr_decay = 0.6;      // the rate of epoch e is lr(step) x lr_decay^e
  int64_t warmup_steps = -1;  // linear ramp from lr to the scaled rate; -1: automatic ("auto")
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int hidden = 512;
  int64_t seed = 42;       // initialisation and the per-epoch shuffle
  int64_t max_steps = -1;  // stop after this many optimizer steps in total (-1: no limit)

  std::string strategy = "auto";  // auto | mirrored | multi-worker
  std::string device = "auto";    // auto | cpu | cuda

  // Mixed precision (model/precision.h, hvd/loss_scaler.h): fp32 | bf16 | fp16. With bf16 or fp16
  // the loss is scaled: dynamically (from loss_scale_init, x2 after loss_scale_window good steps,
  // /2 after an overflow, whose step every rank skips) or by a fixed static_loss_scale.
  std::string precision = "fp32";
  double loss_scale_init = 65536;    // --loss-scale dynamic: the first scale
  int64_t loss_scale_window = 2000;  // --loss-scale dynamic: good steps before the scale doubles
  double static_loss_scale = 0;      // --loss-scale N: N; 0: dynamic
  std::string gradient_allreduce = "fp32";  // fp32 | bf16 | fp16: the gradients' all-reduce dtype
  // Activation recomputation (model/recompute.h): the blocks whose inner activations are re-run
  // during backward instead of kept. None by default; all with a bare --recompute.
  model::RecomputeBlocks recompute;

  // Data.
  std::string data_dir;  // default data::kDefaultFashionMnistDir
  bool synthetic = false;
  int64_t synthetic_size = 60000;  // training images of the synthetic set (test: size / 6)
  int64_t test_limit = -1;         // evaluate on the first N test images (-1: all, 0: skip)
  // Input pipeline (data/batch_loader.h): batches prepared ahead of the step by loader threads.
  int prefetch = 2;  // batches ahead (0: each batch loaded by the training thread when needed)
  int loader_threads = 1;  // loader threads (with prefetch > 0)
  int data_delay_ms = 0;   // extra loading time per batch (a stand-in for a slow reader)

  // Checkpoints.
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = true;          // continue from checkpoint_dir's newest good checkpoint if any
  bool checkpoint_every_epoch = true;
  int64_t checkpoint_every_steps = 0;  // also save every N global steps (0: off)
  int keep_checkpoints = 3;
  // Periodic saves (every N steps, each epoch) written while training goes on
  // (hvd::Checkpointer::save_async); the last save and a stop's wait for the file.
  bool checkpoint_async = false;
  // Stop at an agreed step on these signals (hvd/stop.h), save, and exit hvd::kExitRequeue.
  std::vector<int> stop_signals;  // parse_flags: --stop-signals (default TERM,USR1)

  // Output.
  bool benchmark = false;
  int64_t benchmark_warmup = 5;                       // steps left out of the benchmark's timing
  std::string metrics_csv = "train_cnn_metrics.csv";  // rank 0 only; "none" writes nothing
  std::string dump_weights;       // rank 0 writes the flat parameters (raw float32 LE) here
  bool log_steps = false;         // rank 0 prints every step's loss
  int log_every = 50;             // plain progress lines every N steps (not on a terminal)
  std::string progress = "auto";  // auto | bar | lines
};

struct ParsedFlags {
  Flags flags;
  bool help = false;  // --help was given: print help_text and exit 0
  std::string help_text;
};

// Parses and validates argv. Throws hvd::InvalidArgumentError (message without a trailing
// newline) for an unknown flag, a missing or malformed value, a value out of range, or flags
// that contradict each other (--resume with --no-resume, --synthetic with --data-dir).
ParsedFlags parse_flags(int argc, const char* const* argv);

}  // namespace train_cnn
