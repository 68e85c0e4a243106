// pipeline_cnn: train_cnn's network (examples/train_cnn/model) cut into S pipeline stages on S
// ranks, micro-batches in a GPipe schedule over hvd::send/recv, and data parallelism across the
// R = size / S pipelines through one process set per stage (docs/model_parallel.md).
//
//   mpirun -np 4 pipeline_cnn --stages 2 --micro-batches 4   # 2 pipelines x 2 stages
//   mpirun -np 1 pipeline_cnn --stages 1                       # the one-process reference
//
// Rank r is stage r % S of pipeline r / S (a pipeline's stages are neighbours, as on one node). The
// network's three blocks (conv1 block, conv2 block, the dense layers with the loss) are dealt to
// the stages in order: by default so that the slowest stage is as fast as it can be, from each
// block's time measured on rank 0 before training (--split cost), or evenly by count (--split
// even), or as given (--split 2,1: blocks per stage). Every rank builds the whole model from the
// same seed (so the initial weights are those of the one-process run) and trains the parameters of
// its own blocks: per step, the pipeline's share of the global batch is cut into M micro-batches;
// each goes forward through the stages (the activations sent to the next stage), then each comes
// back (the activation gradients sent to the previous stage), the gradients accumulating; then each
// stage all-reduces its gradients over its process set (the same stage of every pipeline),
// averaging over the global batch, and takes an SGD-with-momentum step. The optimizer, the
// initialisation and the layers are train_cnn's, so the final weights match the one-process run's
// to rounding (the sums over a batch are done in another order); --compare-weights checks that.
//
// Prints per step the loss (last stage of pipeline 0, through rank 0), and at the end images/s and
// the pipeline bubble: the share of a step that stage ranks spend waiting, against the GPipe bound
// (S - 1) / (M + S - 1).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/idx_reader.h"
#include "data/synthetic.h"
#include "hvd/hvd.h"
#include "model/cnn_graph.h"
#include "model/model.h"
#include "model/sgd_momentum.h"

namespace {

using train_cnn::model::CnnGraph;
using train_cnn::model::CpuLayers;
using Clock = std::chrono::steady_clock;

struct Flags {
  int stages = 2;
  int micro_batches = 4;
  int global_batch = 64;
  int steps = 20;
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t seed = 42;
  std::string data_dir;    // Fashion-MNIST IDX files; empty: synthetic images
  int64_t samples = 4096;  // synthetic images
  std::string save_weights, compare_weights;
  double tolerance = 1e-4;     // of --compare-weights: max |a - b| / (max |b| + 1e-6) per tensor
  std::string split = "cost";  // cost | even | blocks per stage ("2,1")
};

[[noreturn]] void usage_error(const std::string& what) {
  if (!hvd::initialized() || hvd::rank() == 0)
    std::fprintf(stderr,
                 "pipeline_cnn: %s\nflags: --stages S (1-3) --micro-batches M --global-batch G "
                 "--steps N --lr X --momentum X --seed N --data DIR --samples N "
                 "--save-weights FILE --compare-weights FILE --tolerance X "
                 "--split cost|even|N,N,...\n",
                 what.c_str());
  if (hvd::initialized()) hvd::shutdown();
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    auto number = [&](double lo, double hi) {
      const std::string v = value();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x >= lo && x <= hi))
        usage_error(a + " is '" + v + "': pass a number from " + std::to_string(lo) + " to " +
                    std::to_string(hi));
      return x;
    };
    if (a == "--stages")
      f.stages = static_cast<int>(number(1, CnnGraph<CpuLayers>::kBlocks));
    else if (a == "--micro-batches")
      f.micro_batches = static_cast<int>(number(1, 1024));
    else if (a == "--global-batch")
      f.global_batch = static_cast<int>(number(1, 1 << 20));
    else if (a == "--steps")
      f.steps = static_cast<int>(number(1, 1e9));
    else if (a == "--lr")
      f.lr = static_cast<float>(number(0, 100));
    else if (a == "--momentum")
      f.momentum = static_cast<float>(number(0, 1));
    else if (a == "--seed")
      f.seed = static_cast<uint64_t>(number(0, 1e15));
    else if (a == "--data")
      f.data_dir = value();
    else if (a == "--samples")
      f.samples = static_cast<int64_t>(number(1, 1e9));
    else if (a == "--save-weights")
      f.save_weights = value();
    else if (a == "--compare-weights")
      f.compare_weights = value();
    else if (a == "--tolerance")
      f.tolerance = number(0, 1);
    else if (a == "--split")
      f.split = value();
    else
      usage_error("unknown flag " + a);
  }
  return f;
}

