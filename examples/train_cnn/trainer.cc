#include "trainer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "data/idx_reader.h"
#include "data/synthetic.h"

namespace train_cnn {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// The 1-minute load average, for benchmark lines on a shared machine ("" where unknown).
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  if (in >> one) return one;
  return "";
}

// The metadata value of key, or a AllRanksError naming the checkpoint and the missing key.
std::string meta(const std::map<std::string, std::string>& m, const std::string& key,
                 const std::string& dir) {
  auto it = m.find(key);
  if (it == m.end())
    throw AllRanksError("--resume: the newest checkpoint in '" + dir + "' has no '" + key +
                        "' in its metadata: it was not written by train_cnn. Use another "
                        "--checkpoint-dir or drop --resume.");
  return it->second;
}

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key,
                 const std::string& dir) {
  const std::string v = meta(m, key, dir);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {}
  throw AllRanksError("--resume: the newest checkpoint in '" + dir + "' has '" + key + "' = '" + v +
                      "', not an integer.");
}

// --gradient-allreduce as the strategy's (and the GPU network's) gradient dtype.
hvd::DataType gradient_dtype(const Flags& flags) {
  if (flags.gradient_allreduce == "bf16") return hvd::DataType::kBFloat16;
  if (flags.gradient_allreduce == "fp16") return hvd::DataType::kFloat16;
  return hvd::DataType::kFloat32;
}

}  // namespace

struct Trainer::StepResult {
  double loss = 0;       // mean over the global batch
  double accuracy = 0;   // over the global batch
  double seconds = 0;    // wall time of the step on this rank
  double wait = 0;       // of which waiting in synchronize_gradients()
  double data_wait = 0;  // of which waiting for the batch (data/batch_loader.h)
};

