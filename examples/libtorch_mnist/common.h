#pragma once

// What mnist.cpp (plain LibTorch) and mnist_hvd.cpp (the same made distributed with hvd::torch)
// share, so that the two .cpp files differ only where the port changes something: the flags, the
// data files, printing, timing and the plain program's checkpoints. No hvd here.
//
// Flags (both programs; a value follows the flag or '='):
//   --epochs N            epochs (1)
//   --batch-size N        samples per step over all processes: the global batch (64); the
//                         distributed version gives each of its N ranks batch-size / N
//   --max-steps N         stop after N optimizer steps in total (0: no limit)
//   --lr X, --momentum X  SGD (0.01, 0.5: pytorch/examples' cpp/mnist)
//   --dropout X           dropout probability of both dropout layers (0.5; 0 disables them)
//   --seed N              torch::manual_seed (1): initial weights, dropout, plain's shuffle
//   --threads N           torch::set_num_threads (0: LibTorch's default)
//   --log-interval N      print the loss every N steps (10; 0: never)
//   --warmup N            steps left out of the images/s figure (5)
//   --no-test             skip the test-set evaluation after each epoch
//   --data-dir DIR        Fashion-MNIST IDX files, plain or .gz (/usr/share/datasets/fashion-mnist)
//   --cache-dir DIR       where .gz files are decompressed to (a folder under the temp directory)
//   --checkpoint-dir DIR  resume from the newest checkpoint there; save one after each epoch and
//                         at the end
//   --weights-out PATH    write the final parameters, one value per line
//   --no-overlap          (distributed version) all-reduce after backward() instead of from hooks
//   --fp16-allreduce      (distributed version) gradients travel as float16
//   --precision P         fp32 (default), bf16 or fp16: the forward pass under LibTorch's CPU
//                         autocast in that dtype (fp16 needs LibTorch 2.5 or later); the
//                         distributed version scales the loss with hvd::torch::GradScaler (plain
//                         LibTorch has no GradScaler in C++)
//   --test-overflow S:R   (a test hook) rank R's loss at global step S is multiplied by Inf: the
//                         distributed version must skip that step on every rank

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mnist {

// Fashion-MNIST's training-set mean and standard deviation of the pixel values in [0, 1].
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;

struct Options {
  int64_t epochs = 1;
  int64_t batch_size = 64;
  int64_t max_steps = 0;
  int64_t test_batch_size = 1000;
  double lr = 0.01;
  double momentum = 0.5;
  double dropout = 0.5;
  uint64_t seed = 1;
  int threads = 0;
  int64_t log_interval = 10;
  int64_t warmup = 5;
  bool test = true;
  bool overlap = true;
  bool fp16_allreduce = false;
  std::string precision = "fp32";
  int64_t test_overflow_step = -1;
  int64_t test_overflow_rank = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string cache_dir;
  std::string checkpoint_dir;
  std::string weights_out;
};

inline const char* kUsage =
    "usage: %s [--epochs N] [--batch-size N] [--max-steps N] [--lr X] [--momentum X] [--dropout "
    "X]\n"
    "          [--seed N] [--threads N] [--log-interval N] [--warmup N] [--no-test] [--data-dir "
    "DIR]\n"
    "          [--cache-dir DIR] [--checkpoint-dir DIR] [--weights-out PATH] [--no-overlap] "
    "[--fp16-allreduce]\n"
    "          [--precision fp32|bf16|fp16] [--test-overflow STEP:RANK]\n";

// Parses argv; throws std::invalid_argument naming the flag on bad input; --help prints the usage.
inline Options parse_options(int argc, char** argv) {
  Options o;
  auto integer = [](const std::string& flag, const std::string& v, int64_t min) {
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < min)
      throw std::invalid_argument(flag + " needs an integer >= " + std::to_string(min) + ", got '" +
                                  v + "'");
    return static_cast<int64_t>(x);
  };
  auto real = [](const std::string& flag, const std::string& v, double min, double max) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(x >= min && x <= max))
      throw std::invalid_argument(flag + " needs a number from " + std::to_string(min) + " to " +
                                  std::to_string(max) + ", got '" + v + "'");
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::printf(kUsage, argv[0]);
      std::exit(0);
    }
    if (flag == "--no-test") {
      o.test = false;
      continue;
    }
    if (flag == "--no-overlap") {
      o.overlap = false;
      continue;
    }
    if (flag == "--fp16-allreduce") {
      o.fp16_allreduce = true;
      continue;
    }
    if (const auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw std::invalid_argument(flag + " needs a value");
    }
    if (flag == "--epochs")
      o.epochs = integer(flag, value, 1);
    else if (flag == "--batch-size")
      o.batch_size = integer(flag, value, 1);
    else if (flag == "--max-steps")
      o.max_steps = integer(flag, value, 0);
    else if (flag == "--test-batch-size")
      o.test_batch_size = integer(flag, value, 1);
    else if (flag == "--lr")
      o.lr = real(flag, value, 0, 1e6);
    else if (flag == "--momentum")
      o.momentum = real(flag, value, 0, 1);
    else if (flag == "--dropout")
      o.dropout = real(flag, value, 0, 0.99);
    else if (flag == "--seed")
      o.seed = static_cast<uint64_t>(integer(flag, value, 0));
    else if (flag == "--threads")
      o.threads = static_cast<int>(integer(flag, value, 0));
    else if (flag == "--log-interval")
      o.log_interval = integer(flag, value, 0);
    else if (flag == "--warmup")
      o.warmup = integer(flag, value, 0);
    else if (flag == "--data-dir")
      o.data_dir = value;
    else if (flag == "--cache-dir")
      o.cache_dir = value;
    else if (flag == "--checkpoint-dir")
      o.checkpoint_dir = value;
    else if (flag == "--weights-out")
      o.weights_out = value;
    else if (flag == "--precision") {
      if (value != "fp32" && value != "bf16" && value != "fp16")
        throw std::invalid_argument("--precision needs fp32, bf16 or fp16, got '" + value + "'");
      o.precision = value;
    } else if (flag == "--test-overflow") {
      const auto colon = value.find(':');
      if (colon == std::string::npos)
        throw std::invalid_argument("--test-overflow needs STEP:RANK, got '" + value + "'");
      o.test_overflow_step = integer(flag, value.substr(0, colon), 1);
      o.test_overflow_rank = integer(flag, value.substr(colon + 1), 0);
    } else
      throw std::invalid_argument("unknown flag " + flag + " (--help lists them)");
  }
  return o;
}

