// Environment resolvers under faked environments: Open MPI, MPICH/PMI, SLURM, their order, the
// SLURM allocation reader and the MPI cross-check message.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cluster/env_resolver.h"
#include "hvd/error.h"
#include "tests/support/test_util.h"

namespace hvd::cluster {
namespace {

using Env = std::map<std::string, std::string>;

using hvdtest::fake_env;

using hvdtest::error_of;

const Env kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "5"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                      {"OMPI_COMM_WORLD_NODE_RANK", "1"}};

// srun -N 3 -n 5 with tasks 2,2,1: task 4 is the only one on the third node.
const Env kSlurm = {{"SLURM_PROCID", "4"},
                    {"SLURM_NTASKS", "5"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NODEID", "2"},
                    {"SLURM_STEP_NODELIST", "n[07-08],login3"},
                    {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                    {"SLURM_JOB_NODELIST", "n[07-09],login3"},
                    {"SLURM_TASKS_PER_NODE", "2(x4)"}};

TEST(OpenMpiResolver, ReadsWorldAndLocal) {
  auto p = resolve_open_mpi(fake_env(kOpenMpi));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "Open MPI");
  EXPECT_EQ(p->rank, 5);
  EXPECT_EQ(p->size, 8);
  EXPECT_EQ(p->local_rank, 1);
  EXPECT_EQ(p->local_size, 4);
  EXPECT_FALSE(p->cross_rank);
  EXPECT_TRUE(p->nodes.empty());
}

TEST(OpenMpiResolver, NodeRankStandsInForMissingLocalRank) {
  Env e = kOpenMpi;
  e.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  e["OMPI_COMM_WORLD_NODE_RANK"] = "3";
  auto p = resolve_open_mpi(fake_env(e));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_rank, 3);
}

TEST(OpenMpiResolver, AbsentWithoutRankVariable) {
  EXPECT_FALSE(resolve_open_mpi(fake_env({})));
  EXPECT_FALSE(resolve_open_mpi(fake_env({{"OMPI_COMM_WORLD_SIZE", "2"}})));
}

TEST(OpenMpiResolver, SingleRankJob) {
  auto p = resolve_open_mpi(fake_env({{"OMPI_COMM_WORLD_RANK", "0"},
                                      {"OMPI_COMM_WORLD_SIZE", "1"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->size, 1);
}

TEST(OpenMpiResolver, MalformedOrInconsistentValuesNameTheVariable) {
  Env e = kOpenMpi;
  e["OMPI_COMM_WORLD_RANK"] = "five";
  EXPECT_NE(error_of([&] { resolve_open_mpi(fake_env(e)); }).find("OMPI_COMM_WORLD_RANK='five'"),
            std::string::npos);
  e = kOpenMpi;
  e["OMPI_COMM_WORLD_RANK"] = "8";
  std::string msg = error_of([&] { resolve_open_mpi(fake_env(e)); });
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_RANK=8 is not below OMPI_COMM_WORLD_SIZE=8"),
            std::string::npos)
      << msg;
  e = kOpenMpi;
  e.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_NE(error_of([&] { resolve_open_mpi(fake_env(e)); }).find("OMPI_COMM_WORLD_SIZE is not"),
            std::string::npos);
  e = kOpenMpi;
  e["OMPI_COMM_WORLD_LOCAL_SIZE"] = "0";
  EXPECT_FALSE(error_of([&] { resolve_open_mpi(fake_env(e)); }).empty());
}

TEST(MpichResolver, ReadsPmiAndHydraLocalVariables) {
  auto p = resolve_mpich(fake_env(
      {{"PMI_RANK", "3"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "3"}}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "MPICH/PMI");
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->size, 6);
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->local_size, 3);
}

TEST(MpichResolver, UnderSrunTakesLocalViewFromSlurm) {
  Env e = kSlurm;
  e["PMI_RANK"] = "4";
  e["PMI_SIZE"] = "5";
  auto p = resolve_mpich(fake_env(e));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "MPICH/PMI");
  EXPECT_EQ(p->rank, 4);
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->local_size, 1);
  EXPECT_EQ(p->cross_rank, 2);
}

