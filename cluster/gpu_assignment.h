#pragma once

// GPU assignment: which CUDA device this process uses. One GPU per process: the device is
// local_rank modulo the number of devices this process can see. The visible devices are whatever
// CUDA_VISIBLE_DEVICES (set by the user, or by SLURM's gres plugin) leaves visible: hvd never
// rewrites or re-indexes that variable, so device index i here is the i-th visible device, exactly
// as CUDA numbers it inside the process.
//
// Pure functions of their arguments and the lookup (no CUDA calls): the runtime asks CUDA for the
// visible count (cudaGetDeviceCount; 0 when there is no driver or device) and passes it in, so the
// logic is tested on machines without a GPU. Thread-safe as long as the lookup is.
//
// A process with no visible device is not an error by itself (CPU-only training is fine): the
// error comes only when a CUDA tensor is used (check_cuda_tensor()).

#include <string>

#include "hvd/tensor.h"
#include "common/config.h"

namespace hvd::cluster {

struct GpuAssignmentInput {
  int local_rank = 0;
  int local_size = 1;
  int visible_devices = 0;  // cudaGetDeviceCount() (0 when CUDA reports an error)
};

struct GpuAssignment {
  int device = -1;  // CUDA device index to use, -1 when none is visible
  int visible_devices = 0;
  bool shared = false;         // more local ranks than visible devices: several ranks per GPU
  std::string visible_source;  // "CUDA_VISIBLE_DEVICES=2,3", "SLURM_STEP_GPUS=2,3" or "all devices"
  std::string note;            // why there is no device, or why sharing one needs care; "" if fine
};

// Picks the device: local_rank % visible_devices (-1 with a note when none is visible). Reads
// CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS / SLURM_JOB_GPUS only to describe the choice and to
// warn (in `note`) about a list CUDA did not fully accept, an allocation SLURM did not enforce, or
// several ranks sharing a GPU. Throws InvalidArgumentError for an impossible placement (negative
// values, local_rank >= local_size).
GpuAssignment assign_gpu(const GpuAssignmentInput& in, const EnvLookup& env);

// Which backend CUDA tensors take. NCCL refuses two ranks of one communicator on one GPU of one
// host ("Duplicate GPU"; NCCL 2.30 and later accept them with NCCL_MULTI_RANK_GPU_ENABLE=1), so
// where ranks share a GPU they go through host-staged MPI, unless HVD_NCCL_SHARED_GPU asks for
// NCCL anyway. Then every rank of a node whose GPU is shared, before NCCL starts, sets
// NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30 and later), or else NCCL_HOSTID to an identity of its
// own, so that NCCL treats it as a host of its own (its network transport between them). NCCL
// communicators are collective, so the choice must be the same on every rank: `any_shared` is the
// OR of every rank's `GpuAssignment::shared`.
struct NcclPlan {
  bool use_nccl = false;
  bool multi_rank_gpu = false;  // set NCCL_MULTI_RANK_GPU_ENABLE=1 (unless the user set it)
  std::string host_id;          // the NCCL_HOSTID this rank sets ("": leave NCCL_HOSTID as it is)
};
// `nccl_version`: ncclGetVersion's code (23000 for 2.30.0; 0: unknown). `env` gives NCCL_HOSTID
// as the user set it (kept as the identity's prefix, so that ranks of different hosts stay apart);
// `hostname` this host's name, `rank` the global rank.
NcclPlan plan_nccl(GpuOperations ops, bool nccl_shared_gpu, const GpuAssignment& mine,
                   bool any_shared, int nccl_version, const EnvLookup& env,
                   const std::string& hostname, int rank);

// Checks that a CUDA tensor passed to `op` (e.g. "allreduce of 'fc1.weight'") lives on this
// process's device. Throws InvalidArgumentError naming the tensor's device, the assigned one and
// how to fix it. CPU tensors always pass.
void check_cuda_tensor(const GpuAssignment& a, const Device& device, const std::string& op);
// The same check without the "<op> failed: " prefix: "" when the device is fine, else the reason
// ("the tensor is on cuda:3 but this process was given cuda:1 ..."). The public API puts it in the
// request's error field, to which rank 0 adds "<op> of '<name>' failed: rank <r>: ".
std::string cuda_tensor_problem(const GpuAssignment& a, const Device& device);

// "cuda:1 (local rank 1 of 2, 2 visible devices, CUDA_VISIBLE_DEVICES=2,3)" for logs.
std::string to_string(const GpuAssignment& a, const GpuAssignmentInput& in);

}  // namespace hvd::cluster
