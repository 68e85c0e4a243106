#include "cluster/gpu_assignment.h"

#include <sstream>

#include "hvd/error.h"

namespace hvd::cluster {
namespace {

// Entries of a comma-separated device list ("0,1", "GPU-5c3e...,GPU-77a1...").
int count_entries(const std::string& list) {
  if (list.empty()) return 0;
  int n = 1;
  for (char c : list) n += c == ',' ? 1 : 0;
  return n;
}

std::string get(const EnvLookup& env, const char* name) {
  auto v = env(name);
  return v ? *v : std::string();
}

}  // namespace

GpuAssignment assign_gpu(const GpuAssignmentInput& in, const EnvLookup& env) {
  if (in.local_rank < 0 || in.local_size < 1 || in.local_rank >= in.local_size ||
      in.visible_devices < 0)
    throw InvalidArgumentError(
        "GPU assignment failed: local rank " + std::to_string(in.local_rank) + " of " +
        std::to_string(in.local_size) + " with " + std::to_string(in.visible_devices) +
        " visible devices is not a valid placement (need 0 <= local_rank < local_size and "
        "a count >= 0). This is a bug in the caller; please report it.");
  GpuAssignment a;
  a.visible_devices = in.visible_devices;
  const auto cvd = env("CUDA_VISIBLE_DEVICES");
  const std::string slurm_gpus =
      !get(env, "SLURM_STEP_GPUS").empty()  ? "SLURM_STEP_GPUS=" + get(env, "SLURM_STEP_GPUS")
      : !get(env, "SLURM_JOB_GPUS").empty() ? "SLURM_JOB_GPUS=" + get(env, "SLURM_JOB_GPUS")
                                            : std::string();
  if (cvd) {
    a.visible_source = "CUDA_VISIBLE_DEVICES=" + *cvd;
  } else if (!slurm_gpus.empty()) {
    a.visible_source = "all devices (" + slurm_gpus + ", CUDA_VISIBLE_DEVICES unset)";
  } else {
    a.visible_source = "all devices";
  }

  std::ostringstream note;
  if (in.visible_devices == 0) {
    note << "no CUDA device is visible to this process (" << a.visible_source
         << "); CPU tensors work, CUDA tensors fail. Run on a node with GPUs, or check "
            "CUDA_VISIBLE_DEVICES and "
            "the job's GPU request (e.g. srun --gpus-per-task=1).";
    a.note = note.str();
    return a;
  }
  a.device = in.local_rank % in.visible_devices;
  a.shared = in.local_size > in.visible_devices;
  if (a.shared) {
    note << in.local_size << " ranks on this node share " << in.visible_devices
         << " visible device(s), so several ranks use one GPU. NCCL cannot run two ranks on one "
            "GPU: set "
            "HVD_GPU_OPERATIONS=MPI (host staging), or start one rank per GPU.";
  } else if (cvd && count_entries(*cvd) > 0 && count_entries(*cvd) != in.visible_devices) {
    note << "CUDA_VISIBLE_DEVICES=" << *cvd << " lists " << count_entries(*cvd)
         << " device(s) but CUDA sees " << in.visible_devices
         << " (CUDA stops at the first entry that names no device); check the list.";
  } else if (!cvd && !slurm_gpus.empty()) {
    note << "SLURM allocated GPUs (" << slurm_gpus
         << ") but CUDA_VISIBLE_DEVICES is unset, so every device of the "
         << "node is visible and this process may use one outside its allocation; request GPUs "
            "with --gres/--gpus "
            "so that SLURM sets CUDA_VISIBLE_DEVICES.";
  }
  a.note = note.str();
  return a;
}

NcclPlan plan_nccl(GpuOperations ops, bool nccl_shared_gpu, const GpuAssignment& mine,
                   bool any_shared, int nccl_version, const EnvLookup& env,
                   const std::string& hostname, int rank) {
  NcclPlan plan;
  plan.use_nccl = ops == GpuOperations::kNccl && (!any_shared || nccl_shared_gpu);
  if (!plan.use_nccl || !mine.shared || mine.device < 0) return plan;
  if (nccl_version >= 23000) {
    plan.multi_rank_gpu = true;
  } else {
    const std::string base = get(env, "NCCL_HOSTID");
    plan.host_id = (base.empty() ? hostname : base) + ".hvd-rank" + std::to_string(rank);
  }
  return plan;
}

std::string cuda_tensor_problem(const GpuAssignment& a, const Device& device) {
  if (device.kind != Device::kCUDA) return "";
  if (a.device < 0)
    return "the tensor is on " + device_name(device) +
           " but this process has no CUDA device: " + a.note;
  if (device.index != a.device)
    return "the tensor is on " + device_name(device) + " but this process was given " +
           device_name(Device::cuda(a.device)) + " (local rank modulo the " +
           std::to_string(a.visible_devices) + " visible device(s), " + a.visible_source +
           "). Allocate the tensor on cuda:" + std::to_string(a.device) +
           " (hvd::local_rank() % device count), or pass a CPU tensor.";
  return "";
}

void check_cuda_tensor(const GpuAssignment& a, const Device& device, const std::string& op) {
  const std::string problem = cuda_tensor_problem(a, device);
  if (!problem.empty()) throw InvalidArgumentError(op + " failed: " + problem);
}

std::string to_string(const GpuAssignment& a, const GpuAssignmentInput& in) {
  std::ostringstream s;
  s << (a.device < 0 ? std::string("no device") : device_name(Device::cuda(a.device)))
    << " (local rank " << in.local_rank << " of " << in.local_size << ", " << a.visible_devices
    << " visible device(s), " << a.visible_source << ")";
  if (!a.note.empty()) s << ": " << a.note;
  return s.str();
}

}  // namespace hvd::cluster