// A folder where torch::data::datasets::MNIST finds the four IDX files uncompressed (under MNIST's
// names, which Fashion-MNIST shares): data_dir itself when they are there, else a cache folder
// holding them decompressed from data_dir's .gz files (written once, atomically, so that several
// processes may prepare it at the same time).
inline std::string prepare_data(const Options& o) {
  namespace fs = std::filesystem;
  static const char* kFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  bool plain = true;
  for (const char* f : kFiles) plain = plain && fs::exists(fs::path(o.data_dir) / f);
  if (plain) return o.data_dir;
  const fs::path cache = o.cache_dir.empty() ? fs::temp_directory_path() /
                                                   ("hvd-fashion-mnist-" + std::to_string(getuid()))
                                             : fs::path(o.cache_dir);
  fs::create_directories(cache);
  for (const char* f : kFiles) {
    const fs::path out = cache / f;
    const fs::path gz = fs::path(o.data_dir) / (std::string(f) + ".gz");
    if (fs::exists(out)) continue;
    if (!fs::exists(gz))
      throw std::runtime_error(
          "no " + std::string(f) + "[.gz] in " + o.data_dir +
          " (Debian: apt-get install dataset-fashion-mnist; or pass --data-dir)");
    gzFile in = gzopen(gz.c_str(), "rb");
    if (!in) throw std::runtime_error("cannot open " + gz.string());
    const fs::path tmp = cache / (std::string(f) + ".tmp." + std::to_string(getpid()));
    std::ofstream os(tmp, std::ios::binary);
    std::vector<char> buf(1 << 20);
    int n = 0;
    while ((n = gzread(in, buf.data(), static_cast<unsigned>(buf.size()))) > 0)
      os.write(buf.data(), n);
    const bool ok = n == 0 && static_cast<bool>(os);
    gzclose(in);
    os.close();
    if (!ok) {
      fs::remove(tmp);
      throw std::runtime_error("cannot decompress " + gz.string() + " into " + tmp.string());
    }
    fs::rename(tmp, out);
  }
  return cache.string();
}

