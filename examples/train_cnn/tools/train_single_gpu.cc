// train_cnn_single_gpu: train_cnn's GPU training step without hvd (no MPI, no hvd runtime), to
// measure what hvd costs on one rank: `train_cnn --device cuda --benchmark` on 1 rank against this
// program with the same flags gives the 1-rank overhead (scripts/gpu-check prints the ratio).
//
//   train_cnn_single_gpu [--synthetic | --data-dir DIR] [--synthetic-size N] [--batch-size B]
//       [--max-steps K] [--benchmark-warmup W] [--lr LR] [--momentum M] [--weight-decay WD]
//       [--hidden H] [--seed S] [--device I] [--tf32]
//
// The step is train_cnn's (trainer.cc, Trainer::train_step, with the cuDNN network) minus hvd:
// gather the batch on the host in the epoch's permuted order, zero the gradients, forward from the
// host batch (staged through pinned memory; waits for the loss and correct count), backward,
// check the loss is finite, one SGD-momentum step on the device. train_cnn adds: the gradients'
// all-reduces (started from backward's callbacks, waited before the step), the step metrics'
// all-reduce, the progress line and the per-step CSV (pass --metrics-csv none to train_cnn).
// Defaults are train_cnn's (batch 64, momentum 0.9, weight decay 5e-4, hidden 512, seed 42,
// lr 0.05; --max-steps 100 and --benchmark-warmup 5 as train_cnn --benchmark).
//
// Prints the same "benchmark:" line as train_cnn --benchmark: images/s over the steps after the
// warm-up, from the sum of the per-step wall times. Exit status: 0, 1 on an error, 2 bad usage,
// 77 no CUDA device (skipped).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/idx_reader.h"
#include "data/synthetic.h"
#include "gpu/context.h"
#include "gpu/cudnn_model.h"
#include "gpu/sgd_momentum.h"

namespace {

struct Flags {
  std::string data_dir = train_cnn::data::kDefaultFashionMnistDir;
  bool synthetic = false;
  long synthetic_size = 60000;
  int batch = 64;
  long max_steps = 100;
  long warmup = 5;
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int hidden = 512;
  unsigned long seed = 42;
  int device = 0;
  bool tf32 = false;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(
      stderr,
      "train_cnn_single_gpu: %s\nusage: train_cnn_single_gpu [--synthetic | --data-dir DIR] "
      "[--synthetic-size N] [--batch-size B] [--max-steps K] [--benchmark-warmup W] [--lr LR] "
      "[--momentum M] [--weight-decay WD] [--hidden H] [--seed S] [--device I] [--tf32]\n",
      msg.c_str());
  std::exit(2);
}

long to_long(const std::string& flag, const char* v, long lo) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo)
    usage(flag + " needs an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

double to_double(const std::string& flag, const char* v) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*v == '\0' || *end != '\0' || !std::isfinite(x))
    usage(flag + " needs a number, got '" + v + "'");
  return x;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--synthetic") {
      f.synthetic = true;
      continue;
    }
    if (a == "--tf32") {
      f.tf32 = true;
      continue;
    }
    if (a == "--benchmark")
      continue;  // accepted for symmetry with train_cnn: this program only benchmarks
    if (i + 1 >= argc) usage("missing value for " + a);
    const char* v = argv[++i];
    if (a == "--data-dir")
      f.data_dir = v;
    else if (a == "--synthetic-size")
      f.synthetic_size = to_long(a, v, 1);
    else if (a == "--batch-size")
      f.batch = static_cast<int>(to_long(a, v, 1));
    else if (a == "--max-steps")
      f.max_steps = to_long(a, v, 1);
    else if (a == "--benchmark-warmup")
      f.warmup = to_long(a, v, 0);
    else if (a == "--lr")
      f.lr = to_double(a, v);
    else if (a == "--momentum")
      f.momentum = to_double(a, v);
    else if (a == "--weight-decay")
      f.weight_decay = to_double(a, v);
    else if (a == "--hidden")
      f.hidden = static_cast<int>(to_long(a, v, 1));
    else if (a == "--seed")
      f.seed = static_cast<unsigned long>(to_long(a, v, 0));
    else if (a == "--device")
      f.device = static_cast<int>(to_long(a, v, 0));
    else
      usage("unknown flag " + a);
  }
  return f;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  return (in >> one) ? one : std::string();
}

}  // namespace

