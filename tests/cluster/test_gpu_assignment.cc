// GPU assignment (cluster/gpu_assignment.h) with faked device counts and environments: the device
// is local_rank % visible devices under every combination of CUDA_VISIBLE_DEVICES and SLURM GPU
// variables, the environment is only read (never rewritten), and a CUDA tensor is rejected with a
// clear message when there is no device or it is on another rank's device.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cluster/gpu_assignment.h"
#include "hvd/error.h"

namespace hvd::cluster {
namespace {

using Env = std::map<std::string, std::string>;

struct FakeEnv {
  Env vars;
  mutable int lookups = 0;
  EnvLookup lookup() const {
    return [this](const std::string& k) -> std::optional<std::string> {
      ++lookups;
      auto it = vars.find(k);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

GpuAssignment assign(int local_rank, int local_size, int visible, const Env& env = {}) {
  FakeEnv f{env};
  return assign_gpu({local_rank, local_size, visible}, f.lookup());
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(GpuAssignment, DeviceIsLocalRankModuloVisibleCountForEveryCombination) {
  const Env envs[] = {{},
                      {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}},
                      {{"CUDA_VISIBLE_DEVICES", "6,7"}},
                      {{"SLURM_STEP_GPUS", "2,3"}, {"CUDA_VISIBLE_DEVICES", "2,3"}},
                      {{"SLURM_JOB_GPUS", "1"}}};
  for (const Env& env : envs) {
    for (int visible = 1; visible <= 8; ++visible) {
      for (int local_size = 1; local_size <= 9; ++local_size) {
        for (int lr = 0; lr < local_size; ++lr) {
          GpuAssignment a = assign(lr, local_size, visible, env);
          // Computed independently: ranks fill the visible devices round-robin.
          int want = lr;
          while (want >= visible) want -= visible;
          EXPECT_EQ(a.device, want)
              << "local rank " << lr << "/" << local_size << ", " << visible << " visible";
          EXPECT_EQ(a.shared, local_size > visible);
          EXPECT_EQ(a.visible_devices, visible);
        }
      }
    }
  }
}

TEST(GpuAssignment, RespectsCudaVisibleDevicesWithoutReindexing) {
  // SLURM gave GPUs 6 and 7: inside the process they are devices 0 and 1, and we use 0 and 1.
  GpuAssignment a0 = assign(0, 2, 2, {{"CUDA_VISIBLE_DEVICES", "6,7"}});
  GpuAssignment a1 = assign(1, 2, 2, {{"CUDA_VISIBLE_DEVICES", "6,7"}});
  EXPECT_EQ(a0.device, 0);
  EXPECT_EQ(a1.device, 1);
  EXPECT_EQ(a1.visible_source, "CUDA_VISIBLE_DEVICES=6,7");
  EXPECT_TRUE(a1.note.empty()) << a1.note;
}

TEST(GpuAssignment, OnlyReadsTheEnvironment) {
  // The lookup is the only access to the environment and it is read-only by construction; check
  // that it is consulted (so the description is real) and that the fake is unchanged afterwards.
  FakeEnv f{{{"CUDA_VISIBLE_DEVICES", "3"}}};
  GpuAssignment a = assign_gpu({0, 1, 1}, f.lookup());
  EXPECT_GT(f.lookups, 0);
  EXPECT_EQ(f.vars.size(), 1u);
  EXPECT_EQ(f.vars.at("CUDA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(a.device, 0);
}

TEST(GpuAssignment, NoDeviceIsNotAnErrorUntilACudaTensorIsUsed) {
  for (const Env& env :
       {Env{}, Env{{"CUDA_VISIBLE_DEVICES", ""}}, Env{{"CUDA_VISIBLE_DEVICES", "-1"}}}) {
    GpuAssignment a;
    EXPECT_NO_THROW(a = assign(1, 4, 0, env));
    EXPECT_EQ(a.device, -1);
    EXPECT_FALSE(a.shared);
    EXPECT_TRUE(has(a.note, "no CUDA device")) << a.note;
    EXPECT_NO_THROW(check_cuda_tensor(a, Device::cpu(), "allreduce of 'w'"));
    try {
      check_cuda_tensor(a, Device::cuda(0), "allreduce of 'w'");
      ADD_FAILURE() << "a CUDA tensor without a device must fail";
    } catch (const InvalidArgumentError& e) {
      const std::string m = e.what();
      EXPECT_TRUE(has(m, "allreduce of 'w' failed")) << m;
      EXPECT_TRUE(has(m, "cuda:0")) << m;
      EXPECT_TRUE(has(m, "no CUDA device")) << m;
      EXPECT_TRUE(has(m, "CUDA_VISIBLE_DEVICES")) << m;
    }
  }
}

TEST(GpuAssignment, TensorOnAnotherRanksDeviceIsRejected) {
  GpuAssignment a = assign(1, 4, 4, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}});
  ASSERT_EQ(a.device, 1);
  EXPECT_NO_THROW(check_cuda_tensor(a, Device::cuda(1), "broadcast of 'x'"));
  try {
    check_cuda_tensor(a, Device::cuda(3), "broadcast of 'x'");
    ADD_FAILURE() << "a tensor on cuda:3 must be rejected on a rank given cuda:1";
  } catch (const InvalidArgumentError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(has(m, "on cuda:3")) << m;
    EXPECT_TRUE(has(m, "given cuda:1")) << m;
    EXPECT_TRUE(has(m, "CUDA_VISIBLE_DEVICES=0,1,2,3")) << m;
  }
}

TEST(GpuAssignment, SharedGpuSuggestsMpiStaging) {
  GpuAssignment a = assign(3, 4, 2);
  EXPECT_EQ(a.device, 1);
  EXPECT_TRUE(a.shared);
  EXPECT_TRUE(has(a.note, "HVD_GPU_OPERATIONS=MPI")) << a.note;
  GpuAssignment single = assign(1, 2, 1);
  EXPECT_EQ(single.device, 0);
  EXPECT_TRUE(single.shared);
}

// Which backend CUDA tensors take, and how a rank on a shared GPU gets NCCL to accept it.
TEST(GpuAssignment, NcclPlanKeepsSharedGpusOnMpiUnlessAskedAndThenLetsNcclAcceptEachRank) {
  const GpuAssignment shared = assign(1, 2, 1), alone = assign(0, 1, 1), none = assign(0, 2, 0);
  const auto kNccl = GpuOperations::kNccl;
  const int v228 = 22803, v230 = 23000;
  FakeEnv empty;
  // No rank shares a GPU: NCCL, nothing set.
  NcclPlan p = plan_nccl(kNccl, false, alone, false, v228, empty.lookup(), "node7", 0);
  EXPECT_TRUE(p.use_nccl);
  EXPECT_FALSE(p.multi_rank_gpu);
  EXPECT_EQ(p.host_id, "");
  // HVD_GPU_OPERATIONS=MPI wins over everything.
  for (bool ask : {false, true})
    EXPECT_FALSE(
        plan_nccl(GpuOperations::kMpi, ask, shared, true, v230, empty.lookup(), "h", 1).use_nccl);
  // Some rank shares its GPU: every rank takes MPI (a NCCL communicator is collective), even one
  // that has a GPU of its own, whatever NCCL's version...
  for (int v : {v228, v230}) {
    EXPECT_FALSE(plan_nccl(kNccl, false, shared, true, v, empty.lookup(), "h", 1).use_nccl);
    EXPECT_FALSE(plan_nccl(kNccl, false, alone, true, v, empty.lookup(), "h", 0).use_nccl);
  }
  // ...unless HVD_NCCL_SHARED_GPU=1: then every rank takes NCCL. Before NCCL 2.30 the sharing
  // ranks (only they) get distinct host identities, built on the host's name...
  p = plan_nccl(kNccl, true, shared, true, v228, empty.lookup(), "node7", 1);
  EXPECT_TRUE(p.use_nccl);
  EXPECT_FALSE(p.multi_rank_gpu);
  EXPECT_EQ(p.host_id, "node7.hvd-rank1");
  EXPECT_NE(plan_nccl(kNccl, true, assign(0, 2, 1), true, v228, empty.lookup(), "node7", 0).host_id,
            p.host_id);
  p = plan_nccl(kNccl, true, alone, true, v228, empty.lookup(), "node8", 2);
  EXPECT_TRUE(p.use_nccl);
  EXPECT_EQ(p.host_id, "");
  // ...an unknown version (0) is treated as an old one...
  EXPECT_EQ(plan_nccl(kNccl, true, shared, true, 0, empty.lookup(), "n", 3).host_id, "n.hvd-rank3");
  // ...and from 2.30 they ask NCCL to accept several ranks per GPU, keeping their host.
  p = plan_nccl(kNccl, true, shared, true, v230, empty.lookup(), "node7", 1);
  EXPECT_TRUE(p.use_nccl);
  EXPECT_TRUE(p.multi_rank_gpu);
  EXPECT_EQ(p.host_id, "");
  EXPECT_FALSE(plan_nccl(kNccl, true, alone, true, v230, empty.lookup(), "h", 0).multi_rank_gpu);
  // No visible device: nothing to hand NCCL.
  p = plan_nccl(kNccl, true, none, true, v228, empty.lookup(), "h", 0);
  EXPECT_EQ(p.host_id, "");
  EXPECT_FALSE(p.multi_rank_gpu);
  // A NCCL_HOSTID the user set stays the prefix (ranks of two hosts stay apart).
  FakeEnv user{{{"NCCL_HOSTID", "rack3-node9"}}};
  EXPECT_EQ(plan_nccl(kNccl, true, shared, true, v228, user.lookup(), "h", 5).host_id,
            "rack3-node9.hvd-rank5");
}

TEST(GpuAssignment, NotesAListCudaDidNotFullyAccept) {
  // "0,1,9": CUDA stops at the entry naming no device and sees 2.
  GpuAssignment a = assign(0, 2, 2, {{"CUDA_VISIBLE_DEVICES", "0,1,9"}});
  EXPECT_EQ(a.device, 0);
  EXPECT_TRUE(has(a.note, "lists 3 device(s) but CUDA sees 2")) << a.note;
}

TEST(GpuAssignment, NotesSlurmGpusWithoutCudaVisibleDevices) {
  GpuAssignment step = assign(0, 1, 8, {{"SLURM_STEP_GPUS", "4"}, {"SLURM_JOB_GPUS", "4,5"}});
  EXPECT_EQ(step.device, 0);
  EXPECT_TRUE(has(step.note, "SLURM_STEP_GPUS=4")) << step.note;  // the step's list wins
  EXPECT_TRUE(has(step.visible_source, "all devices")) << step.visible_source;
  GpuAssignment job = assign(0, 1, 8, {{"SLURM_JOB_GPUS", "4,5"}});
  EXPECT_TRUE(has(job.note, "SLURM_JOB_GPUS=4,5")) << job.note;
  GpuAssignment enforced =
      assign(0, 1, 1, {{"SLURM_STEP_GPUS", "4"}, {"CUDA_VISIBLE_DEVICES", "4"}});
  EXPECT_TRUE(enforced.note.empty()) << enforced.note;
}

TEST(GpuAssignment, ImpossiblePlacementsThrow) {
  EXPECT_THROW(assign(-1, 2, 2), InvalidArgumentError);
  EXPECT_THROW(assign(2, 2, 2), InvalidArgumentError);
  EXPECT_THROW(assign(0, 0, 2), InvalidArgumentError);
  EXPECT_THROW(assign(0, 1, -1), InvalidArgumentError);
}

TEST(GpuAssignment, DescriptionNamesDeviceRankAndSource) {
  GpuAssignmentInput in{1, 2, 2};
  FakeEnv f{{{"CUDA_VISIBLE_DEVICES", "2,3"}}};
  const std::string s = to_string(assign_gpu(in, f.lookup()), in);
  EXPECT_EQ(s, "cuda:1 (local rank 1 of 2, 2 visible device(s), CUDA_VISIBLE_DEVICES=2,3)");
}

}  // namespace
}  // namespace hvd::cluster
