// The control plane's binomial tree (comm/control_tree.h) and HVD_CONTROL_TOPOLOGY: the shape the
// tree exchange relies on (every rank but 0 has exactly one parent, below it; rank 0 and every rank
// have at most ceil(log2 n) children; the tree is ceil(log2 n) deep; a subtree is exactly the ranks
// whose bits pass through its root), and the variable's validation.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/control_tree.h"
#include "comm/mpi_control_channel.h"
#include "common/config.h"
#include "hvd/error.h"
#include "tests/support/test_util.h"

namespace hvd::comm {
namespace {

int ceil_log2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

TEST(ControlTree, EightRanksAsDocumented) {
  EXPECT_EQ(tree_children(0, 8), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(tree_children(2, 8), (std::vector<int>{3}));
  EXPECT_EQ(tree_children(4, 8), (std::vector<int>{5, 6}));
  EXPECT_EQ(tree_children(6, 8), (std::vector<int>{7}));
  for (int leaf : {1, 3, 5, 7}) EXPECT_TRUE(tree_children(leaf, 8).empty()) << leaf;
  EXPECT_EQ(tree_parent(0), -1);
  EXPECT_EQ(tree_parent(7), 6);
  EXPECT_EQ(tree_parent(6), 4);
  EXPECT_EQ(tree_subtree(4, 8), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(tree_subtree(4, 6), (std::vector<int>{4, 5}));  // cut at the size
  EXPECT_EQ(tree_depth(8), 3);
  EXPECT_EQ(tree_depth(1), 0);
}

// Every property the exchange needs, for every size up to 130 and at the sizes docs/scaling.md
// extrapolates to.
TEST(ControlTree, EveryRankHasOneParentAndLogDepth) {
  std::vector<int> sizes;
  for (int n = 1; n <= 130; ++n) sizes.push_back(n);
  sizes.push_back(1024);
  sizes.push_back(16384);
  sizes.push_back(16383);
  for (int n : sizes) {
    SCOPED_TRACE("size " + std::to_string(n));
    const int log_n = ceil_log2(n);
    EXPECT_EQ(tree_depth(n), log_n);
    EXPECT_EQ(static_cast<int>(tree_children(0, n).size()), log_n);
    std::vector<int> times_a_child(n, 0);
    for (int r = 0; r < n; ++r) {
      const std::vector<int> kids = tree_children(r, n);
      EXPECT_LE(static_cast<int>(kids.size()), log_n) << "rank " << r;
      for (size_t i = 0; i < kids.size(); ++i) {
        ASSERT_GT(kids[i], r);
        ASSERT_LT(kids[i], n);
        EXPECT_EQ(tree_parent(kids[i]), r) << "child " << kids[i] << " of rank " << r;
        if (i) {
          EXPECT_LT(kids[i - 1], kids[i]);
        }
        ++times_a_child[kids[i]];
      }
      if (r == 0) continue;
      // Hops to the root, and the subtree as the ranks whose way up passes through r.
      int hops = 0;
      for (int x = r; x != 0; x = tree_parent(x)) ++hops;
      EXPECT_LE(hops, log_n) << "rank " << r;
    }
    for (int r = 1; r < n; ++r) EXPECT_EQ(times_a_child[r], 1) << "rank " << r;
    if (n > 130) continue;  // the quadratic check below on the small sizes
    for (int r = 0; r < n; ++r) {
      std::vector<int> through;
      for (int x = 0; x < n; ++x) {
        int y = x;
        while (y != r && y > 0) y = tree_parent(y);
        if (y == r) through.push_back(x);
      }
      EXPECT_EQ(tree_subtree(r, n), through) << "rank " << r;
    }
  }
}

TEST(ControlTopology, ParsesTreeAndStarInAnyCase) {
  EXPECT_EQ(parse_control_topology("tree"), ControlTopology::kTree);
  EXPECT_EQ(parse_control_topology("STAR"), ControlTopology::kStar);
  EXPECT_EQ(parse_control_topology("auto", kAutoTreeFromRanks - 1), ControlTopology::kStar);
  EXPECT_EQ(parse_control_topology("Auto", kAutoTreeFromRanks), ControlTopology::kTree);
  EXPECT_EQ(parse_control_topology("auto", 16384), ControlTopology::kTree);
  try {
    parse_control_topology("ring");
    ADD_FAILURE() << "'ring' was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(),
                 "HVD_CONTROL_TOPOLOGY='ring' is not valid: expected one of auto|tree|star.");
  }
}

TEST(ControlTopology, ConfigDefaultsToAutoAndRejectsOtherValues) {
  const auto env = hvdtest::fake_env;
  EXPECT_EQ(load_config(env({})).control_topology, ControlTopologySetting::kAuto);
  EXPECT_EQ(load_config(env({{"HVD_CONTROL_TOPOLOGY", "Star"}})).control_topology,
            ControlTopologySetting::kStar);
  EXPECT_EQ(load_config(env({{"HOROVOD_CONTROL_TOPOLOGY", "tree"}})).control_topology,
            ControlTopologySetting::kTree);
  EXPECT_EQ(resolve_control_topology(ControlTopologySetting::kAuto, kAutoTreeFromRanks - 1),
            ControlTopology::kStar);
  EXPECT_EQ(resolve_control_topology(ControlTopologySetting::kAuto, kAutoTreeFromRanks),
            ControlTopology::kTree);
  EXPECT_EQ(resolve_control_topology(ControlTopologySetting::kStar, 16384), ControlTopology::kStar);
  EXPECT_EQ(resolve_control_topology(ControlTopologySetting::kTree, 2), ControlTopology::kTree);
  try {
    load_config(env({{"HVD_CONTROL_TOPOLOGY", "ring"}}));
    ADD_FAILURE() << "'ring' was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(),
                 "HVD_CONTROL_TOPOLOGY='ring' is not valid: expected one of auto|tree|star.");
  }
}

}  // namespace
}  // namespace hvd::comm
