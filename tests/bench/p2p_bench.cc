// The cost of send/recv and of a process set's collective (hvd/process_set.h), against raw MPI on
// the same ranks, measured in one process in interleaved rounds:
//  1. ping-pong between ranks 0 and 1 (hvd::send then hvd::recv, and back), per size: the median
//     round trip over `--iters`, hvd against MPI_Send/MPI_Recv on a duplicate of MPI_COMM_WORLD;
//  2. with 3 ranks or more, the other ranks idle: the same ping-pong inside the process set {0, 1}
//     (4 B and 64 KiB), and an all-reduce over it, the median time per call, hvd against MPI on a
//     communicator of ranks 0 and 1.
// Every received value is checked ("wrong values: 0" at the end; anything else fails the run).
// In a ThreadSanitizer build the raw MPI baselines are left out (the message says why): the
// program's own MPI_Recv is then completed by MPI's progress engine inside hvd's background thread,
// which copies the data into the program's buffer, ordered by Open MPI's atomics that TSan cannot
// see (docs/reliability.md, "Sanitizers").
//
//   mpirun --oversubscribe --bind-to none -np 3 build/tests/bench/p2p_bench --rounds 5
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kMpiBaseline = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kMpiBaseline = false;
#else
constexpr bool kMpiBaseline = true;
#endif
#else
constexpr bool kMpiBaseline = true;
#endif

using Clock = std::chrono::steady_clock;

struct Options {
  int iters = 200;
  int rounds = 5;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// "MPI <t> us, ratio <r>", or that the baseline was not run.
std::string against_mpi(const std::vector<double>& h, const std::vector<double>& m) {
  if (m.empty()) return "MPI baseline not run (ThreadSanitizer build)";
  char s[96];
  std::snprintf(s, sizeof s, "MPI %9.1f us, ratio %.2f", median(m), median(h) / median(m));
  return s;
}

long g_wrong = 0;

// One ping-pong round of `iters` trips between ranks 0 and 1 of `n` floats; returns the median
// trip in microseconds (rank 0; the others return 0).
template <class Send, class Recv>
double pingpong(int iters, std::vector<float>& buf, Send&& send, Recv&& recv) {
  const int me = hvd::rank();
  std::vector<double> trips;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    if (me == 0) {
      std::fill(buf.begin(), buf.end(), static_cast<float>(i));
      send(1);
      recv(1);
      if (buf.front() != static_cast<float>(i + 1) || buf.back() != static_cast<float>(i + 1))
        ++g_wrong;
    } else if (me == 1) {
      recv(0);
      if (buf.front() != static_cast<float>(i) || buf.back() != static_cast<float>(i)) ++g_wrong;
      std::fill(buf.begin(), buf.end(), static_cast<float>(i + 1));
      send(0);
    }
    trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return me == 0 ? median(trips) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--iters") o.iters = std::max(1, v);
    if (a == "--rounds") o.rounds = std::max(1, v);
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  // The baselines' communicators, made before hvd's background thread runs (see the top).
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm raw, sub;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  MPI_Comm_split(MPI_COMM_WORLD, world_rank <= 1 ? 0 : MPI_UNDEFINED, world_rank, &sub);
  hvd::init();
  const int me = hvd::rank(), n = hvd::size();
  const auto finish = [&] {
    hvd::shutdown();
    if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    MPI_Comm_free(&raw);
    MPI_Finalize();
  };
  if (n < 2) {
    if (me == 0) std::printf("p2p_bench needs 2 ranks\nwrong values: 0\n");
    finish();
    return 0;
  }
  for (const int64_t bytes : {int64_t{4}, int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20}) {
    std::vector<float> buf(static_cast<size_t>(bytes / 4));
    const hvd::TensorRef t = hvd::as_tensor(std::span<float>(buf));
    std::vector<double> h, m;
    for (int r = 0; r < o.rounds; ++r) {
      h.push_back(pingpong(
          o.iters, buf, [&](int peer) { hvd::send(t, peer); },
          [&](int peer) { hvd::recv(t, peer); }));
      if (kMpiBaseline)
        m.push_back(pingpong(
            o.iters, buf,
            [&](int peer) {
              MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, raw);
            },
            [&](int peer) {
              MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, raw,
                       MPI_STATUS_IGNORE);
            }));
    }
    if (me == 0)
      std::printf("send/recv round trip %9lld B: hvd %9.1f us, %s\n", static_cast<long long>(bytes),
                  median(h), against_mpi(h, m).c_str());
  }
  if (n >= 3) {
    hvd::ProcessSet pair = hvd::add_process_set({0, 1});
    // The same ping-pong inside the set: negotiated by its two members only.
    for (const int64_t bytes : {int64_t{4}, int64_t{64} << 10}) {
      std::vector<float> buf(static_cast<size_t>(bytes / 4));
      const hvd::TensorRef t = hvd::as_tensor(std::span<float>(buf));
      std::vector<double> h, m;
      for (int r = 0; r < o.rounds && me <= 1; ++r) {
        h.push_back(pingpong(
            o.iters, buf, [&](int peer) { pair.send(t, peer); },
            [&](int peer) { pair.recv(t, peer); }));
        if (kMpiBaseline)
          m.push_back(pingpong(
              o.iters, buf,
              [&](int peer) {
                MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, sub);
              },
              [&](int peer) {
                MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, sub,
                         MPI_STATUS_IGNORE);
              }));
      }
      if (me == 0)
        std::printf(
            "process set {0, 1} of %d ranks, send/recv round trip %6lld B: hvd %9.1f us, %s\n", n,
            static_cast<long long>(bytes), median(h), against_mpi(h, m).c_str());
    }
    std::vector<double> h, m;
    std::vector<float> v(1);
    for (int r = 0; r < o.rounds && me <= 1; ++r) {
      std::vector<double> th, tm;
      for (int i = 0; i < o.iters; ++i) {
        v[0] = static_cast<float>(me + i);
        auto t0 = Clock::now();
        pair.allreduce(hvd::as_tensor(std::span<float>(v)), "bench.pair", hvd::ReduceOp::kSum);
        th.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (v[0] != static_cast<float>(1 + 2 * i)) ++g_wrong;
        if (!kMpiBaseline) continue;
        v[0] = static_cast<float>(me + i);
        t0 = Clock::now();
        MPI_Allreduce(MPI_IN_PLACE, v.data(), 1, MPI_FLOAT, MPI_SUM, sub);
        tm.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (v[0] != static_cast<float>(1 + 2 * i)) ++g_wrong;
      }
      h.push_back(median(th));
      if (kMpiBaseline) m.push_back(median(tm));
    }
    if (me == 0)
      std::printf(
          "process set {0, 1} of %d ranks, 4 B all-reduce: hvd %.1f us, %s (on a communicator "
          "of the two)\n",
          n, median(h), against_mpi(h, m).c_str());
    hvd::remove_process_set(pair);
  }
  // Summed by hvd, not by MPI_Allreduce: under TSan the program's own MPI call would be completed
  // by hvd's background thread (the top of this file).
  double wrong = static_cast<double>(g_wrong);
  hvd::allreduce(hvd::as_tensor(std::span<double>(&wrong, 1)), "bench.wrong", hvd::ReduceOp::kSum);
  if (me == 0) std::printf("wrong values: %.0f\n", wrong);
  finish();
  return wrong == 0 ? 0 : 1;
}
