// The control plane's per-cycle coordination cost (docs/scaling.md): runs the controller's
// bit-vector AND (comm::MpiControlChannel::star_and, one per negotiation cycle: what an idle or
// fully cached cycle costs) back to back over MPI_COMM_WORLD, with the star and the tree, in
// interleaved rounds, and prints per topology:
//   us/cycle   rank 0's time per exchange and the slowest rank's (median over rounds)
//   rank 0     messages and bytes it sent + received per cycle (the channel's counters)
//   max rank   the most messages any rank handled per cycle
// Every cycle ANDs vectors in which each rank clears its own bits; every rank checks the result,
// and the wrong-value count (summed over ranks) is printed: a non-zero count fails the run.
//
//   mpirun --oversubscribe --bind-to none -np 8 build/tests/bench/control_bench --cycles 2000
//
// Output: one "ROW" line per round and topology (for scripts/scaling-plot), then a summary table.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/control_tree.h"
#include "comm/mpi_control_channel.h"

namespace {

using hvd::comm::ControlTopology;
using hvd::comm::MpiControlChannel;

struct Options {
  int cycles = 1000;
  int warmup = 100;
  int rounds = 3;
  int words = 33;  // 1 flag word + hit and valid bits of a 1024-entry response cache (16 + 16)
  std::vector<ControlTopology> topologies = {ControlTopology::kStar, ControlTopology::kTree};
};

[[noreturn]] void usage(int rank, const std::string& why) {
  if (rank == 0)
    std::fprintf(stderr,
                 "control_bench: %s\nusage: control_bench [--cycles N] [--warmup N] [--rounds N] "
                 "[--words N] [--topology star|tree|both]\n",
                 why.c_str());
  MPI_Finalize();
  std::exit(2);
}

Options parse(int argc, char** argv, int rank) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(rank, "'" + a + "' needs a value");
    const std::string v = argv[++i];
    auto number = [&](int min) {
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || x < min || x > 100000000)
        usage(rank, a + " '" + v + "' is not an integer >= " + std::to_string(min));
      return static_cast<int>(x);
    };
    if (a == "--cycles") {
      o.cycles = number(1);
    } else if (a == "--warmup") {
      o.warmup = number(0);
    } else if (a == "--rounds") {
      o.rounds = number(1);
    } else if (a == "--words") {
      o.words = number(1);
    } else if (a == "--topology") {
      if (v == "both") continue;
      try {
        o.topologies = {hvd::comm::parse_control_topology(v)};
      } catch (const std::exception& e) {
        usage(rank, std::string("--topology: ") + e.what());
      }
    } else {
      usage(rank, "unknown argument '" + a + "'");
    }
  }
  return o;
}

// Cycle c: every word all ones except, for each rank r, bit (r + c) % 64 of word (r + c) % words.
void fill(std::vector<uint64_t>& bits, int rank, int cycle) {
  std::fill(bits.begin(), bits.end(), ~uint64_t{0});
  const int words = static_cast<int>(bits.size());
  bits[(rank + cycle) % words] &= ~(uint64_t{1} << ((rank + cycle) % 64));
}
std::vector<uint64_t> expected(int size, int words, int cycle) {
  std::vector<uint64_t> want(words, ~uint64_t{0});
  for (int r = 0; r < size; ++r) want[(r + cycle) % words] &= ~(uint64_t{1} << ((r + cycle) % 64));
  return want;
}

struct Sample {
  double us_rank0 = 0, us_max = 0;
  double msgs_rank0 = 0, bytes_rank0 = 0, msgs_max = 0;
  long wrong = 0;
};

