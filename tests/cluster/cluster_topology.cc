// cluster_topology: checks hvd's view of the cluster (local_rank, local_size, cross_rank,
// cross_size, is_homogeneous) against values every rank computes itself from the hostnames of all
// ranks, on the simulated cluster (cluster/sim/hvd-sim) where each node has its own hostname.
//
//   cluster_topology NODE_SIZES      e.g. "2,1": node 1 (in order of first rank) has 2 ranks,
//                                    node 2 has 1; the ranks must really have landed that way
//
// Expected values, from the hostnames (MPI_Get_processor_name, gathered with MPI_Allgather), by
// the definitions of include/hvd/hvd.h:
//   local_rank  = ranks below mine with my hostname
//   local_size  = ranks with my hostname
//   cross_rank  = ranks below mine with my local_rank
//   cross_size  = ranks with my local_rank (nodes that have a rank of that local rank)
//   homogeneous = every node has the same number of ranks
// Then a sum all-reduce of the world ranks across the nodes (n(n-1)/2 everywhere).
// Every rank prints its line; exit status 0 when every rank agrees, 1 otherwise (any rank).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

std::vector<int> parse_sizes(const char* text) {
  std::vector<int> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) sizes.push_back(std::stoi(item));
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s NODE_SIZES (e.g. 2,1)\n", argv[0]);
    return 2;
  }
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> host(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    host[r] = std::string(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);

  // Nodes in order of their first rank, and each rank's local rank.
  std::vector<std::string> nodes;
  std::vector<int> node_size, local_rank_of(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    size_t n = 0;
    while (n < nodes.size() && nodes[n] != host[r]) ++n;
    if (n == nodes.size()) {
      nodes.push_back(host[r]);
      node_size.push_back(0);
    }
    local_rank_of[r] = node_size[n]++;
  }
  size_t my_node = 0;
  while (nodes[my_node] != host[rank]) ++my_node;
  int cross_rank = 0, cross_size = 0;
  for (int r = 0; r < size; ++r) {
    if (local_rank_of[r] != local_rank_of[rank]) continue;
    ++cross_size;
    if (r < rank) ++cross_rank;
  }
  bool homogeneous = true;
  for (int s : node_size) homogeneous = homogeneous && s == node_size[0];

  std::string problems;
  auto check = [&](const char* what, long got, long want) {
    if (got != want)
      problems += std::string(" ") + what + "=" + std::to_string(got) + " (want " +
                  std::to_string(want) + ")";
  };
  const std::vector<int> want_sizes = parse_sizes(argv[1]);
  if (node_size != want_sizes) {
    std::string got;
    for (size_t i = 0; i < node_size.size(); ++i)
      got += (i ? "," : "") + std::to_string(node_size[i]);
    problems += " the ranks landed on nodes of sizes " + got + ", not " + argv[1] + " (check -H)";
  }
  check("local_rank", hvd::local_rank(), local_rank_of[rank]);
  check("local_size", hvd::local_size(), node_size[my_node]);
  check("cross_rank", hvd::cross_rank(), cross_rank);
  check("cross_size", hvd::cross_size(), cross_size);
  check("is_homogeneous", hvd::is_homogeneous(), homogeneous);

  std::vector<int64_t> sum{rank};
  hvd::allreduce(sum, "cluster_topology.sum", hvd::ReduceOp::kSum);
  check("allreduce sum of ranks", static_cast<long>(sum[0]),
        static_cast<long>(size) * (size - 1) / 2);

  std::printf("rank %d on %s: local %d/%d cross %d/%d %s%s%s\n", rank, name, hvd::local_rank(),
              hvd::local_size(), hvd::cross_rank(), hvd::cross_size(),
              hvd::is_homogeneous() ? "homogeneous" : "not homogeneous",
              problems.empty() ? ": OK" : ": WRONG:", problems.c_str());
  std::fflush(stdout);
  int bad = problems.empty() ? 0 : 1, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  hvd::shutdown();
  return any_bad;
}