Trainer::Trainer(const Flags& flags) : flags_(flags) {
  rank_ = hvd::rank();
  size_ = hvd::size();
  // Installed first: a signal during the setup (data loading) is not lost.
  if (!flags_.stop_signals.empty())
    stop_ = std::make_unique<hvd::StopOnSignal>(flags_.stop_signals);
  // The rate's multiplier: replicas, or the global batch over --batch-size (--global-batch-size).
  double lr_scale = size_;
  std::string uneven;  // the note of a --global-batch-size that does not divide among the ranks
  if (const int64_t g = flags_.global_batch_size; g > 0) {  // the same on every rank
    if (g < size_)
      throw AllRanksError("--global-batch-size " + std::to_string(g) + " is smaller than the " +
                          std::to_string(size_) + " ranks: give each rank at least one image.");
    // Kept where it divides; otherwise each rank takes the whole part and the rate follows the
    // smaller global batch (linear scaling), said once.
    const int64_t per_rank = g / size_, global = per_rank * size_;
    const double lr_batch = flags_.batch_size;  // the batch --lr is given for
    lr_scale = static_cast<double>(global) / lr_batch;
    flags_.batch_size = static_cast<int>(per_rank);
    if (global != g)
      uneven = "train_cnn: --global-batch-size " + std::to_string(g) + " does not divide among " +
               std::to_string(size_) + " ranks: " + std::to_string(per_rank) +
               " images per rank, " + std::to_string(global) + " per step; the rate is --lr x " +
               format("%g", lr_scale) + " instead of x " + format("%g", g / lr_batch) + ".";
  }
  const bool terminal = flags_.progress == "auto" ? stdout_is_terminal() : flags_.progress == "bar";
  progress_ = std::make_unique<Progress>(rank_ == 0, terminal, flags_.log_every, flags_.log_steps);
  std::string local_error;
  try {
    setup_local();
  } catch (const std::exception& e) {
    local_error = e.what();
    if (local_error.empty()) local_error = "unknown error";
  }
  agree_on_setup(local_error);

  // The same decision on every rank (cross_size is global), so a constructor error is raised by
  // every rank alike.
  hvd::StrategyOptions so;
  // The trainer's rate comes from schedule_ (lr_schedule.h: the strategy's linear scaling and
  // warm-up plus a cap and an automatic warm-up length); these only describe it to the strategy.
  so.base_learning_rate = flags_.lr;
  so.scale_learning_rate = flags_.lr_scaling;
  so.shuffle_seed = static_cast<uint64_t>(flags_.seed);
  so.gradient_dtype = gradient_dtype(flags_);
  std::string kind = flags_.strategy;
  if (kind == "auto") kind = hvd::cross_size() > 1 ? "multi-worker" : "mirrored";
  try {
    if (kind == "mirrored") {
      strategy_ = std::make_unique<hvd::MirroredStrategy>(so);
      strategy_name_ = "MirroredStrategy";
    } else {
      auto mw = std::make_unique<hvd::MultiWorkerMirroredStrategy>(so);
      strategy_name_ = std::string("MultiWorkerMirroredStrategy") +
                       (mw->hierarchical() ? " (hierarchical all-reduce)" : "");
      strategy_ = std::move(mw);
    }
  } catch (const hvd::InvalidArgumentError& e) {
    throw AllRanksError(std::string("--strategy ") + flags_.strategy + ": " + e.what());
  }
  const int64_t steps_per_epoch = strategy_->shard(train_.count, flags_.batch_size, 0).steps;
  if (steps_per_epoch == 0)
    throw AllRanksError("the training set has " + std::to_string(train_.count) +
                        " images, fewer than one global batch of " +
                        std::to_string(strategy_->global_batch(flags_.batch_size)) +
                        " (--batch-size " + std::to_string(flags_.batch_size) + " x " +
                        std::to_string(size_) +
                        " replicas): lower --batch-size or use fewer ranks.");
  // A function of the flags, the replicas and the data set only (not of --max-steps), so a run
  // stopped early and resumed follows the uninterrupted run's schedule.
  LrScheduleOptions lo;
  lo.lr = flags_.lr;
  lo.scaling = flags_.lr_scaling;
  lo.max_lr = flags_.max_lr;
  lo.warmup_steps = flags_.warmup_steps;
  lo.decay = flags_.lr_decay;
  schedule_.emplace(lo, lr_scale, steps_per_epoch, steps_per_epoch * flags_.epochs);

  // Same seed everywhere, and rank 0's state broadcast anyway: every replica starts identical.
  net_->initialize(static_cast<uint64_t>(flags_.seed));
  // state() is the host mirror of a GPU network's state: fill it from the initialised device state
  // first, or the broadcast sends (and state_from_host() then uploads) the mirror's zeros, and the
  // cuDNN model trains from all-zero weights, stuck at chance (Fashion-MNIST, 2026-11-27).
  net_->state_to_host();
  strategy_->broadcast_parameters(net_->state());
  net_->state_from_host();
  if (flags_.resume) resume();
  if (precision_->active()) progress_->line("train_cnn: " + precision_->describe());

  if (rank_ == 0 && flags_.metrics_csv != "none") {
    // Opened after the agreement's check that it can be (setup_local), appending on resume.
    csv_ = MetricsCsv(flags_.metrics_csv, flags_.resume && global_step_ > 0);
  }
  const int64_t global_batch = strategy_->global_batch(flags_.batch_size);
  std::ostringstream os;
  os << "train_cnn: " << size_ << (size_ == 1 ? " replica" : " replicas") << " (" << strategy_name_
     << ") on " << device_.description << "; " << describe_data() << "; batch " << flags_.batch_size
     << " per replica, " << global_batch << " global; " << schedule_->describe() << "; "
     << net_->num_parameters() << " parameters; input: ";
  if (flags_.prefetch == 0)
    os << "loaded by the training thread (--prefetch 0)";
  else
    os << "prefetch " << flags_.prefetch << " batches, " << flags_.loader_threads
       << (flags_.loader_threads == 1 ? " loader thread, " : " loader threads, ")
       << batch_memory_->description();
  if (flags_.data_delay_ms > 0) os << ", +" << flags_.data_delay_ms << " ms per batch";
  if (flags_.recompute.any()) os << "; recompute " << model::describe(flags_.recompute);
  progress_->line(os.str());
  if (!uneven.empty()) progress_->line(uneven);
}

Trainer::~Trainer() = default;

