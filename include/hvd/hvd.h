#pragma once

// The umbrella header: everything a trainer needs.
#include "hvd/checkpoint.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "hvd/strategy.h"
#include "hvd/tensor.h"
#include "hvd/version.h"

namespace hvd {

// Starts the runtime: MPI_Init_thread unless MPI is already initialised (then MPI stays its owner's
// and hvd never finalises it), reads and validates the HVD_* configuration, learns the topology and
// starts the background thread. Idempotent. Collective: every rank must call it.
void init();
// Collective: completes or fails every pending handle, stops the background thread and finalises
// MPI if init() initialised it. Safe to call twice.
void shutdown();
bool initialized();

// Topology. All throw hvd::Error before init() and after shutdown().
int rank();
int size();
int local_rank();  // rank within this node
int local_size();  // ranks on this node
int cross_rank();  // index of this node among nodes (rank among the ranks with this local_rank)
int cross_size();  // number of nodes (ranks with this local_rank)
bool is_homogeneous();  // every node has the same local_size

}  // namespace hvd
