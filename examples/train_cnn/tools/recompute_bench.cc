// train_cnn_recompute_bench: what activation recomputation (train_cnn --recompute,
// model/recompute.h) costs and saves on the CPU model, measured in one process.
//
//   train_cnn_recompute_bench [--batches 64,256] [--recompute all,conv1] [--rounds 5]
//                             [--steps 5] [--seed 1]
//
// For each batch size it builds one model per choice (none, the baseline, then each --recompute
// value) from the same seed and trains them on the same random batches, interleaved: in each
// round every model runs --steps training steps (zero_gradients, forward, backward, SGD), the
// order of the models rotating from round to round. It prints per choice the peak activation
// bytes the model's own accounting counted in a step (Model::activation_memory) and the bytes its
// activation buffers allocate, both also as a ratio to the baseline, and the median over rounds
// of the wall and CPU time per step (process CPU time: steadier on a shared machine) and of the
// per-round ratio to the baseline's time. As a check it compares the weights the models end with:
// recomputation must leave them bitwise equal (exit status 1 otherwise, 2 for a bad argument).
// The load average is printed with each table.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "model/init.h"
#include "model/model.h"
#include "model/recompute.h"
#include "model/sgd_momentum.h"

namespace {

namespace cm = train_cnn::model;
using train_cnn::tools::cpu_seconds;
using train_cnn::tools::load_average;
using train_cnn::tools::median;

struct Flags {
  std::vector<int> batches = {64, 256};
  std::vector<cm::RecomputeBlocks> choices = {cm::RecomputeBlocks::all(), {.conv1 = true}};
  int rounds = 5;
  int steps = 5;
  uint64_t seed = 1;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "train_cnn_recompute_bench: %s\nusage: train_cnn_recompute_bench [--batches 64,256] "
               "[--recompute all,conv1 (choices separated by '/': --recompute all/conv1,conv2)] "
               "[--rounds 5] [--steps 5] [--seed 1]\n",
               msg.c_str());
  std::exit(2);
}

long positive(const std::string& flag, const std::string& v) {
  const long x = train_cnn::tools::positive_or_minus_one(v);
  if (x < 0) usage(flag + " is '" + v + "': it must be a whole number from 1 to 100000.");
  return x;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("activation recomputation: memory and time");
    if (i + 1 >= argc) usage("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--batches") {
      f.batches.clear();
      for (const std::string& b : split(v, ',')) f.batches.push_back(positive(a, b));
    } else if (a == "--recompute") {
      // Choices are separated by '/', since one choice may name several blocks with commas.
      f.choices.clear();
      for (const std::string& c : split(v, '/')) {
        try {
          f.choices.push_back(cm::parse_recompute_blocks(c, "--recompute"));
        } catch (const std::exception& e) {
          usage(e.what());
        }
        if (!f.choices.back().any()) usage("--recompute: 'none' is the baseline, always run.");
      }
    } else if (a == "--rounds") {
      f.rounds = static_cast<int>(positive(a, v));
    } else if (a == "--steps") {
      f.steps = static_cast<int>(positive(a, v));
    } else if (a == "--seed") {
      f.seed = static_cast<uint64_t>(positive(a, v));
    } else {
      usage("unknown flag " + a);
    }
  }
  return f;
}

// One model under test with its optimizer and timings.
struct Run {
  cm::RecomputeBlocks recompute;
  std::unique_ptr<cm::Model> model;
  std::unique_ptr<cm::SgdMomentum> opt;
  int64_t steps_done = 0;
  std::vector<double> wall_ms, cpu_ms;  // per step, one entry per round
};

// Trains run for steps steps on the batches numbered from its own step count.
void train(Run& r, int steps, int batch, const std::vector<float>& images,
           const std::vector<int32_t>& labels, int batches_in_pool) {
  const int64_t image = r.model->input_size();
  for (int s = 0; s < steps; ++s, ++r.steps_done) {
    const int64_t k = r.steps_done % batches_in_pool;
    r.model->zero_gradients();
    r.model->forward(std::span<const float>(images).subspan(k * batch * image, batch * image),
                     std::span<const int32_t>(labels).subspan(k * batch, batch), batch);
    r.model->backward();
    r.opt->step(r.model->flat_parameters(), r.model->flat_gradients(), 0.01f);
  }
}