void Trainer::setup_local() {
  device_ = resolve_device(flags_.device, hvd::local_rank());
  precision_ = std::make_unique<MixedPrecision>(flags_, rank_);
  const bool need_test = evaluates();
  if (flags_.synthetic) {
    train_ = data::make_synthetic(flags_.synthetic_size, static_cast<uint64_t>(flags_.seed));
    if (need_test)
      test_ = data::make_synthetic(std::max<int64_t>(1, flags_.synthetic_size / 6),
                                   static_cast<uint64_t>(flags_.seed) + 1);
  } else {
    train_ = data::load_fashion_mnist(flags_.data_dir, data::Split::kTrain);
    if (need_test) test_ = data::load_fashion_mnist(flags_.data_dir, data::Split::kTest);
  }
  NetworkOptions no;
  no.model.in_channels = train_.channels;
  no.model.height = train_.rows;
  no.model.width = train_.cols;
  no.model.num_classes = train_.num_classes;
  no.model.hidden = flags_.hidden;
  no.momentum = static_cast<float>(flags_.momentum);
  no.weight_decay = static_cast<float>(flags_.weight_decay);
  no.model.precision = precision_->precision();
  no.gradient_dtype = gradient_dtype(flags_);
  no.model.recompute = flags_.recompute;
  net_ = make_network(device_, no);
  names_ = net_->parameter_names();
  batch_memory_ = net_->make_batch_memory(/*staged=*/flags_.prefetch > 0);
  step_metrics_.assign(3, 0.0);
  if (!flags_.checkpoint_dir.empty())
    checkpointer_.emplace(flags_.checkpoint_dir, flags_.keep_checkpoints);
  if (rank_ == 0 && flags_.metrics_csv != "none") {
    // Fail now, together with the other ranks, rather than after the first epoch.
    MetricsCsv probe(flags_.metrics_csv, /*append=*/true);
  }
}

void Trainer::agree_on_setup(const std::string& local_error) {
  // {ok, training images}: a rank that failed, or ranks that read different data, stop everyone.
  std::vector<int64_t> mine{local_error.empty() ? 1 : 0, local_error.empty() ? train_.count : -1};
  const std::vector<int64_t> all = hvd::allgather(mine, "train_cnn.setup");
  std::string failed;
  int64_t count = -1;
  bool counts_differ = false;
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] == 0) {
      failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    } else if (count < 0) {
      count = all[2 * r + 1];
    } else if (all[2 * r + 1] != count) {
      counts_differ = true;
    }
  }
  if (!local_error.empty()) throw AllRanksError(local_error);
  if (!failed.empty())
    throw AllRanksError("rank " + failed +
                        " failed to set up (its own message says why); stopping.");
  if (counts_differ) {
    std::string list;
    for (int r = 0; r < size_; ++r)
      list += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + ": " +
              std::to_string(all[2 * r + 1]);
    throw AllRanksError("the ranks loaded training sets of different sizes (" + list +
                        "): point every rank at the same --data-dir.");
  }
}

std::string Trainer::describe_data() const {
  std::string what = flags_.synthetic ? "synthetic data" : "Fashion-MNIST from " + flags_.data_dir;
  what += " (" + std::to_string(train_.count) + " training";
  if (test_.count > 0) what += ", " + std::to_string(test_.count) + " test";
  return what + " images)";
}