// The blocks [first, last] of stage s of S, and the parameter tensors they own (model.h's order:
// conv1 0-1, conv2 2-3, fc1 and fc2 4-7).
struct Stage {
  int index = 0, count = 1, first = 0, last = 2;
  bool is_first() const { return index == 0; }
  bool is_last() const { return index == count - 1; }
  size_t first_param() const { return first == 0 ? 0 : first == 1 ? 2 : 4; }
  size_t end_param() const { return last == 0 ? 2 : last == 1 ? 4 : 8; }
};

constexpr int kBlocks = CnnGraph<CpuLayers>::kBlocks;
static_assert(kBlocks == 3, "Stage's parameter ranges and the printed costs assume three blocks");

// The stages of `counts` blocks each, in order.
std::vector<Stage> stages_of(const std::vector<int>& counts) {
  std::vector<Stage> out;
  int first = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out.push_back(
        {static_cast<int>(i), static_cast<int>(counts.size()), first, first + counts[i] - 1});
    first += counts[i];
  }
  return out;
}

// Every way to deal kBlocks blocks to `stages` stages in order, each stage at least one block.
void each_split(int stages, std::vector<int>& counts, int left,
                const std::function<void(const std::vector<int>&)>& visit) {
  if (static_cast<int>(counts.size()) == stages - 1) {
    counts.push_back(left);
    visit(counts);
    counts.pop_back();
    return;
  }
  for (int c = 1; left - c >= stages - static_cast<int>(counts.size()) - 1; ++c) {
    counts.push_back(c);
    each_split(stages, counts, left - c, visit);
    counts.pop_back();
  }
}

// The blocks per stage: --split N,N,... as given (checked), "even" by count, "cost" the split whose
// slowest stage is the fastest for the blocks' measured costs (ties: the earlier split).
std::vector<int> choose_split(const Flags& f, const std::vector<double>& cost) {
  std::vector<int> best;
  if (f.split == "even") {
    for (int i = 0; i < f.stages; ++i)
      best.push_back((i + 1) * kBlocks / f.stages - i * kBlocks / f.stages);
    return best;
  }
  if (f.split == "cost") {
    double best_max = 0;
    std::vector<int> counts;
    each_split(f.stages, counts, kBlocks, [&](const std::vector<int>& c) {
      double slowest = 0;
      for (const Stage& st : stages_of(c)) {
        double t = 0;
        for (int b = st.first; b <= st.last; ++b) t += cost[static_cast<size_t>(b)];
        slowest = std::max(slowest, t);
      }
      if (best.empty() || slowest < best_max) best = c, best_max = slowest;
    });
    return best;
  }
  std::vector<int> counts;
  int total = 0;
  bool numbers = true;
  for (size_t at = 0; numbers && at <= f.split.size();) {
    size_t comma = f.split.find(',', at);
    if (comma == std::string::npos) comma = f.split.size();
    const std::string item = f.split.substr(at, comma - at);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    numbers = !item.empty() && *end == '\0' && n >= 1 && n <= kBlocks;
    counts.push_back(static_cast<int>(n));
    total += static_cast<int>(n);
    at = comma + 1;
  }
  if (!numbers || total != kBlocks || static_cast<int>(counts.size()) != f.stages)
    usage_error("--split '" + f.split + "' is not " + std::to_string(f.stages) +
                " block counts adding up to the network's " + std::to_string(kBlocks) +
                " blocks: pass cost, even, or counts such as " +
                (f.stages == 1   ? "3"
                 : f.stages == 2 ? "2,1"
                                 : "1,1,1"));
  return counts;
}

// Each block's time for one micro-batch, forward and backward (the loss in the last block), the
// best of 3 runs on graph `g` (its gradients are left dirty: zero them before training).
std::vector<double> measure_blocks(CnnGraph<CpuLayers>& g, const train_cnn::data::Dataset& data,
                                   int micro) {
  std::vector<int64_t> indices(static_cast<size_t>(micro));
  std::vector<int32_t> labels(static_cast<size_t>(micro));
  for (int i = 0; i < micro; ++i) indices[static_cast<size_t>(i)] = i % data.count;
  train_cnn::data::gather_batch(data, indices, g.input(micro), labels);
  std::vector<double> best(kBlocks, 1e30);
  for (int run = 0; run < 3; ++run) {
    std::vector<double> t(kBlocks, 0);
    auto timed = [&](int b, auto&& work) {
      const auto t0 = Clock::now();
      work();
      t[static_cast<size_t>(b)] += std::chrono::duration<double>(Clock::now() - t0).count();
    };
    for (int b = 0; b < kBlocks; ++b)
      timed(b, [&] {
        // The images every time: the graph keeps the last call's for block 0's backward.
        g.forward_blocks(b, b, g.input(micro), micro);
        if (b == kBlocks - 1) g.loss().forward(g.logits(), std::span<int32_t>(labels), micro);
      });
    for (int b = kBlocks - 1; b >= 0; --b) timed(b, [&] { g.backward_blocks(b, b, {}); });
    for (int b = 0; b < kBlocks; ++b)
      best[static_cast<size_t>(b)] =
          std::min(best[static_cast<size_t>(b)], t[static_cast<size_t>(b)]);
  }
  return best;
}