int main(int argc, char** argv) try {
  namespace data = train_cnn::data;
  namespace gpu = train_cnn::gpu;
  const Flags flags = parse(argc, argv);
  if (gpu::device_count() == 0) {
    std::printf("SKIPPED: train_cnn_single_gpu: no CUDA device visible\n");
    return 77;
  }
  if (flags.device >= gpu::device_count())
    usage("--device " + std::to_string(flags.device) + ": only " +
          std::to_string(gpu::device_count()) + " visible");

  const data::Dataset train = flags.synthetic
                                  ? data::make_synthetic(flags.synthetic_size, flags.seed)
                                  : data::load_fashion_mnist(flags.data_dir, data::Split::kTrain);
  train_cnn::model::ModelOptions mo;
  mo.in_channels = train.channels;
  mo.height = train.rows;
  mo.width = train.cols;
  mo.num_classes = train.num_classes;
  mo.hidden = flags.hidden;
  gpu::GpuOptions go;
  go.device = flags.device;
  go.allow_tf32 = flags.tf32;
  gpu::CudnnModel net(mo, go);
  net.initialize(flags.seed);
  gpu::SgdMomentum opt(net.context(), net.num_parameters(),
                       {.momentum = static_cast<float>(flags.momentum),
                        .weight_decay = static_cast<float>(flags.weight_decay)});
  std::printf(
      "train_cnn_single_gpu: no hvd, cuda:%d (cuDNN, cuBLAS%s); %s (%lld training images); batch "
      "%d; "
      "%lld parameters\n",
      flags.device, flags.tf32 ? ", TF32" : "",
      flags.synthetic ? "synthetic data" : ("Fashion-MNIST from " + flags.data_dir).c_str(),
      static_cast<long long>(train.count), flags.batch,
      static_cast<long long>(net.num_parameters()));
  std::fflush(stdout);

  const int64_t steps_per_epoch = train.count / flags.batch;
  if (steps_per_epoch == 0) usage("--batch-size is larger than the training set");
  std::vector<float> images(static_cast<size_t>(flags.batch * train.image_size()));
  std::vector<int32_t> labels(static_cast<size_t>(flags.batch));
  std::vector<int64_t> order;
  double bench_seconds = 0, all_seconds = 0;
  long bench_steps = 0;
  double last_loss = 0;
  for (long step = 0; step < flags.max_steps; ++step) {
    const int64_t epoch = step / steps_per_epoch, in_epoch = step % steps_per_epoch;
    if (in_epoch == 0) order = data::epoch_permutation(train.count, flags.seed, epoch);
    const auto t0 = std::chrono::steady_clock::now();
    data::gather_batch(
        train,
        std::span<const int64_t>(order).subspan(static_cast<size_t>(in_epoch * flags.batch),
                                                static_cast<size_t>(flags.batch)),
        images, labels);
    net.zero_gradients();
    const train_cnn::model::LossResult r = net.forward(images, labels, flags.batch);
    net.backward();
    if (!std::isfinite(r.loss)) {
      std::fprintf(stderr, "train_cnn_single_gpu: the loss became %g at step %ld: lower --lr\n",
                   r.loss, step + 1);
      return 1;
    }
    opt.step(net.flat_parameters(), net.flat_gradients(), static_cast<float>(flags.lr));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    all_seconds += s;
    if (step >= flags.warmup) {
      bench_seconds += s;
      ++bench_steps;
    }
    last_loss = r.loss;
  }
  net.context().synchronize();
  const bool warm = bench_steps > 0;
  const double ips = warm ? bench_steps * flags.batch / bench_seconds
                          : flags.max_steps * flags.batch / all_seconds;
  std::printf(
      "benchmark: no hvd, 1 GPU x batch %d (%d images per step), %ld steps measured%s: %.1f "
      "images/s, "
      "%.2f ms per step; last loss %.4f; load average %s\n",
      flags.batch, flags.batch, warm ? bench_steps : flags.max_steps,
      warm ? (" after " + std::to_string(flags.warmup) + " warm-up steps").c_str() : "", ips,
      1000.0 * flags.batch / ips, last_loss, load_average().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_cnn_single_gpu: %s\n", e.what());
  return 1;
}
