#pragma once

// The shape of the control plane's tree (comm/mpi_control_channel.h, HVD_CONTROL_TOPOLOGY=tree):
// a binomial tree rooted at rank 0, as MPI libraries use for reduce and broadcast.
//
//   parent(r)   = r with its lowest set bit cleared            (rank 0 has none)
//   children(r) = r + 2^k for every 2^k below r's lowest set bit (every 2^k for rank 0), < size
//
// With 8 ranks: 0 -> {1, 2, 4}, 2 -> {3}, 4 -> {5, 6}, 6 -> {7}. Rank 0 has ceil(log2 size)
// children, no rank has more, and the tree is ceil(log2 size) levels deep, so one AND up the tree
// and its result back down costs rank 0 2 * ceil(log2 size) messages (the star: 2 * (size - 1)),
// and every rank at most as many. The subtree of r is the ranks r .. r + lowbit(r) - 1 (below
// size): the ranks whose bits reach the root through r.
//
// Pure functions of (rank, size); no MPI. Thread safety: none needed.

#include <algorithm>
#include <vector>

namespace hvd::comm {

// -1 for rank 0.
inline int tree_parent(int rank) { return rank == 0 ? -1 : rank & (rank - 1); }

// The ranks that send their bits to `rank`, in increasing order.
inline std::vector<int> tree_children(int rank, int size) {
  std::vector<int> out;
  const int low = rank == 0 ? 0 : (rank & -rank);
  for (int step = 1; (rank == 0 || step < low) && rank + step < size && step > 0; step <<= 1)
    out.push_back(rank + step);
  return out;
}

// `rank` and every rank below it, in increasing order.
inline std::vector<int> tree_subtree(int rank, int size) {
  std::vector<int> out;
  const long end =
      rank == 0 ? size : std::min<long>(size, static_cast<long>(rank) + (rank & -rank));
  for (long r = rank; r < end; ++r) out.push_back(static_cast<int>(r));
  return out;
}

// The most levels below rank 0 (0 for one rank): ceil(log2 size). A rank's level is its number of
// set bits, so the bound is reached when size is a power of 2 (rank size - 1).
inline int tree_depth(int size) {
  int d = 0;
  while ((1L << d) < size) ++d;
  return d;
}

}  // namespace hvd::comm