bool bench(const Flags& f, int batch) {
  constexpr int kPool = 4;  // distinct batches, reused in turn
  std::vector<Run> runs;
  runs.emplace_back();  // the baseline: none
  for (const cm::RecomputeBlocks& c : f.choices) {
    runs.emplace_back();
    runs.back().recompute = c;
  }
  for (Run& r : runs) {
    cm::ModelOptions o;
    o.recompute = r.recompute;
    r.model = std::make_unique<cm::Model>(o);
    r.model->initialize(f.seed);
    r.opt = std::make_unique<cm::SgdMomentum>(r.model->num_parameters(),
                                              cm::SgdMomentumOptions{.momentum = 0.9f});
  }
  const int64_t image = runs[0].model->input_size();
  std::vector<float> images(static_cast<size_t>(kPool) * batch * image);
  std::vector<int32_t> labels(static_cast<size_t>(kPool) * batch);
  cm::InitRng rng(f.seed + 1);
  for (float& x : images) x = static_cast<float>(rng.uniform01());
  for (int32_t& y : labels) y = static_cast<int32_t>(rng.uniform01() * 10) % 10;

  for (Run& r : runs) train(r, 1, batch, images, labels, kPool);  // warm-up: buffers allocated
  for (int round = 0; round < f.rounds; ++round) {
    for (size_t j = 0; j < runs.size(); ++j) {
      Run& r = runs[(j + round) % runs.size()];
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      train(r, f.steps, batch, images, labels, kPool);
      const double cpu = 1000.0 * (cpu_seconds() - c0);
      const double wall =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r.wall_ms.push_back(wall / f.steps);
      r.cpu_ms.push_back(cpu / f.steps);
    }
  }

  std::printf(
      "batch %d: %d rounds x %d steps per choice, interleaved; load average %s\n"
      "%-16s %14s %8s %14s %8s %9s %9s %9s %9s\n",
      batch, f.rounds, f.steps, load_average().c_str(), "recompute", "peak_bytes", "x_none",
      "reserved_bytes", "x_none", "wall_ms", "x_none", "cpu_ms", "x_none");
  const cm::ActivationMemory base = runs[0].model->activation_memory();
  bool same = true;
  for (const Run& r : runs) {
    const cm::ActivationMemory m = r.model->activation_memory();
    std::vector<double> wall_ratio, cpu_ratio;
    for (int i = 0; i < f.rounds; ++i) {
      wall_ratio.push_back(r.wall_ms[i] / runs[0].wall_ms[i]);
      cpu_ratio.push_back(r.cpu_ms[i] / runs[0].cpu_ms[i]);
    }
    std::printf("%-16s %14lld %8.3f %14lld %8.3f %9.2f %9.3f %9.2f %9.3f\n",
                cm::describe(r.recompute).c_str(), static_cast<long long>(m.peak_bytes),
                static_cast<double>(m.peak_bytes) / base.peak_bytes,
                static_cast<long long>(m.reserved_bytes),
                static_cast<double>(m.reserved_bytes) / base.reserved_bytes, median(r.wall_ms),
                median(wall_ratio), median(r.cpu_ms), median(cpu_ratio));
    const auto a = runs[0].model->flat_parameters(), b = r.model->flat_parameters();
    same = same && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
  }
  std::printf("weights after %lld steps each: %s\n\n", static_cast<long long>(runs[0].steps_done),
              same ? "bitwise equal across the choices" : "DIFFERENT (recomputation changed them)");
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  bool ok = true;
  try {
    for (int batch : f.batches) ok = bench(f, batch) && ok;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_cnn_recompute_bench: error: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