Sample run(ControlTopology topology, const Options& o, MPI_Comm comm, int rank, int size) {
  MpiControlChannel channel(comm, topology);
  hvd::comm::StarPatience patience;  // 60 s, then every silent rank is lost (no probes here)
  patience.first_seconds = patience.again_seconds = 60;
  std::vector<uint64_t> bits(o.words);
  long wrong = 0;
  auto exchange = [&](int cycle) {
    fill(bits, rank, cycle);
    const hvd::comm::StarOutcome out = channel.star_and(bits, patience);
    if (out.status != hvd::comm::StarOutcome::Status::kDone) {
      std::fprintf(stderr, "rank %d: cycle %d: a rank went silent for 60 s\n", rank, cycle);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    wrong += bits != expected(size, o.words, cycle);
  };
  for (int c = 0; c < o.warmup; ++c) exchange(c);
  MPI_Barrier(comm);
  const hvd::comm::ControlCounters before = channel.counters();
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < o.cycles; ++c) exchange(o.warmup + c);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      o.cycles;
  const hvd::comm::ControlCounters& after = channel.counters();
  const double msgs = static_cast<double>(after.messages_sent + after.messages_received -
                                          before.messages_sent - before.messages_received) /
                      o.cycles;
  const double bytes = static_cast<double>(after.bytes_sent + after.bytes_received -
                                           before.bytes_sent - before.bytes_received) /
                       o.cycles;
  channel.finish(5);
  MPI_Barrier(comm);
  Sample s;
  double mine[2] = {us, msgs}, most[2] = {0, 0};
  MPI_Reduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, 0, comm);
  MPI_Reduce(&wrong, &s.wrong, 1, MPI_LONG, MPI_SUM, 0, comm);
  s.us_rank0 = us;
  s.us_max = most[0];
  s.msgs_rank0 = msgs;
  s.bytes_rank0 = bytes;
  s.msgs_max = most[1];
  return s;
}

const char* name(ControlTopology t) { return t == ControlTopology::kStar ? "star" : "tree"; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options o = parse(argc, argv, rank);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<std::vector<Sample>> samples(o.topologies.size());
  long wrong = 0;
  for (int round = 0; round < o.rounds; ++round)
    for (size_t t = 0; t < o.topologies.size(); ++t) {
      // Alternate which topology goes first, so that neither always runs on a warmer machine.
      const size_t which = round % 2 ? o.topologies.size() - 1 - t : t;
      const Sample s = run(o.topologies[which], o, comm, rank, size);
      samples[which].push_back(s);
      wrong += s.wrong;
      if (rank == 0)
        std::printf(
            "ROW topology=%s np=%d round=%d cycles=%d words=%d us_rank0=%.3f us_max=%.3f "
            "msgs_rank0=%.3f bytes_rank0=%.1f msgs_max=%.3f wrong=%ld\n",
            name(o.topologies[which]), size, round, o.cycles, o.words, s.us_rank0, s.us_max,
            s.msgs_rank0, s.bytes_rank0, s.msgs_max, s.wrong);
    }
  if (rank == 0) {
    std::printf("\n%d ranks, %d cycles x %d rounds (interleaved), %d-word vectors; medians:\n",
                size, o.cycles, o.rounds, o.words);
    std::printf("%-9s %14s %14s %14s %16s %14s\n", "topology", "us/cycle r0", "us/cycle max",
                "msgs/cycle r0", "bytes/cycle r0", "msgs/cycle max");
    for (size_t t = 0; t < o.topologies.size(); ++t) {
      std::vector<double> a, b, c, d, e;
      for (const Sample& s : samples[t]) {
        a.push_back(s.us_rank0);
        b.push_back(s.us_max);
        c.push_back(s.msgs_rank0);
        d.push_back(s.bytes_rank0);
        e.push_back(s.msgs_max);
      }
      std::printf("%-9s %14.2f %14.2f %14.2f %16.1f %14.2f\n", name(o.topologies[t]), median(a),
                  median(b), median(c), median(d), median(e));
    }
    std::printf("tree depth <= %d; wrong values: %ld: %s\n", hvd::comm::tree_depth(size), wrong,
                wrong == 0 ? "OK" : "FAILED");
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;
}