// Images/s over the training steps after the first `warmup` ones (test evaluation left out), and
// the process's CPU time per step over the same steps (all threads: LibTorch's and hvd's).
class Timer {
 public:
  explicit Timer(int64_t warmup) : warmup_(warmup) {}
  void start_epoch() { last_ = now(); }
  void step(int64_t images) {
    const double t = now();
    if (steps_ == warmup_) cpu_start_ = cpu_now();
    if (steps_++ >= warmup_) {
      seconds_ += t - last_;
      images_ += images;
      cpu_seconds_ = cpu_now() - cpu_start_;
      step_seconds_.push_back(t - last_);
    }
    last_ = t;
  }
  int64_t steps() const { return steps_; }
  double seconds() const { return seconds_; }
  double images_per_second() const { return seconds_ > 0 ? images_ / seconds_ : 0; }
  double cpu_ms_per_step() const {
    return steps_ > warmup_ + 1 ? 1000 * cpu_seconds_ / (steps_ - warmup_ - 1) : 0;
  }
  // The q-quantile of the timed steps' durations in ms (0.1: the fast steps, which other jobs on a
  // shared machine disturb least; 0.5: the median).
  double step_ms(double q) const {
    if (step_seconds_.empty()) return 0;
    std::vector<double> v = step_seconds_;
    const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return 1000 * v[k];
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static double cpu_now() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  int64_t warmup_;
  int64_t steps_ = 0;
  int64_t images_ = 0;
  double seconds_ = 0;
  double cpu_start_ = 0;
  double cpu_seconds_ = 0;
  double last_ = now();
  std::vector<double> step_seconds_;
};

// --precision bf16|fp16: the forward pass under LibTorch's CPU autocast (what torch.autocast("cpu")
// does in Python), as a scope. LibTorch 2.4 renamed the calls; CPU autocast computes in fp16 from
// LibTorch 2.5 on (bfloat16 only before).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define MNIST_AUTOCAST_BY_DEVICE 1
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define MNIST_CPU_AUTOCAST_FP16 1
#endif
class Autocast {
 public:
  explicit Autocast(const std::string& precision) : on_(precision != "fp32") {
    if (!on_) return;
#ifndef MNIST_CPU_AUTOCAST_FP16
    if (precision == "fp16")
      throw std::invalid_argument("--precision fp16: LibTorch " TORCH_VERSION
                                  "'s CPU autocast computes in bfloat16 only (fp16 needs LibTorch "
                                  "2.5 or later); use --precision bf16");
#endif
    const c10::ScalarType dtype = precision == "bf16" ? torch::kBFloat16 : torch::kHalf;
#ifdef MNIST_AUTOCAST_BY_DEVICE
    was_on_ = at::autocast::is_autocast_enabled(at::kCPU);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
    was_on_ = at::autocast::is_cpu_enabled();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
#endif
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#ifdef MNIST_AUTOCAST_BY_DEVICE
    at::autocast::set_autocast_enabled(at::kCPU, was_on_);
#else
    at::autocast::set_cpu_enabled(was_on_);
#endif
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
  bool was_on_ = false;
};

// --test-overflow STEP:RANK, a test hook: that rank's loss at that step is multiplied by Inf, so
// that its backward pass overflows (and, through the average, every rank's gradients).
inline torch::Tensor test_overflow(const Options& o, int64_t step, int rank, torch::Tensor loss) {
  if (step != o.test_overflow_step || rank != o.test_overflow_rank) return loss;
  return loss * std::numeric_limits<float>::infinity();
}

// Prints, and writes the weights file, when enabled (a weights path holding "{rank}": every rank
// writes its own file, the placeholder replaced by its rank).
class Reporter {
 public:
  explicit Reporter(bool enabled, int rank = 0) : enabled_(enabled), rank_(rank) {}
  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }

