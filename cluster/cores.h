#pragma once

// How many cores a rank may count as its own, from the CPU affinity masks of the ranks of its node:
// the cores of its own mask, divided among the ranks whose masks share any of them (itself
// included). It decides where hvd's threads may spin or help (HVD_WAIT_POLL_US, HVD_COPY_THREADS).
//
//   mpirun --bind-to none, 2 ranks, 16 cores:        16 / 2 = 8 each
//   --bind-to core, 2 ranks:                          1 each (the masks are disjoint)
//   SLURM --cpus-per-task=8, 8 ranks on 64 cores:     8 each (disjoint masks of 8); dividing the
//                                                     mask by the node's 8 ranks said 1
//   --bind-to socket, 4 ranks on 2 sockets of 8:      8 / 2 = 4 each
//
// A pure function of the masks (the runtime gathers them over the node's communicator at init:
// comm/mpi_context.cc). At least 1.

#include <sched.h>

#include <vector>

namespace hvd::cluster {

int cores_per_rank(const cpu_set_t& mine, const std::vector<cpu_set_t>& node);

}  // namespace hvd::cluster
