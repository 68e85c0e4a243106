// The cost of stopping together (hvd/stop.h), measured in one process:
//  1. per step: a step is `--tensors` all-reduces of `--bytes` each (async, then waited, as a
//     backward pass submits its gradients), run in interleaved rounds without and with
//     StopOnSignal::should_stop() after every step; prints the median time per step of each and
//     their ratio. (The request's bit travels in the flag word every cycle ANDs anyway, and a
//     cycle reads the request with one relaxed load: neither can be turned off, so the rounds
//     measure what a trainer adds, the check, on top of the runtime as it is.)
//  2. signal to agreed stop: in each of `--trials` fresh runtimes, the last rank raises SIGUSR1
//     after step 50; every rank notes when should_stop() first returns true. Prints the steps and
//     the milliseconds from the raise to the last rank's stop (one clock: the ranks share a
//     machine), and checks that every rank stopped after the same step ("stopped together: yes";
//     a "no" fails the run).
//
//   mpirun --oversubscribe --bind-to none -np 2 build/tests/bench/stop_bench --rounds 10
#include <mpi.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int steps = 2000;
  int rounds = 10;
  int tensors = 20;
  int bytes = 4096;
  int trials = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (v < 1) {
      std::fprintf(stderr, "stop_bench: %s needs a positive number\n", a.c_str());
      std::exit(2);
    }
    if (a == "--steps")
      o.steps = v;
    else if (a == "--rounds")
      o.rounds = v;
    else if (a == "--tensors")
      o.tensors = v;
    else if (a == "--bytes")
      o.bytes = v;
    else if (a == "--trials")
      o.trials = v;
    else {
      std::fprintf(stderr,
                   "stop_bench: unknown '%s' (--steps --rounds --tensors --bytes --trials)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct Step {
  std::vector<std::vector<float>> grads;
  std::vector<std::string> names;
  std::vector<hvd::Handle> handles;
  Step(int tensors, int bytes) {
    for (int t = 0; t < tensors; ++t) {
      grads.emplace_back(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
      names.push_back("stop_bench.g" + std::to_string(t));
    }
    handles.resize(static_cast<size_t>(tensors));
  }
  void run() {
    for (size_t t = 0; t < grads.size(); ++t)
      handles[t] = hvd::allreduce_async(std::span<float>(grads[t]), names[t]);
    for (auto& h : handles) h.wait();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds per step of `steps` steps, the slowest rank's.
double timed(Step& step, int steps, hvd::StopOnSignal* stop) {
  hvd::barrier();
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    step.run();
    if (stop && stop->should_stop()) std::abort();  // nobody asked: must never happen
  }
  std::vector<double> t{std::chrono::duration<double>(Clock::now() - t0).count() / steps};
  hvd::allreduce(t, "stop_bench.time", hvd::ReduceOp::kMax);
  return t[0];
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const Options o = parse(argc, argv);
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  {
    Step step(o.tensors, o.bytes);
    hvd::StopOnSignal stop;
    timed(step, o.steps / 10 + 1, nullptr);  // warm-up: caches, lanes
    std::vector<double> without, with;
    for (int r = 0; r < o.rounds; ++r) {  // alternating which goes first
      if (r % 2 == 0) {
        without.push_back(timed(step, o.steps, nullptr));
        with.push_back(timed(step, o.steps, &stop));
      } else {
        with.push_back(timed(step, o.steps, &stop));
        without.push_back(timed(step, o.steps, nullptr));
      }
    }
    if (rank == 0)
      std::printf(
          "per step (%d ranks, %d x %d B all-reduces, %d steps x %d rounds, median): without the "
          "check %.2f us, with should_stop() %.2f us: ratio %.4f\n",
          size, o.tensors, o.bytes, o.steps, o.rounds, 1e6 * median(without), 1e6 * median(with),
          median(with) / median(without));
  }
  bool together = true;
  std::vector<double> stop_ms, stop_steps;
  for (int trial = 0; trial < o.trials; ++trial) {
    if (trial > 0) hvd::init();  // a fresh runtime: no request left from the last trial
    Step step(o.tensors, o.bytes);
    int64_t stopped_after = -1;
    double raised_at = 0;
    {
      hvd::StopOnSignal stop;
      constexpr int64_t kRaiseAfter = 50;
      for (int64_t s = 1; s <= 100000; ++s) {
        step.run();
        if (rank == size - 1 && s == kRaiseAfter) {
          raised_at = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
          ::raise(SIGUSR1);
        }
        if (stop.should_stop()) {
          stopped_after = s;
          break;
        }
      }
    }
    const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    std::vector<double> v{static_cast<double>(stopped_after), -static_cast<double>(stopped_after),
                          now, raised_at};
    hvd::allreduce(v, "stop_bench.trial", hvd::ReduceOp::kMax);
    together = together && v[0] == -v[1] && stopped_after > 0;
    stop_steps.push_back(v[0] - 50);
    stop_ms.push_back(1e3 * (v[2] - v[3]));
    hvd::shutdown();
  }
  if (rank == 0)
    std::printf(
        "signal to agreed stop (%d trials, SIGUSR1 on rank %d after step 50): median %.0f steps "
        "later, %.2f ms to the last rank's stop (max %.2f ms); stopped together: %s\n",
        o.trials, size - 1, median(stop_steps), median(stop_ms),
        *std::max_element(stop_ms.begin(), stop_ms.end()), together ? "yes" : "no");
  MPI_Finalize();
  return together ? 0 : 1;
}
