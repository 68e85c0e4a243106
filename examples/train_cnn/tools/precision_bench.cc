// train_cnn_precision_bench: what the emulated mixed precision (train_cnn --precision bf16|fp16,
// model/precision.h) costs on the CPU model, measured in one process.
//
//   train_cnn_precision_bench [--batch 64] [--rounds 7] [--steps 5] [--seed 1]
//
// It builds one model per precision (fp32, the baseline, then bf16 and fp16) from the same seed
// and trains them on the same random batches, interleaved: in each round every model runs --steps
// training steps, the order of the models rotating from round to round. A step is what train_cnn
// does on one rank: zero_gradients, forward, backward (bf16/fp16: from the loss gradient times a
// loss scale of 1024), for bf16/fp16 the unscale and Inf/NaN check of every gradient (what
// hvd::LossScaler::unscale does), and the SGD step. It prints per precision the median over rounds
// of the wall and CPU time per step (process CPU time: steadier on a shared machine) and of the
// per-round ratio to fp32's, with the load average. As a check, every model must end with finite
// weights that differ from fp32's by less than 0.05 (exit status 1 otherwise, 2 for a bad
// argument).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "model/init.h"
#include "model/model.h"
#include "model/precision.h"
#include "model/sgd_momentum.h"

namespace {

namespace cm = train_cnn::model;
using train_cnn::tools::cpu_seconds;
using train_cnn::tools::load_average;
using train_cnn::tools::median;

struct Flags {
  int batch = 64;
  int rounds = 7;
  int steps = 5;
  uint64_t seed = 1;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "train_cnn_precision_bench: %s\nusage: train_cnn_precision_bench [--batch 64] "
               "[--rounds 7] [--steps 5] [--seed 1]\n",
               msg.c_str());
  std::exit(2);
}

int positive(const std::string& flag, const std::string& v) {
  const long x = train_cnn::tools::positive_or_minus_one(v);
  if (x < 0) usage(flag + " is '" + v + "': it must be a whole number from 1 to 100000.");
  return static_cast<int>(x);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("the cost of emulated mixed precision");
    if (i + 1 >= argc) usage("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--batch")
      f.batch = positive(a, v);
    else if (a == "--rounds")
      f.rounds = positive(a, v);
    else if (a == "--steps")
      f.steps = positive(a, v);
    else if (a == "--seed")
      f.seed = static_cast<uint64_t>(positive(a, v));
    else
      usage("unknown flag " + a);
  }
  return f;
}

constexpr float kLossScale = 1024.0f;

struct Run {
  cm::Precision precision;
  std::unique_ptr<cm::Model> model;
  std::unique_ptr<cm::SgdMomentum> opt;
  int64_t steps_done = 0;
  int64_t skipped = 0;
  std::vector<double> wall_ms, cpu_ms;  // per step, one entry per round
};

void train(Run& r, int steps, int batch, const std::vector<float>& images,
           const std::vector<int32_t>& labels, int pool) {
  const int64_t image = r.model->input_size();
  for (int s = 0; s < steps; ++s, ++r.steps_done) {
    const int64_t k = r.steps_done % pool;
    r.model->zero_gradients();
    r.model->forward(std::span<const float>(images).subspan(k * batch * image, batch * image),
                     std::span<const int32_t>(labels).subspan(k * batch, batch), batch);
    r.model->backward();
    if (r.precision != cm::Precision::kFp32) {
      bool overflow = false;
      for (float& g : r.model->flat_gradients()) {
        g *= 1.0f / kLossScale;
        overflow |= !std::isfinite(g);
      }
      if (overflow) {
        ++r.skipped;
        continue;
      }
    }
    r.opt->step(r.model->flat_parameters(), r.model->flat_gradients(), 0.01f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  constexpr int kPool = 4;
  std::vector<Run> runs;
  for (cm::Precision p : {cm::Precision::kFp32, cm::Precision::kBf16, cm::Precision::kFp16}) {
    Run r;
    r.precision = p;
    cm::ModelOptions o;
    o.precision = p;
    r.model = std::make_unique<cm::Model>(o);
    r.model->initialize(f.seed);
    r.model->set_loss_scale(p == cm::Precision::kFp32 ? 1.0f : kLossScale);
    r.opt = std::make_unique<cm::SgdMomentum>(r.model->num_parameters(),
                                              cm::SgdMomentumOptions{.momentum = 0.9f});
    runs.push_back(std::move(r));
  }
  const int64_t image = runs[0].model->input_size();
  std::vector<float> images(static_cast<size_t>(kPool * f.batch * image));
  std::vector<int32_t> labels(static_cast<size_t>(kPool * f.batch));
  cm::InitRng rng(f.seed + 1);
  for (float& x : images) x = static_cast<float>(rng.uniform01());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7 + 3) % 10);

  const std::string load_before = load_average();
  for (Run& r : runs) train(r, 1, f.batch, images, labels, kPool);  // warm-up
  for (int round = 0; round < f.rounds; ++round) {
    for (size_t j = 0; j < runs.size(); ++j) {
      Run& r = runs[(j + static_cast<size_t>(round)) % runs.size()];
      const double c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      train(r, f.steps, f.batch, images, labels, kPool);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.wall_ms.push_back(1000.0 * wall / f.steps);
      r.cpu_ms.push_back(1000.0 * (cpu_seconds() - c0) / f.steps);
    }
  }
  std::printf(
      "train_cnn_precision_bench: batch %d, %d rounds of %d steps per precision, "
      "interleaved; load average %s before, %s after\n",
      f.batch, f.rounds, f.steps, load_before.c_str(), load_average().c_str());
  std::printf("%-10s %14s %14s %16s %16s %8s\n", "precision", "wall ms/step", "cpu ms/step",
              "wall / fp32", "cpu / fp32", "skipped");
  bool ok = true;
  const std::span<const float> base = runs[0].model->flat_parameters();
  for (const Run& r : runs) {
    std::vector<double> wall_ratio, cpu_ratio;
    for (int i = 0; i < f.rounds; ++i) {
      wall_ratio.push_back(r.wall_ms[i] / runs[0].wall_ms[i]);
      cpu_ratio.push_back(r.cpu_ms[i] / runs[0].cpu_ms[i]);
    }
    std::printf("%-10s %14.2f %14.2f %16.3f %16.3f %8lld\n", cm::precision_name(r.precision),
                median(r.wall_ms), median(r.cpu_ms), median(wall_ratio), median(cpu_ratio),
                static_cast<long long>(r.skipped));
    double worst = 0;
    for (size_t i = 0; i < base.size(); ++i) {
      const float w = r.model->flat_parameters()[i];
      if (!std::isfinite(w)) worst = INFINITY;
      worst = std::max(worst, static_cast<double>(std::fabs(w - base[i])));
    }
    if (!(worst < 0.05)) {
      std::printf("FAIL: %s's weights differ from fp32's by %g\n", cm::precision_name(r.precision),
                  worst);
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
