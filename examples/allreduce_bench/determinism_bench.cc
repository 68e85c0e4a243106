// determinism_bench: the cost of deterministic reductions (HVD_DETERMINISTIC,
// hvd::set_deterministic) against the default, in one process, interleaved: each pair of
// iterations runs the same K all-reduces once with the mode off and once on (a barrier before
// each side, the order of the two sides alternating from pair to pair), under two sets of names,
// so that each mode keeps its own cached responses. Prints the medians of both sides and the
// median (quartiles) of the pairs' ratios, deterministic / default: above 1 the mode costs that
// factor.
//
//   mpirun -np 3 determinism_bench --tensors 1000 --bytes 4096 --pairs 200
//   mpirun -np 3 determinism_bench --tensors 1 --bytes 64M --pairs 20
// Set HVD_CACHE_CAPACITY to at least 2 x --tensors (two names per tensor).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <hvd/hvd.h>

#include "options.h"

namespace {

// One iteration of K float32 sums over `bufs` under the names prefix.i; returns the time over
// ranks (the slowest rank's), in microseconds.
double iteration(std::vector<std::vector<float>>& bufs, const std::string& prefix) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<hvd::Handle> handles;
  handles.reserve(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    hvd::TensorRef t(bufs[i].data(), hvd::DataType::kFloat32,
                     {static_cast<int64_t>(bufs[i].size())});
    handles.push_back(hvd::allreduce_async(t, t, prefix + std::to_string(i), hvd::ReduceOp::kSum));
  }
  for (auto& h : handles) h.wait();
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int tensors = 1000, pairs = 100, warmup = 5;
  int64_t bytes = 4096;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const bool has_value = i + 1 < argc;
      if (a == "--tensors" && has_value) {
        tensors = std::stoi(argv[++i]);
      } else if (a == "--bytes" && has_value) {
        bytes = allreduce_bench::parse_size("--bytes", argv[++i]);
      } else if (a == "--pairs" && has_value) {
        pairs = std::stoi(argv[++i]);
      } else if (a == "--warmup" && has_value) {
        warmup = std::stoi(argv[++i]);
      } else {
        std::fprintf(stderr,
                     "determinism_bench: unknown or incomplete argument '%s'\nusage: %s "
                     "[--tensors K] [--bytes SIZE[K|M|G]] [--pairs N] [--warmup N]\n",
                     a.c_str(), argv[0]);
        return 2;
      }
    }
    if (tensors < 1 || pairs < 1 || warmup < 0)
      throw std::invalid_argument("--tensors and --pairs must be at least 1, --warmup 0 or more");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "determinism_bench: %s\n", e.what());
    return 2;
  }
  hvd::init();
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes / 4, 1));
  std::vector<std::vector<float>> bufs(static_cast<size_t>(tensors), std::vector<float>(n, 0.5f));
  std::vector<double> plain, ordered, ratio;
  for (int p = -warmup; p < pairs; ++p) {
    double t_plain = 0, t_ordered = 0;
    for (int side = 0; side < 2; ++side) {
      const bool det = (side == 0) == (p % 2 == 0);  // alternate which side goes first
      hvd::set_deterministic(det);
      const double t = iteration(bufs, det ? "det." : "def.");
      (det ? t_ordered : t_plain) = t;
      for (auto& b : bufs) std::fill(b.begin(), b.end(), 0.5f);
    }
    if (p < 0) continue;
    plain.push_back(t_plain);
    ordered.push_back(t_ordered);
    ratio.push_back(t_ordered / t_plain);
  }
  for (auto* v : {&plain, &ordered, &ratio}) std::sort(v->begin(), v->end());
  using allreduce_bench::quantile;
  if (hvd::rank() == 0)
    std::printf(
        "ranks %d  tensors %d x %lld B float32 sum  pairs %d\n"
        "default        %10.1f us per iteration (median)\n"
        "deterministic  %10.1f us per iteration (median)\n"
        "ratio deterministic/default: median %.3f (quartiles %.3f-%.3f)\n",
        hvd::size(), tensors, static_cast<long long>(n * 4), pairs, quantile(plain, 0.5),
        quantile(ordered, 0.5), quantile(ratio, 0.5), quantile(ratio, 0.25), quantile(ratio, 0.75));
  hvd::shutdown();
  return 0;
}