void Trainer::resume() {
  const std::optional<int64_t> step = checkpointer_->restore_latest(net_->state());
  if (!step) {
    progress_->line("train_cnn: no checkpoint in '" + flags_.checkpoint_dir +
                    "' yet; starting from scratch.");
    return;
  }
  net_->state_from_host();
  const auto& m = checkpointer_->last_metadata();
  const std::string& dir = flags_.checkpoint_dir;
  // The data order of a step depends on (seed, epoch, global batch, training set): all must match
  // for the resumed run to see the samples the interrupted one would have.
  const int64_t seed = meta_int(m, "seed", dir);
  const int64_t global_batch = meta_int(m, "global_batch", dir);
  const int64_t images = meta_int(m, "train_images", dir);
  const int64_t want_batch = strategy_->global_batch(flags_.batch_size);
  if (seed != flags_.seed)
    throw AllRanksError("--resume: the checkpoint of step " + std::to_string(*step) + " in '" +
                        dir + "' was trained with --seed " + std::to_string(seed) +
                        ", this run has --seed " + std::to_string(flags_.seed) + ": pass --seed " +
                        std::to_string(seed) + ".");
  // --global-batch-size that does not divide among this run's ranks (or the last run's): the
  // same requested batch, another actual one. Continue at the same place in the epoch's order.
  const auto requested = m.find("requested_global_batch");
  const bool same_request = flags_.global_batch_size > 0 && requested != m.end() &&
                            requested->second == std::to_string(flags_.global_batch_size);
  int64_t step_in_epoch = meta_int(m, "step_in_epoch", dir);
  if (global_batch != want_batch && same_request) {
    const int64_t images = step_in_epoch * global_batch;
    step_in_epoch = images / want_batch;  // at most one batch of images seen again
    progress_->line("train_cnn: the checkpoint's global batch is " + std::to_string(global_batch) +
                    ", this run's " + std::to_string(want_batch) + " (--global-batch-size " +
                    std::to_string(flags_.global_batch_size) + " on " + std::to_string(size_) +
                    " ranks): continuing at image " + std::to_string(step_in_epoch * want_batch) +
                    " of the epoch (step " + std::to_string(step_in_epoch) + "), with the rate " +
                    "of the new global batch; the run is no longer bitwise the uninterrupted one.");
  } else if (global_batch != want_batch)
    throw AllRanksError(
        "--resume: the checkpoint of step " + std::to_string(*step) + " in '" + dir +
        "' was trained with a global batch of " + std::to_string(global_batch) + ", this run has " +
        std::to_string(want_batch) + " (" + std::to_string(flags_.batch_size) + " x " +
        std::to_string(size_) + " replicas): pass --global-batch-size " +
        std::to_string(global_batch) + " (or --batch-size " + std::to_string(global_batch / size_) +
        "), or start from scratch with --no-resume or another --checkpoint-dir.");
  if (images != train_.count)
    throw AllRanksError("--resume: the checkpoint in '" + dir + "' was trained on " +
                        std::to_string(images) + " training images, this run has " +
                        std::to_string(train_.count) +
                        ": use the same data (--data-dir, --synthetic-size).");
  global_step_ = *step;
  precision_->restore(m);
  start_epoch_ = static_cast<int>(meta_int(m, "epoch", dir));
  start_step_in_epoch_ = step_in_epoch;
  last_saved_step_ = global_step_;
  progress_->line("train_cnn: resumed from " + checkpointer_->path_for(*step) + " (step " +
                  std::to_string(*step) + ", epoch " + std::to_string(start_epoch_ + 1) +
                  (start_step_in_epoch_ ? " at step " + std::to_string(start_step_in_epoch_)
                                        : std::string(" from its start")) +
                  ")");
}

data::LoaderOptions Trainer::loader_options() const {
  return {.prefetch = flags_.prefetch,
          .threads = flags_.loader_threads,
          .delay_ms = flags_.data_delay_ms};
}

Trainer::StepResult Trainer::train_step(data::BatchLoader& batches, double lr) {
  StepResult out;
  const auto t0 = Clock::now();
  const double wait0 = strategy_->wait_seconds();
  const double data_wait0 = batches.wait_seconds();
  const data::BatchView batch = batches.next();
  out.data_wait = batches.wait_seconds() - data_wait0;
  const int b = static_cast<int>(batch.size);

  strategy_->begin_step();
  net_->zero_gradients();
  const model::LossResult r = net_->forward_batch(batch);
  // The global-batch loss and accuracy travel while the backward pass runs.
  step_metrics_ = {r.loss * b, static_cast<double>(r.correct), static_cast<double>(b)};
  hvd::Handle metrics = hvd::allreduce_async(std::span<double>(step_metrics_),
                                             "train_cnn.step_metrics", hvd::ReduceOp::kSum);
  precision_->before_backward(*net_);
  net_->backward([&](size_t i) { strategy_->gradient_ready(names_[i], net_->gradient(i)); });
  strategy_->synchronize_gradients();
  net_->gradients_reduced();  // the GPU network widens 16-bit all-reduced gradients
  metrics.wait();
  out.loss = step_metrics_[0] / step_metrics_[2];
  out.accuracy = step_metrics_[1] / step_metrics_[2];
  // Identical on every rank (the all-reduced value), so every rank stops alike.
  if (!std::isfinite(out.loss))
    throw AllRanksError("the training loss became " + format("%g", out.loss) + " at step " +
                        std::to_string(global_step_ + 1) + " (lr " + format("%g", lr) +
                        "): lower --lr or --max-lr, or lengthen --warmup-steps.");
  // With --precision bf16|fp16: unscaled, checked, and skipped on every rank after an overflow.
  if (precision_->after_gradients(*net_, global_step_ + 1, *progress_))
    net_->optimizer_step(static_cast<float>(lr));
  out.seconds = seconds_since(t0);
  out.wait = strategy_->wait_seconds() - wait0;
  return out;
}