TEST(MpichResolver, WithoutAnyLocalInformationIsAbsent) {
  EXPECT_FALSE(resolve_mpich(fake_env({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}})));
}

TEST(SlurmResolver, StepVariablesGiveNodeAndLocalSize) {
  auto p = resolve_slurm(fake_env(kSlurm));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "SLURM");
  EXPECT_EQ(p->rank, 4);
  EXPECT_EQ(p->size, 5);
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->local_size, 1);  // third entry of 2,2,1
  EXPECT_EQ(p->cross_rank, 2);
  EXPECT_EQ(p->cross_size, 3);
  EXPECT_EQ(p->nodes, (std::vector<std::string>{"n07", "n08", "login3"}));
}

TEST(SlurmResolver, JobVariablesWhenNoStep) {
  Env e = {{"SLURM_PROCID", "3"},
           {"SLURM_NTASKS", "6"},
           {"SLURM_LOCALID", "1"},
           {"SLURM_NODEID", "1"},
           {"SLURM_JOB_NODELIST", "b04-[09-11]"},
           {"SLURM_TASKS_PER_NODE", "2(x3)"}};
  auto p = resolve_slurm(fake_env(e));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_size, 2);
  EXPECT_EQ(p->cross_rank, 1);
  EXPECT_EQ(p->nodes, (std::vector<std::string>{"b04-09", "b04-10", "b04-11"}));
}

