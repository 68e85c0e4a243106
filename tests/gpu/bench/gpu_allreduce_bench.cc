// gpu_allreduce_bench: hvd's allreduce of CUDA tensors against the raw library call it wraps, on
// the same data, in one process (one run of mpirun), in the manner of examples/allreduce_bench.
//
//   mpirun -np N gpu_allreduce_bench [--baseline nccl|nccl-streams|nccl-thread|staged]
//       [-b MIN] [-e MAX] [-f STEP]
//       [--tensors K] [-n iters] [-w warmup] [--vary VAR=v1,v2,...] [--csv FILE]
//
//   --baseline nccl    (default) K x ncclAllReduce on a communicator of our own, on our stream,
//                      then cudaStreamSynchronize: what hvd's NCCL path wraps.
//   --baseline nccl-streams  the same call in hvd's stream discipline, no thread: an event on our
//                      stream that a second stream waits for, ncclAllReduce on the second stream,
//                      an event there that our stream waits for, cudaStreamSynchronize of ours.
//   --baseline nccl-thread   the same, with the second stream's work handed to another thread and
//                      back: the caller sets a flag, a spinning thread records, waits, launches and
//                      polls the done event (cudaEventQuery), then sets a flag the caller spins on
//                      (no sleep on either side): hvd's hand-offs at their cheapest.
//   --baseline staged  K x (cudaMemcpy D2H to pinned memory, MPI_Allreduce in place, cudaMemcpy
//                      H2D): what HVD_GPU_OPERATIONS=MPI (host staging) does; run this with the
//                      environment variable HVD_GPU_OPERATIONS=MPI (e.g. 2 ranks on one GPU).
//   -b/-e/-f           bytes per tensor: MIN, MIN*STEP, ... up to MAX (default 4 .. 256M, x2)
//   --tensors K        K float32 tensors of that size per iteration (default 1): hvd gets K
//                      allreduce_async calls then a wait on each, the baseline K calls then a sync
//   --vary VAR=LIST    hvd is measured once per value of the environment variable VAR
//                      (hvd::init/shutdown in between), e.g. HVD_FUSION_THRESHOLD=67108864,0 for
//                      fused vs unfused, or HVD_CYCLE_TIME=1,0.1; default: once, as the
//                      environment is
//   --csv FILE         rank 0 writes one line per size and hvd variant (scripts/gpu-check reads it)
//
// Phases, so that neither side runs while the other is measured: (1) MPI_Init_thread, the baseline
// for every size; (2) per --vary value: hvd::init(), hvd for every size, hvd::shutdown();
// (3) times averaged over ranks, wrong values summed, rank 0 prints. Times are host wall-clock per
// iteration (submit + wait), the mean of -n iterations after -w warm-up ones. ratio = hvd time /
// baseline time (1.05 = hvd 5% slower). Values are exact float sums, checked on every rank: any
// wrong value makes the exit status 1.
//
// Exit status: 0 ok, 1 wrong values, 2 bad usage, 3 CUDA/NCCL/MPI/hvd error, 77 no CUDA device.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <hvd/hvd.h>

#include "tests/gpu/bench/bench_util.h"

namespace {

using gpubench::check;

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(rc));
}

struct Options {
  std::string baseline = "nccl";
  int64_t min_bytes = 4, max_bytes = 256ll << 20, step = 2;
  int tensors = 1;
  int iters = 30, warmup = 5;
  std::string vary_var;
  std::vector<std::string> vary_values;
  std::string csv;
};

