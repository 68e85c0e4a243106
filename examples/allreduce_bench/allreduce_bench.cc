// allreduce_bench: hvd's allreduce against raw MPI_Allreduce on the same data, in the manner of
// nccl-tests: one row per message size with time, algorithm and bus bandwidth and a count of wrong
// values combined over ranks, so that the benchmark is also a check (exit status 1 on any wrong
// value). docs/allreduce_bench.md describes the flags, the columns and the formulas.
//
// The run has three phases, so that neither side is measured while the other is active:
//   1. MPI_Init_thread(MPI_THREAD_MULTIPLE); the raw-MPI baselines on MPI_COMM_WORLD for every row;
//   2. hvd::init() (which leaves our MPI to us), hvd's allreduce for every row, hvd::shutdown();
//      no raw MPI call is made while hvd's background thread runs;
//   3. times and wrong counts combined over ranks with MPI, the table printed, MPI_Finalize().
// With --compression LIST, phase 2 runs once per HVD_COMPRESSION value (init, rows, shutdown), and
// a second table compares them. Every timed loop also records what the process wrote to files and
// sockets (/proc/self/io wchar): with Open MPI's TCP transport (--mca btl self,tcp) that is the
// bytes each rank sends, headers included; on shared memory it stays near 0.
// --placement in (or both) measures rows in place: hvd's allreduce_async(buf, buf) against
// MPI_Allreduce(MPI_IN_PLACE, buf); each timed iteration then reduces the previous one's result,
// so the check runs on one more iteration from freshly filled inputs (measure_row()).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <hvd/hvd.h>

#include "elements.h"
#include "mpi_baseline.h"
#include "options.h"

namespace allreduce_bench {
namespace {

using hvd::DataType;
using hvd::ReduceOp;

struct Case {
  DataType dtype;
  ReduceOp op;
  int64_t count;  // elements per tensor
  int64_t bytes;  // count * element size
  bool in_place;  // input == output (hvd: allreduce_async(buf, buf); MPI: MPI_IN_PLACE)
};

// Per-rank results of one side of one row; combined over ranks before printing.
struct Measure {
  double time_us = 0;  // mean time of one iteration (all K tensors)
  double wrote = 0;    // bytes written (wchar) per iteration
  int64_t wrong = 0;
};

// --interleaved: iteration pairs of hvd and the hand-fused call (already combined over ranks;
// --gap-us with one tensor: the raw MPI_Allreduce).
struct Pairs {
  int n = 0;
  double hvd_us = 0, fused_us = 0;    // medians over the pairs
  double hvd_p95 = 0, fused_p95 = 0;  // 95th and 99th percentiles over the pairs
  double hvd_p99 = 0, fused_p99 = 0;
  double ratio = 0, q1 = 0, q3 = 0;  // median and quartiles of the pairs' hvd / hand-fused
  int64_t wrong = 0;                 // hvd's values checked after the pairs, summed over ranks
};

struct Row {
  Case c;
  Measure hvd, unfused, fused;
  std::vector<Measure> by_compression;  // --compression: one per value; hvd is the first
  Pairs pairs;
};

// K inputs, K outputs (the inputs themselves in place) and (for the fused baseline) one buffer for
// all of them.
struct Buffers {
  Buffers(const Case& c, int k, bool with_fused) : c_(c) {
    for (int i = 0; i < k; ++i) {
      in_store_.emplace_back(c.bytes);
      in.push_back(in_store_.back().data());
      if (c.in_place) {
        out.push_back(in.back());
      } else {
        out_store_.emplace_back(c.bytes);
        out.push_back(out_store_.back().data());
      }
    }
    if (with_fused) fused.resize(static_cast<std::size_t>(c.bytes) * k);
  }
  void fill_inputs(int rank, int nranks) {
    for (std::size_t k = 0; k < in.size(); ++k)
      fill_input(c_.op, c_.dtype, rank, nranks, k * c_.count, in[k], c_.count);
  }
  // 0xFF bytes: NaN for floating types, -1 or 255 for integers; an operation that writes nothing
  // leaves values the check counts as wrong. In place there are no separate outputs.
  void poison_outputs() {
    for (auto& o : out_store_)
      if (!o.empty()) std::memset(o.data(), 0xFF, o.size());
  }
  bool in_place() const { return c_.in_place; }
  int64_t count_wrong_outputs(int nranks) const {
    int64_t wrong = 0;
    for (std::size_t k = 0; k < out.size(); ++k)
      wrong += count_wrong(c_.op, c_.dtype, nranks, k * c_.count, out[k], c_.count);
    return wrong;
  }