model::Evaluation Trainer::evaluate_test(int epoch) {
  const int64_t n = flags_.test_limit < 0 ? test_.count : std::min(flags_.test_limit, test_.count);
  const int64_t begin = n * rank_ / size_, end = n * (rank_ + 1) / size_;
  const int64_t isz = test_.image_size();
  model::Evaluation local = net_->evaluate(
      std::span<const float>(test_.images).subspan(begin * isz, (end - begin) * isz),
      std::span<const int32_t>(test_.labels).subspan(begin, end - begin), end - begin);
  std::vector<double> sums{local.loss * local.count, std::round(local.accuracy * local.count),
                           static_cast<double>(local.count)};
  hvd::allreduce(sums, "train_cnn.eval." + std::to_string(epoch), hvd::ReduceOp::kSum);
  model::Evaluation global;
  global.count = static_cast<int64_t>(sums[2]);
  if (global.count > 0) {
    global.loss = sums[0] / sums[2];
    global.accuracy = sums[1] / sums[2];
  }
  return global;
}

void Trainer::save_checkpoint(int next_epoch, int64_t step_in_epoch, bool in_background) {
  if (!checkpointer_) return;
  const bool async = in_background && flags_.checkpoint_async;
  if (last_saved_step_ == global_step_) {
    // Saved already; a write still in the background is waited for at the end and at a stop.
    if (!async && writing_step_ >= 0) {
      checkpointer_->wait();
      report_written();
    }
    return;
  }
  net_->state_to_host();
  std::map<std::string, std::string> metadata{
      {"epoch", std::to_string(next_epoch)},
      {"step_in_epoch", std::to_string(step_in_epoch)},
      {"seed", std::to_string(flags_.seed)},
      {"global_batch", std::to_string(strategy_->global_batch(flags_.batch_size))},
      {"requested_global_batch",
       std::to_string(flags_.global_batch_size > 0 ? flags_.global_batch_size
                                                   : strategy_->global_batch(flags_.batch_size))},
      {"train_images", std::to_string(train_.count)},
      {"replicas", std::to_string(size_)},
      {"data", flags_.synthetic ? "synthetic" : flags_.data_dir},
      {"program", "train_cnn"}};
  precision_->save(metadata);
  // Either call first waits for the write in the background (and throws its failure).
  if (async)
    checkpointer_->save_async(global_step_, net_->state(), metadata);
  else
    checkpointer_->save(global_step_, net_->state(), metadata);
  report_written();
  last_saved_step_ = global_step_;
  if (async) {
    writing_step_ = global_step_;
    progress_->line("checkpoint: writing step " + std::to_string(global_step_) + " to " +
                    checkpointer_->path_for(global_step_) + " in the background");
  } else {
    progress_->line("checkpoint: saved step " + std::to_string(global_step_) + " to " +
                    checkpointer_->path_for(global_step_));
  }
}

void Trainer::report_written() {
  if (writing_step_ < 0) return;
  progress_->line("checkpoint: saved step " + std::to_string(writing_step_) + " to " +
                  checkpointer_->path_for(writing_step_));
  writing_step_ = -1;
}

bool Trainer::after_step(int epoch, int64_t next_step_in_epoch) {
  const int64_t every = flags_.checkpoint_every_steps;
  if (every > 0 && global_step_ % every == 0)
    save_checkpoint(epoch, next_step_in_epoch, /*in_background=*/true);
  // The same answer on every rank after the same step (hvd/stop.h): the step's all-reduces were
  // waited for on every rank alike.
  if (!stop_ || !stop_->should_stop()) return false;
  if (checkpointer_) save_checkpoint(epoch, next_step_in_epoch);
  return true;
}

