#include "flags.h"

#include <boost/program_options.hpp>
#include <cmath>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "data/idx_reader.h"
#include "hvd/error.h"
#include "hvd/stop.h"

namespace train_cnn {
namespace {

namespace po = boost::program_options;

[[noreturn]] void bad(const std::string& message) { throw hvd::InvalidArgumentError(message); }

template <class T>
void require(bool ok, const std::string& flag, T value, const std::string& accepted) {
  if (ok) return;
  std::ostringstream os;
  os << flag << " is " << value << ": " << accepted << ".";
  bad(os.str());
}

void require_one_of(const std::string& flag, const std::string& value,
                    const std::vector<std::string>& accepted) {
  for (const auto& a : accepted)
    if (value == a) return;
  std::string list;
  for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
  bad(flag + " is '" + value + "': it must be one of " + list + ".");
}

constexpr int64_t kBenchmarkDefaultSteps = 100;
constexpr double kMaxLossScale = 16777216;  // 2^24, hvd::LossScalerOptions::max_scale
// Limits of the input pipeline's flags: each prefetched batch is a buffer (pinned on a GPU).
constexpr int kMaxPrefetch = 64;
constexpr int kMaxLoaderThreads = 16;
constexpr int kMaxDataDelayMs = 60000;

// The flag groups of --help, bound to f; warmup receives --warmup-steps as given.
void add_training_flags(po::options_description& all, Flags& f, std::string& warmup) {
  po::options_description schedule("Training");
  schedule.add_options()("epochs", po::value(&f.epochs)->default_value(f.epochs),
                         "epochs to train (in total, counting a resumed run's earlier epochs)")(
      "batch-size", po::value(&f.batch_size)->default_value(f.batch_size),
      "images per replica per step (global batch = this x replicas)")(
      "global-batch-size", po::value(&f.global_batch_size)->default_value(0),
      "images per step over all replicas, whatever their number (0: --batch-size x replicas): "
      "each of R ranks takes G/R, and the rate is --lr x G/--batch-size; so the same command on "
      "fewer ranks (a restart after a lost node) keeps the schedule and resumes the checkpoint")(
      "lr", po::value(&f.lr)->default_value(f.lr, "0.05"),
      "learning rate of one replica with its batch; multiplied by the number of replicas (up to "
      "--max-lr)")(
      "no-lr-scaling", po::bool_switch(),
      "use --lr as it is, whatever the number of replicas (no cap, no automatic warm-up)")(
      "max-lr", po::value(&f.max_lr)->default_value(f.max_lr, "0.4"),
      "cap on the scaled rate (never below --lr; 0: no cap): above it the whole schedule is scaled "
      "down, as if --lr were max-lr / replicas; 0.4 = 8 x 0.05 trains stably, 0.8 diverges")(
      "warmup-steps", po::value(&warmup)->default_value("auto"),
      "ramp the rate linearly from --lr (capped: max-lr / replicas) to the scaled rate over the "
      "first N steps; auto: none when the "
      "rate is not scaled up (1 replica), else one epoch, at least 50 steps, at most half the run; "
      "an explicit N (0: none) overrides it")(
      "lr-decay", po::value(&f.lr_decay)->default_value(f.lr_decay, "0.6"),
      "multiplicative learning-rate decay per epoch: epoch e (0-based) runs at x decay^e, the "
      "warm-up included")("momentum", po::value(&f.momentum)->default_value(f.momentum, "0.9"),
                          "SGD momentum")(
      "weight-decay", po::value(&f.weight_decay)->default_value(f.weight_decay, "5e-4"),
      "L2 weight decay")("hidden", po::value(&f.hidden)->default_value(f.hidden),
                         "width of the hidden dense layer")(
      "seed", po::value(&f.seed)->default_value(f.seed),
      "seed of the initialisation and of the per-epoch shuffle")(
      "max-steps", po::value(&f.max_steps)->default_value(f.max_steps),
      "stop after this many optimizer steps in total (-1: no limit)")(
      "strategy", po::value(&f.strategy)->default_value(f.strategy),
      "auto|mirrored|multi-worker (auto: mirrored on one node, multi-worker on several)")(
      "device", po::value(&f.device)->default_value(f.device),
      "auto|cpu|cuda (auto: cuda when built with cuDNN and a GPU is present)")(
      "recompute", po::value<std::string>()->default_value("none")->implicit_value("all"),
      "keep only each block's input in the forward pass and re-run the block (conv + ReLU, or "
      "fc1 + ReLU) just before its backward: bitwise the same training, less activation memory, "
      "more compute. none, all (a bare --recompute), or blocks joined by commas, e.g. "
      "--recompute conv1 (of conv1, conv2, fc)");

  all.add(schedule);
}

void add_data_flags(po::options_description& all, Flags& f) {
  po::options_description data_opts("Data");
  data_opts.add_options()("data-dir", po::value(&f.data_dir)->default_value(f.data_dir),
                          "Fashion-MNIST IDX files (.gz or plain)")(
      "synthetic", po::bool_switch(&f.synthetic),
      "train on a generated, learnable data set instead")(
      "synthetic-size", po::value(&f.synthetic_size)->default_value(f.synthetic_size),
      "training images of --synthetic (test set: a sixth of it)")(
      "test-limit", po::value(&f.test_limit)->default_value(f.test_limit),
      "evaluate on the first N test images (-1: all, 0: no evaluation)")(
      "prefetch", po::value(&f.prefetch)->default_value(f.prefetch),
      "batches prepared ahead of the step by loader threads (0: each batch is loaded by the "
      "training thread when the step needs it); the same batches and results either way")(
      "loader-threads", po::value(&f.loader_threads)->default_value(f.loader_threads),
      "loader threads with --prefetch > 0")(
      "data-delay-ms", po::value(&f.data_delay_ms)->default_value(f.data_delay_ms),
      "extra time to load each batch, in ms (a stand-in for a slow reader or decoder, to show "
      "what --prefetch hides)");

  all.add(data_opts);
}

void add_checkpoint_flags(po::options_description& all, Flags& f) {
  po::options_description ckpt("Checkpoints");
  ckpt.add_options()("checkpoint-dir", po::value(&f.checkpoint_dir),
                     "write checkpoints (safetensors, rank 0) here")(
      "resume", po::bool_switch(),
      "continue from the newest good checkpoint in --checkpoint-dir (the default when it holds "
      "one)")("no-resume", po::bool_switch(),
              "start from scratch even if --checkpoint-dir holds checkpoints")(
      "checkpoint-every-steps",
      po::value(&f.checkpoint_every_steps)->default_value(f.checkpoint_every_steps),
      "also save every N optimizer steps, inside epochs too (0: off); a stop on a signal loses "
      "nothing, a lost node at most N steps")(
      "stop-signals", po::value<std::string>()->default_value("TERM,USR1"),
      "on these signals (on any rank) every rank stops after the same step, rank 0 saves a "
      "checkpoint and train_cnn exits 75 (saved, please requeue); 'none': the signals' default "
      "actions")("checkpoint-every-epoch",
                 po::value(&f.checkpoint_every_epoch)->default_value(true)->implicit_value(true),
                 "save at each epoch end (=false: only at the end of the run)")(
      "keep-checkpoints", po::value(&f.keep_checkpoints)->default_value(f.keep_checkpoints),
      "checkpoints kept (0: all)")(
      "checkpoint-async", po::bool_switch(&f.checkpoint_async),
      "write the periodic checkpoints (every N steps, each epoch) while training goes on: rank 0 "
      "copies the weights and a thread writes the file; the last save and a stop's still wait "
      "for theirs");

  all.add(ckpt);
}

void add_output_flags(po::options_description& all, Flags& f) {
  po::options_description output("Output");
  output.add_options()("benchmark", po::bool_switch(&f.benchmark),
                       "throughput only: no evaluation; print images/s and the communication wait "
                       "share (100 steps unless --max-steps)")(
      "benchmark-warmup", po::value(&f.benchmark_warmup)->default_value(f.benchmark_warmup),
      "steps left out of the benchmark timing")(
      "metrics-csv", po::value(&f.metrics_csv)->default_value(f.metrics_csv),
      "per-step and per-epoch metrics, written by rank 0 ('none': off)")(
      "dump-weights", po::value(&f.dump_weights),
      "rank 0 writes the final flat parameters as raw little-endian float32")(
      "log-steps", po::bool_switch(&f.log_steps), "rank 0 prints the loss of every step")(
      "log-every", po::value(&f.log_every)->default_value(f.log_every),
      "progress line every N steps when stdout is not a terminal")(
      "progress", po::value(&f.progress)->default_value(f.progress),
      "auto|bar|lines: a live bar (auto: when stdout is a terminal) or plain lines")("help,h",
                                                                                     "this help");

  all.add(output);
}

void add_precision_flags(po::options_description& all, Flags& f, std::string& loss_scale) {
  po::options_description precision("Mixed precision");
  precision.add_options()(
      "precision", po::value(&f.precision)->default_value(f.precision),
      "fp32|bf16|fp16: the storage of activations, gradients and the weights the model computes "
      "with (fp32 master weights and optimizer either way); on the CPU bf16/fp16 are emulated by "
      "rounding, the cuDNN model (--device cuda) computes in them on tensor cores")(
      "loss-scale", po::value(&loss_scale)->default_value("dynamic"),
      "with bf16/fp16: dynamic, or a fixed scale N > 0; the backward pass starts from loss x "
      "scale, gradients are unscaled and checked for Inf/NaN, and a step that overflows on any "
      "rank is skipped on every rank")(
      "loss-scale-init", po::value(&f.loss_scale_init)->default_value(f.loss_scale_init),
      "the first scale of --loss-scale dynamic (halved after each overflow)")(
      "loss-scale-window", po::value(&f.loss_scale_window)->default_value(f.loss_scale_window),
      "--loss-scale dynamic doubles the scale after this many steps without overflow")(
      "gradient-allreduce", po::value(&f.gradient_allreduce)->default_value(f.gradient_allreduce),
      "fp32|bf16|fp16: the dtype the gradients are all-reduced in (bf16/fp16: rounded to 16 bits, "
      "half the bytes; an fp16 overflow is caught by the loss scaler's check)");
  all.add(precision);
}

// --loss-scale: "dynamic" (0) or a positive number.
double parse_loss_scale(const std::string& v) {
  if (v == "dynamic") return 0;
  size_t used = 0;
  double x = -1;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !(x > 0) || !std::isfinite(x))
    bad("--loss-scale is '" + v + "': it must be dynamic or a positive number (a fixed scale).");
  return x;
}

// --warmup-steps: "auto" (-1) or a whole number of steps, 0 or more.
int64_t parse_warmup(const std::string& warmup) {
  if (warmup == "auto") return -1;
  size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(warmup, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != warmup.size() || warmup.empty() || n < 0)
    bad("--warmup-steps is '" + warmup +
        "': it must be auto or a whole number of steps, 0 or more.");
  return n;
}

// Checks every value and the flags that contradict each other; fills in what depends on vm (which
// flags were given).
void validate(Flags& f, const po::variables_map& vm, const std::string& warmup,
              const std::string& loss_scale) {
  f.lr_scaling = !vm["no-lr-scaling"].as<bool>();

  require(f.epochs >= 1, "--epochs", f.epochs, "it must be at least 1");
  require(f.batch_size >= 1, "--batch-size", f.batch_size,
          "it must be at least 1 (images per replica)");
  require(f.lr > 0, "--lr", f.lr, "it must be positive");
  require(f.lr_decay > 0 && f.lr_decay <= 1, "--lr-decay", f.lr_decay, "it must be in (0, 1]");
  require(f.max_lr >= 0, "--max-lr", f.max_lr, "it must be 0 (no cap) or positive");
  f.warmup_steps = parse_warmup(warmup);
  require(f.momentum >= 0 && f.momentum < 1, "--momentum", f.momentum, "it must be in [0, 1)");
  require(f.weight_decay >= 0, "--weight-decay", f.weight_decay, "it must be 0 or more");
  require(f.hidden >= 1, "--hidden", f.hidden, "it must be at least 1");
  require(f.seed >= 0, "--seed", f.seed, "it must be 0 or more");
  require(f.max_steps >= -1, "--max-steps", f.max_steps, "it must be -1 (no limit) or 0 or more");
  require(f.synthetic_size >= 1, "--synthetic-size", f.synthetic_size, "it must be at least 1");
  require(f.test_limit >= -1, "--test-limit", f.test_limit,
          "it must be -1 (all), 0 (none) or more");
  require(f.prefetch >= 0 && f.prefetch <= kMaxPrefetch, "--prefetch", f.prefetch,
          "it must be from 0 (no prefetch) to " + std::to_string(kMaxPrefetch) + " batches");
  require(f.loader_threads >= 1 && f.loader_threads <= kMaxLoaderThreads, "--loader-threads",
          f.loader_threads, "it must be from 1 to " + std::to_string(kMaxLoaderThreads));
  require(f.data_delay_ms >= 0 && f.data_delay_ms <= kMaxDataDelayMs, "--data-delay-ms",
          f.data_delay_ms, "it must be from 0 to " + std::to_string(kMaxDataDelayMs) + " ms");
  require(f.keep_checkpoints >= 0, "--keep-checkpoints", f.keep_checkpoints,
          "it must be 0 (keep all) or more");
  require(f.benchmark_warmup >= 0, "--benchmark-warmup", f.benchmark_warmup,
          "it must be 0 or more");
  require(f.log_every >= 1, "--log-every", f.log_every, "it must be at least 1");
  require_one_of("--strategy", f.strategy, {"auto", "mirrored", "multi-worker"});
  require_one_of("--device", f.device, {"auto", "cpu", "cuda"});
  f.recompute = model::parse_recompute_blocks(vm["recompute"].as<std::string>(), "--recompute");
  require_one_of("--progress", f.progress, {"auto", "bar", "lines"});
  require_one_of("--precision", f.precision, {"fp32", "bf16", "fp16"});
  require_one_of("--gradient-allreduce", f.gradient_allreduce, {"fp32", "bf16", "fp16"});
  f.static_loss_scale = parse_loss_scale(loss_scale);
  require(f.loss_scale_init >= 1 && f.loss_scale_init <= kMaxLossScale, "--loss-scale-init",
          f.loss_scale_init, "it must be from 1 to 2^24 (16777216)");
  require(f.loss_scale_window >= 1, "--loss-scale-window", f.loss_scale_window,
          "it must be at least 1 step");
  if (f.precision == "fp32")
    for (const char* flag : {"loss-scale", "loss-scale-init", "loss-scale-window"})
      if (!vm[flag].defaulted())
        bad(std::string("--") + flag +
            " needs --precision bf16 or fp16: fp32 training does not scale the loss.");
  if (f.data_dir.empty())
    bad("--data-dir is empty: give the folder that holds the Fashion-MNIST IDX files.");
  if (f.metrics_csv.empty())
    bad("--metrics-csv is empty: give a file name, or 'none' to write no metrics.");
  const bool resume = vm["resume"].as<bool>(), no_resume = vm["no-resume"].as<bool>();
  if (resume && no_resume)
    bad("--resume and --no-resume contradict each other: give one (resuming is the default).");
  if (resume && f.checkpoint_dir.empty())
    bad("--resume needs --checkpoint-dir: the folder whose newest checkpoint to continue from.");
  f.resume = !no_resume && !f.checkpoint_dir.empty();
  require(f.checkpoint_every_steps >= 0, "--checkpoint-every-steps", f.checkpoint_every_steps,
          "it must be 0 (off) or a number of steps");
  if (f.checkpoint_every_steps > 0 && f.checkpoint_dir.empty())
    bad("--checkpoint-every-steps needs --checkpoint-dir: the folder to save the checkpoints in.");
  if (f.checkpoint_async && f.checkpoint_dir.empty())
    bad("--checkpoint-async needs --checkpoint-dir: the folder to save the checkpoints in.");
  require(f.global_batch_size >= 0, "--global-batch-size", f.global_batch_size,
          "it must be 0 (--batch-size x replicas) or a number of images");
  if (f.global_batch_size > 0 && f.global_batch_size % f.batch_size != 0)
    bad("--global-batch-size " + std::to_string(f.global_batch_size) +
        " is not a multiple of --batch-size " + std::to_string(f.batch_size) +
        " (the batch --lr is given for, which the rate is scaled from): choose a multiple.");
  f.stop_signals = hvd::parse_signals(vm["stop-signals"].as<std::string>(), "--stop-signals");
  // A benchmark measures a fixed number of steps unless told otherwise.
  if (f.benchmark && vm["max-steps"].defaulted()) f.max_steps = kBenchmarkDefaultSteps;
  if (f.synthetic && !vm["data-dir"].defaulted())
    bad("--synthetic and --data-dir contradict each other: --synthetic trains without reading any "
        "data.");
}

}  // namespace

ParsedFlags parse_flags(int argc, const char* const* argv) {
  ParsedFlags out;
  Flags& f = out.flags;
  f.data_dir = data::kDefaultFashionMnistDir;
  std::string warmup;      // --warmup-steps: "auto" or a whole number
  std::string loss_scale;  // --loss-scale: "dynamic" or a number

  po::options_description all(
      "usage: mpirun -np N train_cnn [flags]\n\n"
      "Trains a CNN on Fashion-MNIST with one replica per process");
  add_training_flags(all, f, warmup);
  add_precision_flags(all, f, loss_scale);
  add_data_flags(all, f);
  add_checkpoint_flags(all, f);
  add_output_flags(all, f);

  po::variables_map vm;
  try {
    // No positional arguments: a stray word is an error, not silently ignored.
    const po::positional_options_description none;  // the parser keeps a pointer: not a temporary
    po::store(po::command_line_parser(argc, argv).options(all).positional(none).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    bad(std::string(e.what()) + " (train_cnn --help lists the flags).");
  }
  if (vm.count("help")) {
    std::ostringstream os;
    os << all;
    out.help = true;
    out.help_text = os.str();
    return out;
  }
  validate(f, vm, warmup, loss_scale);
  return out;
}

}  // namespace train_cnn
