#pragma once

// Environment resolvers: where this process sits in the job, as its launcher describes it in
// environment variables, read before (or without) MPI.
//
// Inside the runtime MPI is the source of truth; these resolvers serve hvdrun (which reads the
// SLURM allocation) and a cross-check at init(): describe_mismatch() compares a resolved
// Placement with MPI's view and the runtime logs any disagreement.
//
// Resolvers, and the order resolve_placement() tries them (first match wins):
//   1. Open MPI  (mpirun/orterun):  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//                                   (_NODE_RANK when _LOCAL_RANK is missing)
//   2. MPICH/PMI (hydra, srun --mpi=pmi2): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   3. SLURM     (srun):            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//                                   SLURM_STEP_NODELIST | SLURM_JOB_NODELIST,
//                                   SLURM_STEP_TASKS_PER_NODE | SLURM_TASKS_PER_NODE
// Why this order: a launcher's own variables describe the processes it started. `mpirun` run
// inside a SLURM allocation starts its daemons with srun, so the ranks also inherit SLURM_*
// variables that describe the daemons' step (one task per node), not the MPI job; and srun's PMI
// plugins set PMI_* next to SLURM_*. The most specific launcher therefore goes first, SLURM last.
//
// Each resolver returns std::nullopt when its rank variable is absent. When it is present but a
// value is malformed or inconsistent (rank >= size, a node list whose length differs from the task
// counts, ...) it throws hvd::InvalidArgumentError naming the variables and values.
// Pure functions of the lookup; thread-safe as long as the lookup is.

#include <optional>
#include <string>
#include <vector>

#include "cluster/hostfile.h"
#include "common/config.h"

namespace hvd::cluster {

struct Placement {
  std::string source;  // "Open MPI", "MPICH/PMI" or "SLURM"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::optional<int> cross_rank;   // index of this node, when the launcher says
  std::optional<int> cross_size;   // number of nodes, when known
  std::vector<std::string> nodes;  // node names in the launcher's order, when known
};

std::optional<Placement> resolve_open_mpi(const EnvLookup& env);
std::optional<Placement> resolve_mpich(const EnvLookup& env);
std::optional<Placement> resolve_slurm(const EnvLookup& env);

// Tries Open MPI, then MPICH/PMI, then SLURM (see above). std::nullopt when none applies, e.g. a
// process started without a launcher (a singleton).
std::optional<Placement> resolve_placement(const EnvLookup& env);

// The hosts and slots of the SLURM allocation this process runs in, for hvdrun: nodes from
// SLURM_JOB_NODELIST (or SLURM_NODELIST), tasks per node from SLURM_TASKS_PER_NODE (or, when that
// is unset, SLURM_NTASKS_PER_NODE for every node). std::nullopt outside an allocation
// (SLURM_JOB_ID unset). Throws InvalidArgumentError when the variables are missing or disagree.
std::optional<std::vector<HostSlots>> slurm_allocation(const EnvLookup& env);

// Compares a resolved placement with MPI's view of this process. Returns "" when they agree,
// otherwise one sentence naming the source, each differing quantity with both values, and a hint.
std::string describe_mismatch(const Placement& env, int mpi_rank, int mpi_size, int mpi_local_rank,
                              int mpi_local_size);

// "SLURM: rank 3/8, local 1/2, node 1/4 (n01,n02,n03,n04)" for logs.
std::string to_string(const Placement& p);

}  // namespace hvd::cluster