  __attribute__((format(printf, 2, 3))) void print(const char* format, ...) const {
    if (!enabled_) return;
    va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
    std::fflush(stdout);
  }

  // comm_wait_share: the share of step time spent waiting for communication (< 0: none).
  void summary(const Timer& timer, double comm_wait_share = -1) const {
    print(
        "done: %lld steps; %.1f images/s over the %.1f s after the warm-up steps (step time: "
        "median %.2f ms, "
        "10th percentile %.2f ms; CPU %.2f ms per step)",
        static_cast<long long>(timer.steps()), timer.images_per_second(), timer.seconds(),
        timer.step_ms(0.5), timer.step_ms(0.1), timer.cpu_ms_per_step());
    if (comm_wait_share >= 0)
      print("; waiting for communication %.1f%% of step time", 100 * comm_wait_share);
    print("\n");
  }

  void write_weights(std::string path, const torch::nn::Module& model) const {
    const auto at = path.find("{rank}");
    if (at != std::string::npos) path.replace(at, 6, std::to_string(rank_));
    if ((!enabled_ && at == std::string::npos) || path.empty()) return;
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + path);
    for (const auto& p : model.parameters()) {
      const torch::Tensor t = p.detach().to(torch::kCPU, torch::kDouble).contiguous();
      const double* v = t.data_ptr<double>();
      for (int64_t i = 0; i < t.numel(); ++i) std::fprintf(f, "%.9g\n", v[i]);
    }
    if (std::fclose(f) != 0) throw std::runtime_error("cannot write " + path);
  }

 private:
  bool enabled_;
  int rank_;
};

// Plain LibTorch checkpoints: <dir>/checkpoint.pt (torch::save's format) holds the model, the
// optimizer and the step; saved through a temporary file and a rename.
class Checkpoints {
 public:
  explicit Checkpoints(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
  }

  void save(int64_t step, const torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
    model.save(model_archive);
    optimizer.save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("step", torch::tensor(step));
    const std::string path = dir_ + "/checkpoint.pt", tmp = path + ".tmp";
    archive.save_to(tmp);
    std::filesystem::rename(tmp, path);
  }
  std::optional<int64_t> restore_latest(torch::nn::Module& model,
                                        torch::optim::Optimizer& optimizer) {
    const std::string path = dir_ + "/checkpoint.pt";
    if (!std::filesystem::exists(path)) return std::nullopt;
    torch::serialize::InputArchive archive, model_archive, optimizer_archive;
    archive.load_from(path);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model.load(model_archive);
    optimizer.load(optimizer_archive);
    torch::Tensor step;
    archive.read("step", step);
    return step.item<int64_t>();
  }
  template <class M>
  void save(int64_t step, const torch::nn::ModuleHolder<M>& model,
            torch::optim::Optimizer& optimizer) {
    save(step, *model, optimizer);
  }
  template <class M>
  std::optional<int64_t> restore_latest(torch::nn::ModuleHolder<M>& model,
                                        torch::optim::Optimizer& optimizer) {
    return restore_latest(*model, optimizer);
  }

 private:
  std::string dir_;
};

}  // namespace mnist