hvd::TensorRef ref(std::span<float> v) { return hvd::as_tensor(v); }

// Writes the 8 parameter tensors, back to back, as float32.
void write_weights(const std::string& path, const std::vector<float>& flat) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(flat.data()),
            static_cast<std::streamsize>(flat.size() * sizeof(float)));
  if (!out) usage_error("cannot write " + path);
}

// Per tensor: max |a - b| / (max |b| + 1e-6). Returns whether every one is within tolerance.
bool compare_weights(const std::string& path, const std::vector<float>& mine,
                     const std::vector<train_cnn::model::ParameterTensor>& tensors, double tol) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> ref_flat(mine.size());
  in.read(reinterpret_cast<char*>(ref_flat.data()),
          static_cast<std::streamsize>(ref_flat.size() * sizeof(float)));
  if (!in || in.peek() != EOF) usage_error(path + " is not a weights file of this network");
  bool ok = true;
  for (const auto& t : tensors) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < t.value.size(); ++i) {
      const size_t k = static_cast<size_t>(t.offset) + i;
      diff = std::max(diff, static_cast<double>(std::fabs(mine[k] - ref_flat[k])));
      scale = std::max(scale, static_cast<double>(std::fabs(ref_flat[k])));
    }
    const double rel = diff / (scale + 1e-6);
    std::printf("weights %-12s max |diff| %.3g, relative %.3g%s\n", t.name.c_str(), diff, rel,
                rel <= tol ? "" : "  (over the tolerance)");
    ok = ok && rel <= tol;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  hvd::init();
  const Flags f = parse(argc, argv);
  const int size = hvd::size(), rank = hvd::rank();
  if (size % f.stages != 0)
    usage_error(std::to_string(size) + " ranks do not make whole pipelines of " +
                std::to_string(f.stages) + " stages: run a multiple of --stages ranks");
  // The deal, unless it is measured below: a bad --split fails here, before any work.
  std::vector<int> deal = f.split == "cost" ? std::vector<int>{} : choose_split(f, {});
  const int pipelines = size / f.stages;
  const int pipeline = rank / f.stages;
  const int per_pipeline = f.global_batch / pipelines;
  const int micro = per_pipeline / f.micro_batches;
  if (per_pipeline * pipelines != f.global_batch || micro * f.micro_batches != per_pipeline)
    usage_error("--global-batch " + std::to_string(f.global_batch) + " must split evenly into " +
                std::to_string(pipelines) + " pipelines x " + std::to_string(f.micro_batches) +
                " micro-batches");

  // The same stage of every pipeline: the data-parallel group of this rank's parameters.
  std::vector<hvd::ProcessSet> stage_sets;
  for (int s = 0; s < f.stages; ++s) {
    std::vector<int> ranks;
    for (int p = 0; p < pipelines; ++p) ranks.push_back(p * f.stages + s);
    stage_sets.push_back(static_cast<int>(ranks.size()) == size ? hvd::global_process_set()
                                                                : hvd::add_process_set(ranks));
  }
  const hvd::ProcessSet& my_stage_set = stage_sets[static_cast<size_t>(rank % f.stages)];

  // Data: every rank has the set (the first stage reads images, the last labels).
  train_cnn::data::Dataset data =
      f.data_dir.empty()
          ? train_cnn::data::make_synthetic(f.samples, f.seed)
          : train_cnn::data::load_fashion_mnist(f.data_dir, train_cnn::data::Split::kTrain);

  // The model's parameters and gradients (the whole network, the same seed everywhere), and one
  // graph per micro-batch bound to them: each keeps its micro-batch's activations until its
  // backward, and every backward adds into the same gradients.
  train_cnn::model::Model model;
  model.initialize(f.seed);
  std::vector<std::unique_ptr<CnnGraph<CpuLayers>>> graphs;
  for (int m = 0; m < f.micro_batches; ++m) {
    graphs.push_back(std::make_unique<CnnGraph<CpuLayers>>(CpuLayers{}, model.options()));
    graphs.back()->bind(model.parameters());
    graphs.back()->reserve(micro);
  }
  // The split: rank 0 times the blocks and tells every rank, so that all deal them alike.
  std::vector<double> cost(kBlocks, 0);
  const bool measure = f.split == "cost" && f.stages > 1 && f.stages < kBlocks;
  if (measure) {
    if (rank == 0) cost = measure_blocks(*graphs[0], data, micro);
    hvd::broadcast(hvd::TensorRef(cost.data(), hvd::DataType::kFloat64, {kBlocks}), 0,
                   "pipeline.block_costs");
    model.zero_gradients();
  }
  if (deal.empty()) deal = choose_split(f, cost);
  const std::vector<Stage> stages = stages_of(deal);
  const Stage st = stages[static_cast<size_t>(rank % f.stages)];
  if (rank == 0) {
    std::printf("split (%s):", f.split.c_str());
    for (const Stage& s : stages) std::printf(" stage %d = blocks %d-%d", s.index, s.first, s.last);
    if (measure)
      std::printf("; block ms per micro-batch (forward + backward): %.3f %.3f %.3f", cost[0] * 1e3,
                  cost[1] * 1e3, cost[2] * 1e3);
    std::printf("\n");
  }
  const auto& params = model.parameters();
  const size_t own_begin = static_cast<size_t>(params[st.first_param()].offset);
  const size_t own_end = st.end_param() == params.size()
                             ? static_cast<size_t>(model.num_parameters())
                             : static_cast<size_t>(params[st.end_param()].offset);
  // The optimizer of this stage's parameters (train_cnn's SGD with momentum).
  train_cnn::model::SgdMomentum sgd(static_cast<int64_t>(own_end - own_begin),
                                    {.momentum = f.momentum});
  const int prev = rank - 1, next = rank + 1;  // this pipeline's neighbouring stages

  std::vector<int32_t> labels(static_cast<size_t>(f.micro_batches * micro));
  std::vector<int64_t> indices(static_cast<size_t>(micro));
  double busy_seconds = 0, step_seconds = 0;
  const auto t_start = Clock::now();
  for (int step = 0; step < f.steps; ++step) {
    const auto t_step = Clock::now();
    double busy = 0;
    auto timed = [&](auto&& work) {
      const auto t0 = Clock::now();
      work();
      busy += std::chrono::duration<double>(Clock::now() - t0).count();
    };
    model.zero_gradients();
    // The pipeline's share of the step's global batch, in order: samples
    // [step * G + pipeline * G / R, ...) of the set, wrapping around.
    auto sample = [&](int m, int i) {
      return (static_cast<int64_t>(step) * f.global_batch + pipeline * per_pipeline + m * micro +
              i) %
             data.count;
    };
    std::vector<hvd::Handle> sends;
    double loss = 0;
    // GPipe: every micro-batch forward, then every micro-batch backward.
    for (int m = 0; m < f.micro_batches; ++m) {
      CnnGraph<CpuLayers>& g = *graphs[static_cast<size_t>(m)];
      for (int i = 0; i < micro; ++i) indices[static_cast<size_t>(i)] = sample(m, i);
      std::span<int32_t> mlabels(labels.data() + static_cast<size_t>(m * micro),
                                 static_cast<size_t>(micro));
      if (st.is_first()) {
        train_cnn::data::gather_batch(data, indices, g.input(micro), mlabels);
      } else {
        for (int i = 0; i < micro; ++i)
          mlabels[static_cast<size_t>(i)] =
              data.labels[static_cast<size_t>(indices[static_cast<size_t>(i)])];
        hvd::recv(ref(g.boundary(st.first, micro)), prev, /*tag=*/m);
      }
      timed([&] {
        g.forward_blocks(st.first, st.last, st.is_first() ? g.input(micro) : std::span<float>{},
                         micro);
        if (st.is_last()) loss += g.loss().forward(g.logits(), mlabels, micro).loss;
      });
      if (!st.is_last())
        sends.push_back(hvd::send_async(ref(g.boundary(st.last + 1, micro)), next, m));
    }
    for (int m = f.micro_batches - 1; m >= 0; --m) {
      CnnGraph<CpuLayers>& g = *graphs[static_cast<size_t>(m)];
      if (!st.is_last())
        hvd::recv(ref(g.boundary_grad(st.last + 1, micro)), next, /*tag=*/1000 + m);
      timed([&] { g.backward_blocks(st.first, st.last, {}); });
      if (!st.is_first())
        sends.push_back(hvd::send_async(ref(g.boundary_grad(st.first, micro)), prev, 1000 + m));
    }
    for (auto& h : sends) h.wait();
    // This stage's gradients, summed over the micro-batches, averaged over the global batch: a
    // mean over each micro-batch, so 1 / M here and the average over the pipelines.
    std::span<float> own(model.flat_gradients().data() + own_begin, own_end - own_begin);
    my_stage_set.allreduce(ref(own), "pipeline.grads", hvd::ReduceOp::kAverage,
                           1.0 / f.micro_batches);
    timed([&] {
      sgd.step(model.flat_parameters().subspan(own_begin, own_end - own_begin),
               model.flat_gradients().subspan(own_begin, own_end - own_begin), f.lr);
    });
    // The loss, from the last stage of pipeline 0 to rank 0.
    if (st.is_last()) {
      std::vector<double> l{loss / f.micro_batches};
      stage_sets.back().allreduce(hvd::TensorRef(l.data(), hvd::DataType::kFloat64, {1}),
                                  "pipeline.loss");
      loss = l[0];
      if (rank == f.stages - 1 && rank != 0)
        hvd::send(hvd::TensorRef(l.data(), hvd::DataType::kFloat64, {1}), 0, 7);
    }
    if (rank == 0 && !st.is_last()) {
      std::vector<double> l(1);
      hvd::recv(hvd::TensorRef(l.data(), hvd::DataType::kFloat64, {1}), f.stages - 1, 7);
      loss = l[0];
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t_step).count();
    if (step > 0) {  // the first step warms up (allocations, negotiation caches)
      busy_seconds += busy;
      step_seconds += seconds;
    }
    if (rank == 0) std::printf("step %d loss %.6f (%.1f ms)\n", step + 1, loss, seconds * 1e3);
  }
  const double total = std::chrono::duration<double>(Clock::now() - t_start).count();

  // The bubble: each rank's idle share of a step, averaged over the ranks.
  std::vector<double> idle{step_seconds > 0 ? 1.0 - busy_seconds / step_seconds : 0.0};
  hvd::allreduce(hvd::TensorRef(idle.data(), hvd::DataType::kFloat64, {1}), "pipeline.idle");
  // The final weights, on rank 0: each stage of pipeline 0 sends the tensors it trained.
  std::vector<float> weights(model.flat_parameters().begin(), model.flat_parameters().end());
  if (pipeline == 0 && rank != 0)
    hvd::send(ref(std::span<float>(weights).subspan(own_begin, own_end - own_begin)), 0, 9);
  bool ok = true;
  if (rank == 0) {
    for (int s = 1; s < f.stages; ++s) {
      const Stage& o = stages[static_cast<size_t>(s)];
      const size_t b = static_cast<size_t>(params[o.first_param()].offset);
      const size_t e = o.end_param() == params.size()
                           ? static_cast<size_t>(model.num_parameters())
                           : static_cast<size_t>(params[o.end_param()].offset);
      hvd::recv(ref(std::span<float>(weights).subspan(b, e - b)), s, 9);
    }
    const double bound = static_cast<double>(f.stages - 1) / (f.micro_batches + f.stages - 1);
    std::printf(
        "pipeline_cnn: %d pipeline(s) x %d stage(s), %d micro-batches of %d: %.1f images/s; "
        "bubble %.3f measured (idle share of a step, mean over ranks), GPipe bound "
        "(S-1)/(M+S-1) = %.3f\n",
        pipelines, f.stages, f.micro_batches, micro, f.global_batch * f.steps / total, idle[0],
        bound);
    if (!f.save_weights.empty()) write_weights(f.save_weights, weights);
    if (!f.compare_weights.empty())
      ok = compare_weights(f.compare_weights, weights, params, f.tolerance);
  }
  std::vector<int32_t> verdict{ok ? 1 : 0};
  hvd::allreduce(hvd::TensorRef(verdict.data(), hvd::DataType::kInt32, {1}), "pipeline.ok",
                 hvd::ReduceOp::kMin);
  for (size_t s = 0; s < stage_sets.size(); ++s)
    if (stage_sets[s].id() != 0) hvd::remove_process_set(stage_sets[s]);
  hvd::shutdown();
  return verdict[0] == 1 ? 0 : 1;
}