  std::vector<void*> in, out;
  std::vector<std::byte> fused;

 private:
  Case c_;
  std::vector<std::vector<std::byte>> in_store_, out_store_;
};

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What this process has written to files and sockets (/proc/self/io wchar); 0 where unreadable.
int64_t written_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return 0;
}

// warmup untimed calls of once(), barrier(), iters timed calls: the mean time of one call, and in
// *wrote the bytes written per call.
template <class Once, class Barrier>
double time_loop(const Options& o, Once&& once, Barrier&& barrier, double* wrote = nullptr) {
  for (int i = 0; i < o.warmup; ++i) once();
  barrier();
  const int64_t w0 = written_bytes();
  const double t0 = now_us();
  for (int i = 0; i < o.iters; ++i) once();
  const double t = (now_us() - t0) / o.iters;
  if (wrote) *wrote = static_cast<double>(written_bytes() - w0) / o.iters;
  return t;
}

// One side of one row: inputs filled, outputs poisoned, time_loop(), and outputs left holding a
// result the check can expect. Out of place that is the last timed iteration's (the inputs never
// change). In place every iteration reduces the previous one's result (as a trainer's gradient
// buffers are, and as Horovod's in-place path is timed): values grow or wrap, which costs MPI and
// hvd the same, so the timed loop runs on them as they come; afterwards the inputs are filled
// again and reduced once more, untimed, and that result is checked.
template <class Once, class Barrier>
Measure measure_row(const Options& o, Buffers& b, int rank, int nranks, Once&& once,
                    Barrier&& barrier) {
  Measure m;
  b.fill_inputs(rank, nranks);
  b.poison_outputs();
  m.time_us = time_loop(o, once, barrier, &m.wrote);
  if (b.in_place()) {
    b.fill_inputs(rank, nranks);
    barrier();
    once();
  }
  return m;
}

// --interleaved: o.warmup untimed pairs, then o.iters pairs of (barrier, gap, once(), barrier,
// gap, fused()), each side's time the mean over ranks; then hvd's result checked on fresh inputs.
// The gaps (--gap-us G, else none): U[0, G] us from one sequence that every rank draws alike, plus
// U[0, G/16] us from this rank's own; the same gap before both sides of a pair.
template <class Once, class Fused>
Pairs interleave(const Options& o, Buffers& b, int rank, int nranks, Once&& once, Fused&& fused) {
  b.fill_inputs(rank, nranks);
  b.poison_outputs();
  for (int i = 0; i < o.warmup; ++i) {
    once();
    fused();
  }
  std::mt19937_64 common(12345), own(777 + static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int64_t> all_ranks(0, o.gap_us), this_rank(0, o.gap_us / 16);
  auto gap = [](int64_t us) {
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  };
  std::vector<double> h(static_cast<std::size_t>(o.iters)), f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    const int64_t g = o.gap_us > 0 ? all_ranks(common) + this_rank(own) : 0;
    MPI_Barrier(MPI_COMM_WORLD);
    gap(g);
    double t0 = now_us();
    once();
    h[i] = now_us() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    gap(g);
    t0 = now_us();
    fused();
    f[i] = now_us() - t0;
  }
  MPI_Allreduce(MPI_IN_PLACE, h.data(), o.iters, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, f.data(), o.iters, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  Pairs p;
  p.n = o.iters;
  std::vector<double> r;
  for (std::size_t i = 0; i < h.size(); ++i)
    if (f[i] > 0) r.push_back(h[i] / f[i]);
  std::sort(r.begin(), r.end());
  std::sort(h.begin(), h.end());
  std::sort(f.begin(), f.end());
  p.hvd_us = quantile(h, 0.5) / nranks;
  p.fused_us = quantile(f, 0.5) / nranks;
  p.hvd_p95 = quantile(h, 0.95) / nranks;
  p.fused_p95 = quantile(f, 0.95) / nranks;
  p.hvd_p99 = quantile(h, 0.99) / nranks;
  p.fused_p99 = quantile(f, 0.99) / nranks;
  p.ratio = quantile(r, 0.5);
  p.q1 = quantile(r, 0.25);
  p.q3 = quantile(r, 0.75);
  b.fill_inputs(rank, nranks);
  b.poison_outputs();
  MPI_Barrier(MPI_COMM_WORLD);
  once();
  p.wrong = b.count_wrong_outputs(nranks);
  MPI_Allreduce(MPI_IN_PLACE, &p.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return p;
}

std::vector<Case> make_cases(const Options& o) {
  std::vector<Case> cases;
  for (DataType t : o.dtypes) {
    for (ReduceOp op : o.ops) {
      int64_t last_count = -1;
      for (int64_t bytes : sweep_sizes(o)) {
        // Sizes round down to whole elements; a size that rounds to the previous count is skipped.
        const int64_t count = bytes / static_cast<int64_t>(hvd::dtype_size(t));
        if (count == last_count) continue;
        last_count = count;
        const int64_t b = count * static_cast<int64_t>(hvd::dtype_size(t));
        if (o.out_of_place) cases.push_back({t, op, count, b, false});
        if (o.in_place) cases.push_back({t, op, count, b, true});
      }
    }
  }
  return cases;
}

// Phase 1.
void run_baselines(const Options& o, int rank, int nranks, std::vector<Row>& rows) {
  MpiBaseline mpi(MPI_COMM_WORLD);
  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  for (Row& row : rows) {
    const Case& c = row.c;
    Buffers b(c, o.tensors, o.tensors > 1);
    row.unfused = measure_row(
        o, b, rank, nranks, [&] { mpi.run_unfused(c.dtype, c.op, b.in, b.out, c.count); }, barrier);
    row.unfused.wrong = b.count_wrong_outputs(nranks);
    if (o.tensors > 1) {
      row.fused = measure_row(
          o, b, rank, nranks,
          [&] { mpi.run_fused(c.dtype, c.op, b.in, b.out, c.count, b.fused.data()); }, barrier);
      row.fused.wrong = b.count_wrong_outputs(nranks);
    }
  }
}

// Phase 2: K allreduce_async calls, then a wait on each handle, per iteration (--grouped: one
// grouped_allreduce_async of the K tensors, then its wait). The names stay the
// same from one iteration to the next, as a trainer's gradients do, so hvd's response cache
// applies. The result goes to row.by_compression[slot] (and row.hvd for slot 0).
void run_hvd(const Options& o, int rank, int nranks, std::vector<Row>& rows, std::size_t slot) {
  auto barrier = [] { hvd::barrier(); };
  const bool pairs = o.interleaved && slot == 0;
  std::optional<MpiBaseline> mpi;
  if (pairs) mpi.emplace(MPI_COMM_WORLD);
  for (Row& row : rows) {
    const Case& c = row.c;
    Buffers b(c, o.tensors, pairs && o.tensors > 1);
    std::vector<hvd::TensorRef> ins, outs;
    std::vector<std::string> names;
    for (int k = 0; k < o.tensors; ++k) {
      ins.emplace_back(b.in[k], c.dtype, std::vector<int64_t>{c.count});
      outs.emplace_back(b.out[k], c.dtype, std::vector<int64_t>{c.count});
      names.push_back(std::string("allreduce_bench.") + type_name(c.dtype) + "." + op_name(c.op) +
                      "." + std::to_string(c.bytes) + (c.in_place ? ".in." : ".") +
                      std::to_string(k));
    }
    std::vector<hvd::Handle> handles(o.tensors);
    const std::string group = names[0] + ".group";
    auto once = [&] {
      if (o.grouped) {
        hvd::grouped_allreduce_async(ins, outs, group, c.op).wait();
        return;
      }
      for (int k = 0; k < o.tensors; ++k)
        handles[k] = hvd::allreduce_async(ins[k], outs[k], names[k], c.op);
      for (hvd::Handle& h : handles) h.wait();
    };
    Measure& m = row.by_compression.at(slot);
    m = measure_row(o, b, rank, nranks, once, barrier);
    if (o.inject_wrong && rank == 0 && c.count > 0)
      store(c.dtype, b.out[0], 0, load(c.dtype, b.out[0], 0) + 1);
    m.wrong = b.count_wrong_outputs(nranks);
    if (slot == 0) row.hvd = m;
    if (pairs)
      row.pairs = interleave(o, b, rank, nranks, once, [&] {
        if (o.tensors > 1)
          mpi->run_fused(c.dtype, c.op, b.in, b.out, c.count, b.fused.data());
        else
          mpi->run_unfused(c.dtype, c.op, b.in, b.out, c.count);
      });
  }
}

// Phase 3: mean time over ranks (as nccl-tests reports), wrong values summed over ranks.
void combine_over_ranks(std::vector<Row>& rows, int nranks) {
  std::vector<double> times;
  std::vector<int64_t> wrongs;
  auto measures = [](Row& r) {
    std::vector<Measure*> v = {&r.hvd, &r.unfused, &r.fused};
    for (Measure& m : r.by_compression) v.push_back(&m);
    return v;
  };
  for (Row& r : rows) {
    for (const Measure* m : measures(r)) {
      times.push_back(m->time_us);
      times.push_back(m->wrote);
      wrongs.push_back(m->wrong);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, wrongs.data(), static_cast<int>(wrongs.size()), MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  std::size_t i = 0;
  for (Row& r : rows) {
    for (Measure* m : measures(r)) {
      m->time_us = times[2 * i] / nranks;
      m->wrote = times[2 * i + 1] / nranks;
      m->wrong = wrongs[i];
      ++i;
    }
  }
}

// algbw = bytes moved per iteration / time; busbw = algbw * 2 (n - 1) / n (nccl-tests, allreduce).
void print_measure(const Measure& m, double bytes, int nranks) {
  const double algbw = m.time_us > 0 ? bytes / (m.time_us * 1e-6) / 1e9 : 0;
  const double busbw = algbw * 2.0 * (nranks - 1) / nranks;
  std::printf("  %10.2f %11.3f %11.3f %6lld", m.time_us, algbw, busbw,
              static_cast<long long>(m.wrong));
}

// The last column of a table row with --placement in or both: "out" (in -> out) or "in" (in
// place); absent otherwise, so that the default table keeps its columns. Ends the line.
void end_row(const Options& o, const char* place) {
  if (o.in_place) std::printf("  %5s", place);
  std::printf("\n");
}
const char* place_name(const Case& c) { return c.in_place ? "in" : "out"; }

double ratio(const Measure& a, const Measure& b) {
  return b.time_us > 0 ? a.time_us / b.time_us : 0;
}

void print_header(const Options& o, int nranks) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string mpi_version(version, len);
  mpi_version = mpi_version.substr(0, mpi_version.find_first_of(",\n"));
  std::printf("# allreduce_bench: hvd %s allreduce against raw MPI_Allreduce (%s)\n",
              hvd::version_string(), mpi_version.c_str());
  std::printf("# nranks %d  tensors per iteration %d  iters %d  warmup_iters %d", nranks, o.tensors,
              o.iters, o.warmup);
  for (const char* var :
       {"HVD_FUSION_THRESHOLD", "HVD_CYCLE_TIME", "HVD_CACHE_CAPACITY", "HVD_COMPRESSION"}) {
    if (const char* v = std::getenv(var)) std::printf("  %s=%s", var, v);
  }
  std::printf("\n");
  if (o.in_place)
    std::printf("# place in: hvd allreduce_async(buf, buf), MPI_Allreduce(MPI_IN_PLACE, buf)%s\n",
                o.tensors > 1 ? ", hand-fused copies buf in and back" : "");
  if (nranks > 21) std::printf("# note: beyond 21 ranks int8 sums overflow and count as wrong\n");
}

void print_ranks(int rank, int nranks) {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  const long long pid = getpid();
  std::vector<char> hosts(rank == 0 ? MPI_MAX_PROCESSOR_NAME * nranks : 1);
  std::vector<long long> pids(nranks);
  MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
             0, MPI_COMM_WORLD);
  MPI_Gather(&pid, 1, MPI_LONG_LONG, pids.data(), 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  for (int r = 0; r < nranks; ++r) {
    std::printf("#  Rank %2d Pid %7lld on %s\n", r, pids[r],
                &hosts[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  }
  std::fflush(stdout);
}

void print_table(const Options& o, const std::vector<Row>& rows, int nranks) {
  const bool fused = o.tensors > 1;
  const std::string k = std::to_string(o.tensors);
  std::printf("#\n# %40s", "");
  std::printf("  %-41s", ("hvd: " + (o.grouped ? "1 grouped_allreduce_async of " + k
                                               : k + " x allreduce_async"))
                             .c_str());
  if (fused) {
    std::printf("  %-41s  %s", ("MPI: " + k + " x MPI_Allreduce (unfused)").c_str(),
                "MPI: 1 hand-fused MPI_Allreduce");
  } else {
    std::printf("  MPI: %s x MPI_Allreduce", k.c_str());
  }
  std::printf("\n# %10s %12s %9s %6s", "size(B)", "count", "type", "redop");
  const int sides = fused ? 3 : 2;
  for (int s = 0; s < sides; ++s) {
    std::printf("  %10s %11s %11s %6s", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  if (fused)
    std::printf("  %11s %9s", "hvd/unfused", "hvd/fused");
  else
    std::printf("  %9s", "hvd/MPI");
  end_row(o, "place");

  double hvd_busbw = 0, mpi_busbw = 0;
  int64_t wrong_hvd = 0, wrong_mpi = 0;
  for (const Row& r : rows) {
    const double bytes = static_cast<double>(r.c.bytes) * o.tensors;
    std::printf("  %10lld %12lld %9s %6s", static_cast<long long>(r.c.bytes),
                static_cast<long long>(r.c.count), type_name(r.c.dtype), op_name(r.c.op));
    print_measure(r.hvd, bytes, nranks);
    print_measure(r.unfused, bytes, nranks);
    if (fused) print_measure(r.fused, bytes, nranks);
    std::printf(fused ? "  %11.3f" : "  %9.3f", ratio(r.hvd, r.unfused));
    if (fused) std::printf(" %9.3f", ratio(r.hvd, r.fused));
    end_row(o, place_name(r.c));
    const double factor = 2.0 * (nranks - 1) / nranks / 1e9 * 1e6;
    if (r.hvd.time_us > 0) hvd_busbw += bytes / r.hvd.time_us * factor;
    if (r.unfused.time_us > 0) mpi_busbw += bytes / r.unfused.time_us * factor;
    wrong_hvd += r.hvd.wrong;
    wrong_mpi += r.unfused.wrong + r.fused.wrong;
  }
  const double n = rows.empty() ? 1.0 : static_cast<double>(rows.size());
  std::printf("# wrong values: hvd %lld, MPI %lld: %s\n", static_cast<long long>(wrong_hvd),
              static_cast<long long>(wrong_mpi), wrong_hvd + wrong_mpi == 0 ? "OK" : "FAILED");
  std::printf("# avg bus bandwidth (GB/s): hvd %.3f, MPI %.3f\n#\n", hvd_busbw / n, mpi_busbw / n);
  std::fflush(stdout);
}

// --compression: one line per row and HVD_COMPRESSION value, with time and bytes written relative
// to the first value, and the raw MPI_Allreduce for reference.
void print_compression_table(const Options& o, const std::vector<Row>& rows) {
  std::printf(
      "# HVD_COMPRESSION, each measured in this process (hvd::init/shutdown in between); wrote(B): "
      "bytes\n"
      "# each rank wrote to sockets per iteration (/proc/self/io wchar; the TCP transport's "
      "sends,\n"
      "# headers included; about 0 on shared memory); ratios relative to '%s'\n",
      o.compressions.front().c_str());
  std::printf("# %10s %9s %6s %14s  %12s %9s  %12s %9s %6s", "size(B)", "type", "redop",
              "compression", "time(us)", "time/1st", "wrote(B)", "wrote/1st", "#wrong");
  end_row(o, "place");
  for (const Row& r : rows) {
    const Measure& first = r.by_compression.front();
    auto rel = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    for (std::size_t k = 0; k < o.compressions.size(); ++k) {
      const Measure& m = r.by_compression[k];
      std::printf("  %10lld %9s %6s %14s  %12.2f %9.3f  %12.0f %9.3f %6lld",
                  static_cast<long long>(r.c.bytes), type_name(r.c.dtype), op_name(r.c.op),
                  o.compressions[k].c_str(), m.time_us, rel(m.time_us, first.time_us), m.wrote,
                  rel(m.wrote, first.wrote), static_cast<long long>(m.wrong));
      end_row(o, place_name(r.c));
    }
    std::printf("  %10lld %9s %6s %14s  %12.2f %9.3f  %12.0f %9.3f %6lld",
                static_cast<long long>(r.c.bytes), type_name(r.c.dtype), op_name(r.c.op),
                "MPI_Allreduce", r.unfused.time_us, rel(r.unfused.time_us, first.time_us),
                r.unfused.wrote, rel(r.unfused.wrote, first.wrote),
                static_cast<long long>(r.unfused.wrong));
    end_row(o, place_name(r.c));
  }
  std::printf("#\n");
  std::fflush(stdout);
}

// --interleaved: per row, the pairs' medians and the median (quartiles) of their ratios.
void print_pairs_table(const Options& o, const std::vector<Row>& rows) {
  const bool fused = o.tensors > 1;
  const char* other = fused ? "hand-fused" : "MPI_Allreduce";
  std::printf(
      "# interleaved: %d pairs per row of (barrier, %sone hvd iteration, barrier, %sone %s "
      "iteration),\n# each side the mean over ranks; medians over the pairs",
      o.iters, o.gap_us > 0 ? "gap, " : "", o.gap_us > 0 ? "gap, " : "", other);
  if (o.gap_us > 0)
    std::printf(
        ";\n# gap: a sleep of U[0,%lld] us on every rank alike plus U[0,%lld] us of its own",
        static_cast<long long>(o.gap_us), static_cast<long long>(o.gap_us / 16));
  std::printf("\n# %10s %9s %6s  %12s %15s  %14s %15s  %10s %10s %10s %10s %6s", "size(B)", "type",
              "redop", "hvd(us)", fused ? "hand-fused(us)" : "MPI(us)",
              fused ? "hvd/hand-fused" : "hvd/MPI", "quartiles", "hvd p95", "hvd p99",
              fused ? "h-f p95" : "MPI p95", fused ? "h-f p99" : "MPI p99", "#wrong");
  end_row(o, "place");
  for (const Row& r : rows) {
    const Pairs& p = r.pairs;
    std::printf(
        "  %10lld %9s %6s  %12.2f %15.2f  %14.3f %7.3f-%-7.3f  %10.1f %10.1f %10.1f %10.1f %6lld",
        static_cast<long long>(r.c.bytes), type_name(r.c.dtype), op_name(r.c.op), p.hvd_us,
        p.fused_us, p.ratio, p.q1, p.q3, p.hvd_p95, p.hvd_p99, p.fused_p95, p.fused_p99,
        static_cast<long long>(p.wrong));
    end_row(o, place_name(r.c));
  }
  std::printf("#\n");
  std::fflush(stdout);
}

int run(int argc, char** argv, int rank, int nranks) {
  Options o;
  try {
    o = parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    if (rank == 0)
      std::fprintf(stderr, "allreduce_bench: %s\n%s", e.what(), usage(argv[0]).c_str());
    return 2;
  }
  if (o.help) {
    if (rank == 0) std::printf("%s", usage(argv[0]).c_str());
    return 0;
  }
  std::vector<Row> rows;
  const std::size_t slots = o.compressions.empty() ? 1 : o.compressions.size();
  for (const Case& c : make_cases(o))
    rows.push_back(Row{c, {}, {}, {}, std::vector<Measure>(slots), {}});

  if (rank == 0) print_header(o, nranks);
  print_ranks(rank, nranks);
  if (rank == 0) {
    std::printf("# measuring raw MPI_Allreduce ...\n");
    std::fflush(stdout);
  }
  run_baselines(o, rank, nranks, rows);

  for (std::size_t slot = 0; slot < slots; ++slot) {
    if (!o.compressions.empty()) setenv("HVD_COMPRESSION", o.compressions[slot].c_str(), 1);
    hvd::init();
    if (rank == 0) {
      std::printf("# hvd: size %d, local_size %d, cross_size %d, %s; measuring hvd", hvd::size(),
                  hvd::local_size(), hvd::cross_size(),
                  hvd::is_homogeneous() ? "homogeneous" : "heterogeneous");
      if (!o.compressions.empty())
        std::printf(" with HVD_COMPRESSION=%s", o.compressions[slot].c_str());
      std::printf(" ...\n");
      std::fflush(stdout);
    }
    run_hvd(o, rank, nranks, rows, slot);
    hvd::shutdown();
  }

  combine_over_ranks(rows, nranks);
  int64_t wrong = 0;
  for (const Row& r : rows) {
    wrong += r.unfused.wrong + r.fused.wrong;
    for (const Measure& m : r.by_compression) wrong += m.wrong;
  }
  for (const Row& r : rows) wrong += r.pairs.wrong;
  if (rank == 0) print_table(o, rows, nranks);
  if (rank == 0 && o.interleaved) print_pairs_table(o, rows);
  if (rank == 0 && !o.compressions.empty()) print_compression_table(o, rows);
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace allreduce_bench

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (provided < MPI_THREAD_MULTIPLE && rank == 0) {
    std::fprintf(
        stderr, "allreduce_bench: warning: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n",
        provided);
  }
  int status = 0;
  try {
    status = allreduce_bench::run(argc, argv, rank, nranks);
  } catch (const std::exception& e) {
    // One rank's failure must not leave the others waiting in a collective.
    std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return status;
}