void Trainer::report_stop(int epoch, int64_t step_in_epoch) {
  std::string line = "train_cnn: stopping after step " + std::to_string(global_step_) + " (epoch " +
                     std::to_string(epoch + 1) + " at step " + std::to_string(step_in_epoch) +
                     ", " + stop_->reason() + "): ";
  if (checkpointer_)
    line += "saved " + checkpointer_->path_for(last_saved_step_) + "; exit " +
            std::to_string(hvd::kExitRequeue) + " (requeue: the same command resumes from it)";
  else
    line += "nothing saved (no --checkpoint-dir)";
  progress_->line(line);
}

void Trainer::dump_weights() {
  net_->state_to_host();
  if (rank_ != 0 || flags_.dump_weights.empty()) return;
  static_assert(std::endian::native == std::endian::little,
                "--dump-weights writes host floats as little-endian");
  const std::span<const float> w = net_->flat_parameters();
  std::ofstream out(flags_.dump_weights, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size_bytes()));
  out.close();
  if (!out)
    throw hvd::InvalidArgumentError("--dump-weights: cannot write '" + flags_.dump_weights +
                                    "': check that its folder exists and is writable.");
}

// Totals of one run() over its epochs.
struct Trainer::RunTotals {
  double train_seconds = 0, train_wait = 0, train_data_wait = 0;  // this run
  double bench_seconds = 0, bench_wait = 0, bench_data_wait = 0;  // after the warm-up steps
  int64_t bench_steps = 0;
  int64_t activation_peak = 0;  // bytes: the most any training step held (model's accounting)
};

bool Trainer::evaluates() const { return !flags_.benchmark && flags_.test_limit != 0; }

TrainSummary Trainer::run() {
  TrainSummary sum;
  RunTotals totals;
  bool evaluated_last = false;
  const auto run_start = Clock::now();
  int epoch = start_epoch_;
  int64_t step_in_epoch = start_step_in_epoch_;
  for (; epoch < flags_.epochs; ++epoch, step_in_epoch = 0) {
    EpochStats e;
    // --max-steps or a signal stopped the run inside this epoch: epoch and step_in_epoch say where.
    if (!train_epoch(epoch, step_in_epoch, totals, sum, e)) break;
    end_epoch(e, sum);
    evaluated_last = e.evaluated;
  }
  if (sum.stopped) {
    // Saved by after_step(); no evaluation: a job about to be killed saves first and leaves.
    sum.global_step = global_step_;
    sum.seconds = seconds_since(run_start);
    report_stop(epoch, step_in_epoch);
    return sum;
  }
  // Stopped inside an epoch (--max-steps), or the epochs were already done (a resumed run).
  if (evaluates() && !evaluated_last && sum.steps_this_run > 0) evaluate_at_stop(epoch, sum);
  if (epoch >= flags_.epochs)
    save_checkpoint(epoch, 0);
  else
    save_checkpoint(epoch, step_in_epoch);
  sum.global_step = global_step_;
  if (sum.epochs_done == 0) sum.epochs_done = epoch;
  sum.seconds = seconds_since(run_start);
  report(totals, sum);
  if (precision_->enabled())
    progress_->line("train_cnn: " + std::string(model::precision_name(precision_->precision())) +
                    ": " + std::to_string(precision_->skipped_steps()) +
                    " steps skipped for overflow in this run; loss scale now " +
                    format("%g", precision_->scale()));
  return sum;
}

