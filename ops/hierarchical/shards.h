#pragma once

// Shard arithmetic of the hierarchical all-reduce: how a buffer of `count` elements is cut into one
// shard per local rank, and the topology check that decides whether the hierarchical algorithm
// applies at all. Pure functions, no MPI or CUDA, so they are unit-tested on their own.

#include <cstdint>
#include <string>
#include <vector>

namespace hvd::ops::hierarchical {

// Shards as even as possible: the first count % parts shards hold one element more. Shards may be
// empty (count < parts). Sums to count; offsets are the running sums.
struct Shards {
  std::vector<int64_t> counts;
  std::vector<int64_t> offsets;
};

inline Shards shard(int64_t count, int parts) {
  Shards s;
  if (parts < 1) parts = 1;
  s.counts.resize(static_cast<size_t>(parts));
  s.offsets.resize(static_cast<size_t>(parts));
  const int64_t base = count / parts, extra = count % parts;
  int64_t off = 0;
  for (int r = 0; r < parts; ++r) {
    s.counts[static_cast<size_t>(r)] = base + (r < extra ? 1 : 0);
    s.offsets[static_cast<size_t>(r)] = off;
    off += s.counts[static_cast<size_t>(r)];
  }
  return s;
}

// NCCL's ReduceScatter/AllGather need equal shards: the element count padded up to a multiple of
// `parts` (the padding is reduced like data and never copied out). 0 stays 0.
inline int64_t padded_count(int64_t count, int parts) {
  if (parts < 1) parts = 1;
  return (count + parts - 1) / parts * parts;
}

// Whether the hierarchical all-reduce applies to this topology, and the log line that says why.
struct HierarchicalPlan {
  bool use = false;
  std::string reason;
};

inline HierarchicalPlan plan_hierarchical(bool requested, int size, int local_size, int cross_size,
                                          bool homogeneous) {
  HierarchicalPlan p;
  const std::string shape = std::to_string(size) + " ranks, local_size " +
                            std::to_string(local_size) + ", " + std::to_string(cross_size) +
                            " node(s)";
  if (!requested) {
    p.reason = "hierarchical allreduce off (HVD_HIERARCHICAL_ALLREDUCE=0)";
  } else if (!homogeneous) {
    p.reason =
        "HVD_HIERARCHICAL_ALLREDUCE=1 ignored, using the flat allreduce: the nodes run different "
        "numbers of "
        "ranks (not homogeneous; " +
        shape +
        " on this rank's node). Start the same number of ranks on every node "
        "to use it.";
  } else if (cross_size <= 1 || local_size <= 1) {
    p.reason = "HVD_HIERARCHICAL_ALLREDUCE=1 ignored, using the flat allreduce: " + shape +
               (cross_size <= 1 ? "; with one node there is no cross-node step to save."
                                : "; with one rank per node there is no in-node step to save.");
  } else {
    p.use = true;
    p.reason = "hierarchical allreduce on: " + std::to_string(cross_size) + " nodes x " +
               std::to_string(local_size) +
               " ranks (reduce-scatter in the node, allreduce across nodes, allgather in the node)";
  }
  return p;
}

}  // namespace hvd::ops::hierarchical
