// train_cnn_single: trains the train_cnn model in one process (no MPI), to show the model pieces
// learn and to measure single-core throughput.
//
//   train_cnn_single [--data-dir DIR | --synthetic N] [--epochs E] [--batch-size B] [--lr LR]
//                    [--lr-decay F] [--momentum M] [--weight-decay WD] [--hidden H]
//                    [--seed S] [--max-steps K] [--test-limit N]
//
// Each epoch visits the training set in the order of data::epoch_permutation(seed, epoch); the
// learning rate of epoch e is lr * lr_decay^e. After each epoch it prints the mean training loss
// and accuracy, the test loss and accuracy, and training images/s (evaluation not timed).
// OPENBLAS_NUM_THREADS is irrelevant: the model sets OpenBLAS to one thread. On a shared machine
// the images per CPU-second figure (process CPU time) is steadier than the wall-clock images/s.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/idx_reader.h"
#include "data/synthetic.h"
#include "model/model.h"
#include "model/sgd_momentum.h"

namespace {

struct Flags {
  std::string data_dir = train_cnn::data::kDefaultFashionMnistDir;
  long synthetic = 0;
  int epochs = 1;
  int batch = 64;
  double lr = 0.05;
  double lr_decay = 1.0;
  double momentum = 0.9;
  double weight_decay = 0.0;
  int hidden = 512;
  unsigned long seed = 42;
  long max_steps = -1;
  long test_limit = -1;  // evaluate on the first N test images only (-1: all)
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "%s\nusage: train_cnn_single [--data-dir DIR | --synthetic N] [--epochs E] "
               "[--batch-size B] [--lr LR] [--lr-decay F] [--momentum M] [--weight-decay WD] "
               "[--hidden H] [--seed S] [--max-steps K] [--test-limit N]\n",
               msg);
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    if (a == "--data-dir")
      f.data_dir = v;
    else if (a == "--synthetic")
      f.synthetic = std::atol(v);
    else if (a == "--epochs")
      f.epochs = std::atoi(v);
    else if (a == "--batch-size")
      f.batch = std::atoi(v);
    else if (a == "--lr")
      f.lr = std::atof(v);
    else if (a == "--lr-decay")
      f.lr_decay = std::atof(v);
    else if (a == "--momentum")
      f.momentum = std::atof(v);
    else if (a == "--weight-decay")
      f.weight_decay = std::atof(v);
    else if (a == "--hidden")
      f.hidden = std::atoi(v);
    else if (a == "--seed")
      f.seed = std::strtoul(v, nullptr, 10);
    else if (a == "--max-steps")
      f.max_steps = std::atol(v);
    else if (a == "--test-limit")
      f.test_limit = std::atol(v);
    else
      usage(("unknown flag " + a).c_str());
  }
  if (f.batch <= 0 || f.epochs <= 0) usage("--batch-size and --epochs must be > 0");
  return f;
}

}  // namespace

int main(int argc, char** argv) try {
  namespace data = train_cnn::data;
  namespace model = train_cnn::model;
  const Flags flags = parse(argc, argv);

  data::Dataset train, test;
  if (flags.synthetic > 0) {
    train = data::make_synthetic(flags.synthetic, flags.seed);
    test = data::make_synthetic(std::max(1L, flags.synthetic / 6), flags.seed + 1);
  } else {
    train = data::load_fashion_mnist(flags.data_dir, data::Split::kTrain);
    test = data::load_fashion_mnist(flags.data_dir, data::Split::kTest);
  }
  std::printf("train %lld images, test %lld images, %dx%d\n", static_cast<long long>(train.count),
              static_cast<long long>(test.count), train.rows, train.cols);

  model::ModelOptions mo;
  mo.height = train.rows;
  mo.width = train.cols;
  mo.hidden = flags.hidden;
  model::Model net(mo);
  net.initialize(flags.seed);
  model::SgdMomentum opt(net.num_parameters(),
                         {.momentum = static_cast<float>(flags.momentum),
                          .weight_decay = static_cast<float>(flags.weight_decay)});
  std::printf("model: conv5x5x32-pool-conv5x5x64-pool-fc%d-fc10, %lld parameters, batch %d\n",
              flags.hidden, static_cast<long long>(net.num_parameters()), flags.batch);

  std::vector<float> images(static_cast<size_t>(flags.batch) * train.image_size());
  std::vector<int32_t> labels(static_cast<size_t>(flags.batch));
  long step = 0;
  bool stop = false;
  for (int epoch = 0; epoch < flags.epochs && !stop; ++epoch) {
    const float lr = static_cast<float>(flags.lr * std::pow(flags.lr_decay, epoch));
    const std::vector<int64_t> order = data::epoch_permutation(train.count, flags.seed, epoch);
    double loss_sum = 0.0;
    int64_t correct = 0, seen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t cpu0 = std::clock();
    for (int64_t start = 0; start + flags.batch <= train.count; start += flags.batch) {
      std::span<const int64_t> idx(order.data() + start, static_cast<size_t>(flags.batch));
      data::gather_batch(train, idx, images, labels);
      net.zero_gradients();
      const model::LossResult r = net.forward(images, labels, flags.batch);
      net.backward();
      opt.step(net.flat_parameters(), net.flat_gradients(), lr);
      if (!std::isfinite(r.loss)) {
        std::fprintf(stderr, "loss became %f at step %ld; lower --lr\n", r.loss, step);
        return 1;
      }
      loss_sum += r.loss * flags.batch;
      correct += r.correct;
      seen += flags.batch;
      ++step;
      if (step % 100 == 0) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  epoch %d step %ld loss %.4f acc %.4f %.1f img/s\n", epoch + 1, step,
                    loss_sum / seen, static_cast<double>(correct) / seen, seen / s);
        std::fflush(stdout);
      }
      if (flags.max_steps >= 0 && step >= flags.max_steps) {
        stop = true;
        break;
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_secs = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
    const int64_t n_test =
        flags.test_limit >= 0 ? std::min<int64_t>(flags.test_limit, test.count) : test.count;
    const model::Model::Evaluation ev =
        net.evaluate(std::span<const float>(test.images).first(n_test * test.image_size()),
                     std::span<const int32_t>(test.labels).first(n_test), n_test);
    std::printf(
        "epoch %d: lr %.4f train loss %.4f acc %.4f | test loss %.4f acc %.4f | "
        "%.1f images/s (%.1f s wall; %.1f images per CPU-second)\n",
        epoch + 1, lr, seen ? loss_sum / seen : 0.0,
        seen ? static_cast<double>(correct) / seen : 0.0, ev.loss, ev.accuracy, seen / secs, secs,
        seen / cpu_secs);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_cnn_single: %s\n", e.what());
  return 1;
}