bool Trainer::train_epoch(int epoch, int64_t& step_in_epoch, RunTotals& totals, TrainSummary& sum,
                          EpochStats& e) {
  const hvd::Shard shard = strategy_->shard(train_.count, flags_.batch_size, epoch);
  const int64_t global_batch = strategy_->global_batch(flags_.batch_size);
  StepStats s;
  s.epoch = epoch;
  s.epochs = flags_.epochs;
  s.steps_in_epoch = shard.steps;
  double epoch_seconds = 0, epoch_wait = 0, epoch_data_wait = 0, loss_sum = 0, acc_sum = 0, lr = 0;
  int64_t epoch_steps = 0;
  // The batches of the steps this run trains in the epoch (up to --max-steps), loaded ahead.
  const int64_t end_step =
      flags_.max_steps < 0
          ? shard.steps
          : std::min(shard.steps,
                     step_in_epoch + std::max<int64_t>(0, flags_.max_steps - global_step_));
  data::BatchLoader batches(train_, shard, std::min(step_in_epoch, end_step), end_step,
                            loader_options(), *batch_memory_);
  for (; step_in_epoch < shard.steps; ++step_in_epoch) {
    if (flags_.max_steps >= 0 && global_step_ >= flags_.max_steps) break;
    lr = schedule_->at(global_step_, epoch);
    const StepResult r = train_step(batches, lr);
    // Every rank asks (the measure of the step's last release comes with the next cycle, which
    // the ranks then start at once): the same report on every rank.
    const hvd::StragglerReport straggler = hvd::straggler_report();
    totals.activation_peak = std::max(totals.activation_peak, net_->activation_memory().peak_bytes);
    ++global_step_;
    ++sum.steps_this_run;
    ++epoch_steps;
    epoch_seconds += r.seconds;
    epoch_wait += r.wait;
    epoch_data_wait += r.data_wait;
    loss_sum += r.loss;
    acc_sum += r.accuracy;
    if (sum.steps_this_run > flags_.benchmark_warmup) {
      totals.bench_seconds += r.seconds;
      totals.bench_wait += r.wait;
      totals.bench_data_wait += r.data_wait;
      ++totals.bench_steps;
    }
    s.step_in_epoch = step_in_epoch + 1;
    s.global_step = global_step_;
    s.loss = r.loss;
    s.accuracy = r.accuracy;
    s.epoch_loss = loss_sum / epoch_steps;
    s.epoch_accuracy = acc_sum / epoch_steps;
    s.images_per_s = epoch_seconds > 0 ? epoch_steps * global_batch / epoch_seconds : 0;
    s.lr = lr;
    s.wait_share = epoch_seconds > 0 ? epoch_wait / epoch_seconds : 0;
    s.slow_rank = straggler.rank;
    s.lateness_ms = straggler.lateness_ms;
    progress_->step(s);
    csv_.step(s, r.seconds > 0 ? global_batch / r.seconds : 0,
              r.seconds > 0 ? r.wait / r.seconds : 0);
    if (after_step(epoch, step_in_epoch + 1)) {
      sum.stopped = true;
      ++step_in_epoch;  // the step just done: the resumed run starts after it
      break;
    }
  }
  totals.train_seconds += epoch_seconds;
  totals.train_wait += epoch_wait;
  totals.train_data_wait += epoch_data_wait;
  if (step_in_epoch < shard.steps || sum.stopped) return false;

  e.epoch = epoch;
  e.epochs = flags_.epochs;
  e.global_step = global_step_;
  e.train_loss = epoch_steps ? loss_sum / epoch_steps : 0;
  e.train_accuracy = epoch_steps ? acc_sum / epoch_steps : 0;
  e.images_per_s = epoch_seconds > 0 ? epoch_steps * global_batch / epoch_seconds : 0;
  e.lr = lr;
  e.wait_share = epoch_seconds > 0 ? epoch_wait / epoch_seconds : 0;
  e.seconds = epoch_seconds;
  return true;
}

void Trainer::end_epoch(EpochStats& e, TrainSummary& sum) {
  if (evaluates()) {
    const model::Evaluation ev = evaluate_test(e.epoch);
    e.evaluated = true;
    e.test_loss = ev.loss;
    e.test_accuracy = ev.accuracy;
    sum.evaluated = true;
    sum.test_loss = ev.loss;
    sum.test_accuracy = ev.accuracy;
  }
  progress_->epoch_end(e);
  csv_.epoch(e);
  sum.epochs_done = e.epoch + 1;
  if (flags_.checkpoint_every_epoch) save_checkpoint(e.epoch + 1, 0, /*in_background=*/true);
}

void Trainer::evaluate_at_stop(int epoch, TrainSummary& sum) {
  const model::Evaluation ev = evaluate_test(epoch);
  sum.evaluated = true;
  sum.test_loss = ev.loss;
  sum.test_accuracy = ev.accuracy;
  progress_->line("test loss " + format("%.4f", ev.loss) + " accuracy " +
                  format("%.4f", ev.accuracy) + " after step " + std::to_string(global_step_));
}