TEST(SlurmResolver, UniformTasksWithoutNodeId) {
  Env e = {{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "4"},
           {"SLURM_LOCALID", "0"},
           {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
  auto p = resolve_slurm(fake_env(e));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_size, 2);
  EXPECT_FALSE(p->cross_rank);
  EXPECT_EQ(p->cross_size, 2);
}

TEST(SlurmResolver, InconsistenciesAreErrors) {
  Env e = kSlurm;
  e["SLURM_STEP_TASKS_PER_NODE"] = "2,2";  // 3 nodes, 2 counts
  std::string msg = error_of([&] { resolve_slurm(fake_env(e)); });
  EXPECT_NE(msg.find("names 3 nodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gives 2 task counts"), std::string::npos) << msg;

  e = kSlurm;
  e["SLURM_NODEID"] = "3";
  msg = error_of([&] { resolve_slurm(fake_env(e)); });
  EXPECT_NE(msg.find("SLURM_NODEID=3"), std::string::npos) << msg;

  e = kSlurm;
  e["SLURM_LOCALID"] = "1";  // the third node runs one task
  msg = error_of([&] { resolve_slurm(fake_env(e)); });
  EXPECT_NE(msg.find("SLURM_LOCALID=1 is not below"), std::string::npos) << msg;

  e = kSlurm;
  e["SLURM_STEP_NODELIST"] = "n[07-";
  msg = error_of([&] { resolve_slurm(fake_env(e)); });
  EXPECT_NE(msg.find("SLURM_STEP_NODELIST: invalid SLURM hostlist 'n[07-'"), std::string::npos)
      << msg;
  e = kSlurm;
  e["SLURM_STEP_TASKS_PER_NODE"] = "2(x2";
  msg = error_of([&] { resolve_slurm(fake_env(e)); });
  EXPECT_NE(msg.find("SLURM_STEP_TASKS_PER_NODE: invalid SLURM task count list '2(x2'"),
            std::string::npos)
      << msg;

  e = {{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "3"},
       {"SLURM_LOCALID", "0"},
       {"SLURM_STEP_TASKS_PER_NODE", "2,1"}};  // uneven and no SLURM_NODEID
  msg = error_of([&] { resolve_slurm(fake_env(e)); });
  EXPECT_NE(msg.find("tasks on this node are unknown"), std::string::npos) << msg;
}

TEST(ResolvePlacement, OrderIsOpenMpiThenMpichThenSlurm) {
  Env all = kSlurm;
  all.insert(kOpenMpi.begin(), kOpenMpi.end());
  all["PMI_RANK"] = "4";
  all["PMI_SIZE"] = "5";
  all["MPI_LOCALRANKID"] = "0";
  all["MPI_LOCALNRANKS"] = "1";
  EXPECT_EQ(resolve_placement(fake_env(all))->source, "Open MPI");
  for (const auto& kv : kOpenMpi) all.erase(kv.first);
  EXPECT_EQ(resolve_placement(fake_env(all))->source, "MPICH/PMI");
  all.erase("PMI_RANK");
  EXPECT_EQ(resolve_placement(fake_env(all))->source, "SLURM");
  EXPECT_FALSE(resolve_placement(fake_env({})));
}

TEST(SlurmAllocation, OutsideSlurmIsAbsent) {
  EXPECT_FALSE(slurm_allocation(fake_env({{"SLURM_JOB_NODELIST", "a"}})));
}

TEST(SlurmAllocation, NodesAndTasksPerNodeInOrder) {
  auto a = slurm_allocation(fake_env({{"SLURM_JOB_ID", "42"},
                                      {"SLURM_JOB_NODELIST", "node[01-03,07]"},
                                      {"SLURM_TASKS_PER_NODE", "2(x3),1"}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(*a,
            (std::vector<HostSlots>{{"node01", 2}, {"node02", 2}, {"node03", 2}, {"node07", 1}}));
}

TEST(SlurmAllocation, NtasksPerNodeWhenTasksPerNodeMissing) {
  auto a = slurm_allocation(fake_env(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_NODELIST", "x,y[1-2]"}, {"SLURM_NTASKS_PER_NODE", "3"}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<HostSlots>{{"x", 3}, {"y1", 3}, {"y2", 3}}));
}

TEST(SlurmAllocation, ErrorsNameTheJobAndVariables) {
  std::string msg = error_of([] { slurm_allocation(fake_env({{"SLURM_JOB_ID", "9"}})); });
  EXPECT_NE(msg.find("job 9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SLURM_JOB_NODELIST"), std::string::npos) << msg;
  msg = error_of([] {
    slurm_allocation(fake_env({{"SLURM_JOB_ID", "9"},
                               {"SLURM_JOB_NODELIST", "a[1-3]"},
                               {"SLURM_TASKS_PER_NODE", "1(x2)"}}));
  });
  EXPECT_NE(msg.find("names 3 nodes"), std::string::npos) << msg;
  msg = error_of([] {
    slurm_allocation(fake_env({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "a"}}));
  });
  EXPECT_NE(msg.find("SLURM_TASKS_PER_NODE"), std::string::npos) << msg;
  msg = error_of([] {
    slurm_allocation(fake_env({{"SLURM_JOB_ID", "9"},
                               {"SLURM_JOB_NODELIST", "a[1-2"},
                               {"SLURM_TASKS_PER_NODE", "1(x2)"}}));
  });
  EXPECT_NE(msg.find("SLURM_JOB_NODELIST: invalid SLURM hostlist 'a[1-2' at position 1"),
            std::string::npos)
      << msg;
}

TEST(DescribeMismatch, EmptyWhenEqual) {
  Placement p{"Open MPI", 5, 8, 1, 4, std::nullopt, std::nullopt, {}};
  EXPECT_EQ(describe_mismatch(p, 5, 8, 1, 4), "");
}

TEST(DescribeMismatch, NamesSourceAndEachDifference) {
  Placement p{"SLURM", 0, 2, 0, 1, 0, 2, {"a", "b"}};
  std::string msg = describe_mismatch(p, 3, 4, 1, 2);
  EXPECT_NE(msg.find("SLURM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 (MPI says 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("size 2 (MPI says 4)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("local_rank 0 (MPI says 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("local_size 1 (MPI says 2)"), std::string::npos) << msg;
  // Only the differing quantity is named.
  msg = describe_mismatch(p, 0, 2, 0, 2);
  EXPECT_EQ(msg.find("rank 0 (MPI"), std::string::npos) << msg;
  EXPECT_NE(msg.find("local_size 1 (MPI says 2)"), std::string::npos) << msg;
}

TEST(PlacementToString, ShowsSourceRanksAndNodes) {
  Placement p{"SLURM", 3, 8, 1, 2, 1, 4, {"n1", "n2", "n3", "n4"}};
  EXPECT_EQ(to_string(p), "SLURM: rank 3/8, local 1/2, node 1/4 (n1,n2,n3,n4)");
}

}  // namespace
}  // namespace hvd::cluster
