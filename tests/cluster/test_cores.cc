// cluster/cores.h: the cores a rank may count as its own, from the affinity masks of its node's
// ranks, for the launches users make: unbound, bound to cores, SLURM's --cpus-per-task, bound to
// sockets, and masks that overlap only in part.
#include <gtest/gtest.h>

#include <vector>

#include "cluster/cores.h"

namespace hvd::cluster {
namespace {

cpu_set_t cores(int first, int count) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c = first; c < first + count; ++c) CPU_SET(c, &s);
  return s;
}

TEST(CoresPerRank, UnboundRanksShareTheMachine) {
  const cpu_set_t all = cores(0, 16);
  EXPECT_EQ(cores_per_rank(all, {all, all}), 8);
  EXPECT_EQ(cores_per_rank(all, {all}), 16) << "one rank";
  EXPECT_EQ(cores_per_rank(cores(0, 2), {cores(0, 2), cores(0, 2)}), 1) << "this VM, 2 ranks";
  EXPECT_EQ(cores_per_rank(cores(0, 3), {cores(0, 3), cores(0, 3)}), 1);
}

TEST(CoresPerRank, DisjointMasksAreEachRanksOwn) {
  // --bind-to core: one core each
  EXPECT_EQ(cores_per_rank(cores(1, 1), {cores(0, 1), cores(1, 1)}), 1);
  // SLURM --cpus-per-task=8, 8 ranks on 64 cores: 8 each (the mask divided by the 8 ranks: 1)
  std::vector<cpu_set_t> node;
  for (int r = 0; r < 8; ++r) node.push_back(cores(8 * r, 8));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(cores_per_rank(node[static_cast<size_t>(r)], node), 8);
}

TEST(CoresPerRank, SocketsAreSharedByTheirRanks) {
  // --bind-to socket, 4 ranks on 2 sockets of 8 cores
  const std::vector<cpu_set_t> node = {cores(0, 8), cores(0, 8), cores(8, 8), cores(8, 8)};
  EXPECT_EQ(cores_per_rank(node[0], node), 4);
  EXPECT_EQ(cores_per_rank(node[3], node), 4);
}

TEST(CoresPerRank, AnOverlapCountsAsSharing) {
  const std::vector<cpu_set_t> node = {cores(0, 8), cores(4, 8)};
  EXPECT_EQ(cores_per_rank(node[0], node), 4);
}

TEST(CoresPerRank, AtLeastOne) {
  const cpu_set_t one = cores(0, 1);
  EXPECT_EQ(cores_per_rank(one, {one, one, one, one}), 1) << "oversubscribed";
  cpu_set_t none;
  CPU_ZERO(&none);
  EXPECT_EQ(cores_per_rank(none, {}), 1) << "no mask known";
}

}  // namespace
}  // namespace hvd::cluster