void Trainer::report(const RunTotals& totals, TrainSummary& sum) {
  const int64_t global_batch = strategy_->global_batch(flags_.batch_size);
  // Throughput and wait share: means over ranks (every rank runs the same steps).
  std::vector<double> perf{
      totals.train_seconds > 0 ? sum.steps_this_run * global_batch / totals.train_seconds : 0,
      totals.train_seconds > 0 ? totals.train_wait / totals.train_seconds : 0,
      totals.bench_seconds > 0 ? totals.bench_steps * global_batch / totals.bench_seconds : 0,
      totals.bench_seconds > 0 ? totals.bench_wait / totals.bench_seconds : 0,
      totals.train_seconds > 0 ? totals.train_data_wait / totals.train_seconds : 0,
      totals.bench_seconds > 0 ? totals.bench_data_wait / totals.bench_seconds : 0};
  hvd::allreduce(perf, "train_cnn.perf", hvd::ReduceOp::kAverage);
  sum.images_per_s = perf[0];
  sum.wait_share = perf[1];
  sum.data_wait_share = perf[4];
  dump_weights();

  if (flags_.benchmark) {
    const bool warm = totals.bench_steps > 0;
    const double images_per_s = warm ? perf[2] : perf[0];
    std::ostringstream os;
    os << "benchmark: " << size_ << (size_ == 1 ? " replica" : " replicas") << " x batch "
       << flags_.batch_size << " (" << global_batch << " images per step), "
       << (warm ? totals.bench_steps : sum.steps_this_run) << " steps measured"
       << (warm ? " after " + std::to_string(flags_.benchmark_warmup) + " warm-up steps"
                : std::string(""))
       << ": " << format("%.1f", images_per_s) << " images/s ("
       << format("%.1f", images_per_s / size_) << " per replica), "
       << format("%.2f", 1000.0 * global_batch / std::max(1e-9, images_per_s))
       << " ms per step, waiting for communication "
       << format("%.1f", 100.0 * (warm ? perf[3] : perf[1])) << "% and for data "
       << format("%.1f", 100.0 * (warm ? perf[5] : perf[4])) << "% of step time (--prefetch "
       << flags_.prefetch << ", --data-delay-ms " << flags_.data_delay_ms << "); load average "
       << load_average();
    progress_->line(os.str());
  }
  if (flags_.benchmark || flags_.recompute.any()) {
    // The model's own accounting (model/activation_ledger.h) on this rank; every rank runs the
    // same batch size, so the same figure.
    progress_->line("activations: at most " + std::to_string(totals.activation_peak) + " bytes (" +
                    format("%.2f", totals.activation_peak / 1e6) +
                    " MB) held at once in a training step of one replica (batch " +
                    std::to_string(flags_.batch_size) + ", --recompute " +
                    model::describe(flags_.recompute) + ")");
  }
  std::ostringstream os;
  os << "train_cnn: done: " << sum.epochs_done << (sum.epochs_done == 1 ? " epoch, " : " epochs, ")
     << global_step_ << " steps (" << sum.steps_this_run << " in this run) of " << size_ << " x "
     << flags_.batch_size << " images in " << format("%.1f", sum.seconds) << " s";
  if (sum.evaluated) os << "; test accuracy " << format("%.4f", sum.test_accuracy);
  os << "; " << format("%.1f", sum.images_per_s) << " images/s; waiting for communication "
     << format("%.1f", 100.0 * sum.wait_share) << "% and for data "
     << format("%.1f", 100.0 * sum.data_wait_share) << "% of step time";
  progress_->line(os.str());
  // HVD_AUTOTUNE=1 (docs/tuning.md): what the search chose, or how far it got.
  if (const hvd::TuningReport tuning = hvd::tuning_report(); tuning.enabled)
    progress_->line(tuning.done ? "autotune: " + tuning.settings + " (" +
                                      std::to_string(tuning.trials.size()) + " trials; " +
                                      tuning.explanation + ")"
                                : "autotune: not finished (" + tuning.state +
                                      "): the run ended during the search; it needs more steps "
                                      "(docs/tuning.md)");
}

}  // namespace train_cnn