Options parse(int argc, char** argv) {
  Options o;
  gpubench::Args a(argc, argv, "gpu_allreduce_bench");
  while (a.next()) {
    if (a.is("--baseline")) {
      o.baseline = a.value();
      if (o.baseline != "nccl" && o.baseline != "nccl-streams" && o.baseline != "nccl-thread" &&
          o.baseline != "staged")
        throw gpubench::UsageError("--baseline '" + o.baseline +
                                   "': use nccl, nccl-streams, nccl-thread or staged");
    } else if (a.is("-b", "--minbytes")) {
      o.min_bytes = gpubench::parse_size(a.flag(), a.value(), 4, int64_t{8} << 30);
    } else if (a.is("-e", "--maxbytes")) {
      o.max_bytes = gpubench::parse_size(a.flag(), a.value(), 4, int64_t{8} << 30);
    } else if (a.is("-f", "--stepfactor")) {
      o.step = gpubench::parse_size(a.flag(), a.value(), 2, 1 << 20);
    } else if (a.is("--tensors")) {
      o.tensors = static_cast<int>(gpubench::parse_size(a.flag(), a.value(), 1, 1 << 16));
    } else if (a.is("-n", "--iters")) {
      o.iters = static_cast<int>(gpubench::parse_size(a.flag(), a.value(), 1, 1 << 20));
    } else if (a.is("-w", "--warmup")) {
      o.warmup = static_cast<int>(gpubench::parse_size(a.flag(), a.value(), 0, 1 << 20));
    } else if (a.is("--vary")) {
      const std::string v = a.value();
      const auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        throw gpubench::UsageError("--vary needs VAR=v1,v2,..., got '" + v + "'");
      o.vary_var = v.substr(0, eq);
      std::string rest = v.substr(eq + 1);
      size_t start = 0;
      while (true) {
        const size_t comma = rest.find(',', start);
        o.vary_values.push_back(rest.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (a.is("--csv")) {
      o.csv = a.value();
    } else {
      a.unknown();
    }
  }
  if (o.min_bytes > o.max_bytes) throw gpubench::UsageError("-b is larger than -e");
  return o;
}

std::vector<int64_t> sizes_of(const Options& o) {
  std::vector<int64_t> v;
  for (int64_t s = o.min_bytes; s <= o.max_bytes; s *= o.step) {
    const int64_t whole = s / 4 * 4;
    if (v.empty() || v.back() != whole) v.push_back(whole);
    if (s > o.max_bytes / o.step) break;
  }
  return v;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// K device inputs (rank-dependent exact values) and K outputs of `count` floats each.
class Tensors {
 public:
  Tensors(int k, int64_t count, int rank) : count_(count) {
    std::vector<float> host(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      host[static_cast<size_t>(i)] = static_cast<float>(rank + 1 + i % 13);
    for (int j = 0; j < k; ++j) {
      void *in = nullptr, *out = nullptr;
      check(cudaMalloc(&in, bytes() + 1), "cudaMalloc");
      check(cudaMalloc(&out, bytes() + 1), "cudaMalloc");
      in_.push_back(static_cast<float*>(in));
      out_.push_back(static_cast<float*>(out));
      check(cudaMemcpy(in, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    poison();
  }
  ~Tensors() {
    for (float* p : in_) cudaFree(p);
    for (float* p : out_) cudaFree(p);
  }
  Tensors(const Tensors&) = delete;
  Tensors& operator=(const Tensors&) = delete;
  size_t bytes() const { return static_cast<size_t>(count_) * sizeof(float); }
  int64_t count() const { return count_; }
  float* in(int j) const { return in_[static_cast<size_t>(j)]; }
  float* out(int j) const { return out_[static_cast<size_t>(j)]; }
  int k() const { return static_cast<int>(in_.size()); }
  // 0xFF bytes: NaN, which no correct result is. cudaMemset runs on the legacy default stream,
  // which the benchmarks' non-blocking stream does not wait for: synchronise before returning.
  void poison() {
    for (float* p : out_) check(cudaMemset(p, 0xFF, bytes()), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  int64_t count_wrong(int nranks) const {
    int64_t wrong = 0;
    std::vector<float> host(static_cast<size_t>(count_));
    const float base = static_cast<float>(nranks * (nranks + 1) / 2);
    for (float* p : out_) {
      check(cudaMemcpy(host.data(), p, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (int64_t i = 0; i < count_; ++i)
        if (host[static_cast<size_t>(i)] != base + static_cast<float>(nranks * (i % 13))) ++wrong;
    }
    return wrong;
  }

 private:
  int64_t count_;
  std::vector<float*> in_, out_;
};

struct Measure {
  double us = 0;
  int64_t wrong = 0;
};

template <class Once, class Barrier>
double time_loop(const Options& o, Once&& once, Barrier&& barrier) {
  for (int i = 0; i < o.warmup; ++i) once();
  barrier();
  const double t0 = now_us();
  for (int i = 0; i < o.iters; ++i) once();
  return (now_us() - t0) / o.iters;
}

// --baseline nccl-streams / nccl-thread: the raw calls in hvd's stream discipline (an event on the
// caller's stream that hvd's stream waits for, the work on hvd's stream, an event there that the
// caller's stream waits for), launched by the caller or by a spinning thread that also polls the
// done event before it hands back, as hvd's background and finalizer threads do.
template <class Barrier>
double time_streams(const Options& o, const Tensors& t, ncclComm_t comm, cudaStream_t s,
                    bool threaded, Barrier&& barrier) {
  cudaStream_t side;
  cudaEvent_t ready, done;
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  auto launch = [&] {
    check(cudaStreamWaitEvent(side, ready, 0), "cudaStreamWaitEvent");
    for (int j = 0; j < t.k(); ++j)
      check_nccl(ncclAllReduce(t.in(j), t.out(j), static_cast<size_t>(t.count()), ncclFloat,
                               ncclSum, comm, side),
                 "ncclAllReduce");
    check(cudaEventRecord(done, side), "cudaEventRecord");
  };
  std::atomic<int> asked{0}, answered{0};
  std::atomic<bool> stop{false};
  std::thread worker;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (threaded)
    worker = std::thread([&] {
      check(cudaSetDevice(device), "cudaSetDevice");
      int seen = 0;
      while (!stop.load(std::memory_order_acquire)) {
        if (asked.load(std::memory_order_acquire) == seen) continue;
        ++seen;
        launch();
        while (cudaEventQuery(done) == cudaErrorNotReady) {}
        answered.store(seen, std::memory_order_release);
      }
    });
  int n = 0;
  const double us = time_loop(
      o,
      [&] {
        check(cudaEventRecord(ready, s), "cudaEventRecord");
        if (threaded) {
          asked.store(++n, std::memory_order_release);
          while (answered.load(std::memory_order_acquire) != n) {}
        } else {
          launch();
        }
        check(cudaStreamWaitEvent(s, done, 0), "cudaStreamWaitEvent");
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      },
      barrier);
  stop.store(true, std::memory_order_release);
  if (worker.joinable()) worker.join();
  cudaEventDestroy(done);
  cudaEventDestroy(ready);
  cudaStreamDestroy(side);
  return us;
}

// Phase 1.
std::vector<Measure> run_baseline(const Options& o, const std::vector<int64_t>& sizes, int rank,
                                  int nranks, cudaStream_t s) {
  std::vector<Measure> out;
  ncclComm_t comm = nullptr;
  if (o.baseline.rfind("nccl", 0) == 0) {
    ncclUniqueId id;
    if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    check_nccl(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  }
  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  for (int64_t bytes : sizes) {
    Tensors t(o.tensors, bytes / 4, rank);
    Measure m;
    if (comm && o.baseline == "nccl") {
      m.us = time_loop(
          o,
          [&] {
            for (int j = 0; j < t.k(); ++j)
              check_nccl(ncclAllReduce(t.in(j), t.out(j), static_cast<size_t>(t.count()), ncclFloat,
                                       ncclSum, comm, s),
                         "ncclAllReduce");
            check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          },
          barrier);
    } else if (comm) {
      m.us = time_streams(o, t, comm, s, o.baseline == "nccl-thread", barrier);
    } else {
      float* pinned = nullptr;
      check(cudaMallocHost(reinterpret_cast<void**>(&pinned),
                           t.bytes() * static_cast<size_t>(t.k()) + 1),
            "cudaMallocHost");
      m.us = time_loop(
          o,
          [&] {
            for (int j = 0; j < t.k(); ++j)
              check(
                  cudaMemcpyAsync(pinned + static_cast<size_t>(j) * static_cast<size_t>(t.count()),
                                  t.in(j), t.bytes(), cudaMemcpyDeviceToHost, s),
                  "cudaMemcpyAsync");
            check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
            for (int j = 0; j < t.k(); ++j)
              MPI_Allreduce(MPI_IN_PLACE,
                            pinned + static_cast<size_t>(j) * static_cast<size_t>(t.count()),
                            static_cast<int>(t.count()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            for (int j = 0; j < t.k(); ++j)
              check(cudaMemcpyAsync(
                        t.out(j), pinned + static_cast<size_t>(j) * static_cast<size_t>(t.count()),
                        t.bytes(), cudaMemcpyHostToDevice, s),
                    "cudaMemcpyAsync");
            check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          },
          barrier);
      cudaFreeHost(pinned);
    }
    m.wrong = t.count_wrong(nranks);
    out.push_back(m);
  }
  if (comm) check_nccl(ncclCommDestroy(comm), "ncclCommDestroy");
  return out;
}

// Phase 2, one --vary value: hvd for every size.
std::vector<Measure> run_hvd(const Options& o, const std::vector<int64_t>& sizes, int rank,
                             int nranks, int device, cudaStream_t s) {
  std::vector<Measure> out;
  auto barrier = [] { hvd::barrier(); };
  for (int64_t bytes : sizes) {
    Tensors t(o.tensors, bytes / 4, rank);
    std::vector<hvd::TensorRef> ins, outs;
    std::vector<std::string> names;
    for (int j = 0; j < t.k(); ++j) {
      ins.emplace_back(t.in(j), hvd::DataType::kFloat32, std::vector<int64_t>{t.count()},
                       hvd::Device::cuda(device), static_cast<void*>(s));
      outs.emplace_back(t.out(j), hvd::DataType::kFloat32, std::vector<int64_t>{t.count()},
                        hvd::Device::cuda(device), static_cast<void*>(s));
      names.push_back("gpu_allreduce_bench." + std::to_string(bytes) + "." + std::to_string(j));
    }
    std::vector<hvd::Handle> handles(static_cast<size_t>(t.k()));
    Measure m;
    m.us = time_loop(
        o,
        [&] {
          for (int j = 0; j < t.k(); ++j)
            handles[static_cast<size_t>(j)] =
                hvd::allreduce_async(ins[static_cast<size_t>(j)], outs[static_cast<size_t>(j)],
                                     names[static_cast<size_t>(j)], hvd::ReduceOp::kSum);
          for (auto& h : handles) h.wait();
          // With HVD_ENABLE_ASYNC_COMPLETION wait() returns once the work is queued: the result
          // is on the host's side only after the stream (idle here without it: ~1 us).
          check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        },
        barrier);
    m.wrong = t.count_wrong(nranks);
    out.push_back(m);
  }
  return out;
}

void combine(std::vector<Measure>& v, int nranks) {
  std::vector<double> us;
  std::vector<long long> wrong;
  for (const auto& m : v) {
    us.push_back(m.us);
    wrong.push_back(m.wrong);
  }
  MPI_Allreduce(MPI_IN_PLACE, us.data(), static_cast<int>(us.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, wrong.data(), static_cast<int>(wrong.size()), MPI_LONG_LONG, MPI_SUM,
                MPI_COMM_WORLD);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i].us = us[i] / nranks;
    v[i].wrong = wrong[i];
  }
}

int run(const Options& o, int rank, int nranks) {
  // The device of this rank: local rank modulo the visible devices, as hvd picks it.
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0, devices = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int device = local_rank % devices;
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

  const std::vector<int64_t> sizes = sizes_of(o);
  std::vector<std::string> variants = o.vary_values;
  if (variants.empty()) variants.push_back("");
  if (rank == 0) {
    gpubench::print_device_header(
        "gpu_allreduce_bench: hvd allreduce of CUDA tensors vs the raw call", device);
    int nccl_version = 0;
    ncclGetVersion(&nccl_version);
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi_version, &len);
    std::string mv(mpi_version, static_cast<size_t>(len));
    mv = mv.substr(0, mv.find_first_of(",\n"));
    std::printf(
        "# hvd %s; NCCL %d; %s; nranks %d; baseline %s; float32 sum; tensors per iteration %d; "
        "iters %d, "
        "warmup %d\n# environment:",
        hvd::version_string(), nccl_version, mv.c_str(), nranks,
        o.baseline == "nccl"           ? "raw ncclAllReduce + cudaStreamSynchronize"
        : o.baseline == "nccl-streams" ? "raw ncclAllReduce on a second stream, events both ways"
        : o.baseline == "nccl-thread"
            ? "raw ncclAllReduce on a second stream, launched and polled by a spinning thread"
            : "raw D2H + MPI_Allreduce + H2D (pinned)",
        o.tensors, o.iters, o.warmup);
    for (const char* var :
         {"HVD_GPU_OPERATIONS", "HVD_CYCLE_TIME", "HVD_FUSION_THRESHOLD", "HVD_CACHE_CAPACITY",
          "NCCL_MULTI_RANK_GPU_ENABLE", "CUDA_VISIBLE_DEVICES"})
      if (const char* v = std::getenv(var)) std::printf(" %s=%s", var, v);
    std::printf("\n# measuring the baseline ...\n");
    std::fflush(stdout);
  }
  std::vector<Measure> base = run_baseline(o, sizes, rank, nranks, s);
  std::vector<std::vector<Measure>> hvd_runs;
  const char* saved = o.vary_var.empty() ? nullptr : std::getenv(o.vary_var.c_str());
  const std::string saved_value = saved ? saved : "";
  for (const std::string& v : variants) {
    if (!o.vary_var.empty()) setenv(o.vary_var.c_str(), v.c_str(), 1);
    if (rank == 0) {
      std::printf("# measuring hvd%s ...\n",
                  o.vary_var.empty() ? "" : (" with " + o.vary_var + "=" + v).c_str());
      std::fflush(stdout);
    }
    hvd::init();
    hvd_runs.push_back(run_hvd(o, sizes, rank, nranks, device, s));
    hvd::shutdown();
  }
  if (!o.vary_var.empty()) {
    if (saved)
      setenv(o.vary_var.c_str(), saved_value.c_str(), 1);
    else
      unsetenv(o.vary_var.c_str());
  }
  combine(base, nranks);
  for (auto& r : hvd_runs) combine(r, nranks);

  int64_t wrong = 0;
  for (const auto& m : base) wrong += m.wrong;
  for (const auto& r : hvd_runs)
    for (const auto& m : r) wrong += m.wrong;
  if (rank == 0) {
    gpubench::Csv csv(
        o.csv,
        "baseline,nranks,tensors,bytes,count,variant,base_us,hvd_us,ratio,wrong_base,wrong_hvd");
    std::printf("#\n# %12s %12s %4s %12s %7s", "size(B)", "count", "K", "base(us)", "#wrong");
    for (const std::string& v : variants) {
      const std::string label = o.vary_var.empty() ? "hvd" : o.vary_var + "=" + v;
      std::printf(" | %-28s", label.c_str());
    }
    std::printf("\n# %12s %12s %4s %12s %7s", "", "", "", "", "");
    for (size_t j = 0; j < variants.size(); ++j)
      std::printf(" | %10s %8s %7s", "hvd(us)", "hvd/base", "#wrong");
    std::printf("\n");
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::printf("  %12lld %12lld %4d %12.2f %7lld", static_cast<long long>(sizes[i]),
                  static_cast<long long>(sizes[i] / 4), o.tensors, base[i].us,
                  static_cast<long long>(base[i].wrong));
      for (size_t j = 0; j < variants.size(); ++j) {
        const Measure& m = hvd_runs[j][i];
        const double ratio = base[i].us > 0 ? m.us / base[i].us : 0;
        std::printf(" | %10.2f %8.3f %7lld", m.us, ratio, static_cast<long long>(m.wrong));
        csv.row({o.baseline, std::to_string(nranks), std::to_string(o.tensors),
                 std::to_string(sizes[i]), std::to_string(sizes[i] / 4),
                 o.vary_var.empty() ? std::string("default") : o.vary_var + "=" + variants[j],
                 gpubench::fmt(base[i].us, "%.3f"), gpubench::fmt(m.us, "%.3f"),
                 gpubench::fmt(ratio), std::to_string(base[i].wrong), std::to_string(m.wrong)});
      }
      std::printf("\n");
    }
    std::printf("# wrong values: %lld: %s\n", static_cast<long long>(wrong),
                wrong ? "FAILED" : "OK");
    std::fflush(stdout);
  }
  cudaStreamDestroy(s);
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before MPI, on every rank alike: bad flags exit 2, no device exits 77 (ctest's skip code).
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const gpubench::UsageError& e) {
    std::fprintf(stderr, "gpu_allreduce_bench: %s\n", e.what());
    return 2;
  }
  if (int rc = gpubench::skip_without_device("gpu_allreduce_bench")) return rc;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int status = 0;
  try {
    status = run(o, rank, nranks);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_allreduce_bench: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return status;
}
