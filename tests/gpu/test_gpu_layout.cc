// The arithmetic of the GPU data path that needs no GPU: where tensors go in the device fusion
// buffer (256-byte alignment, offsets, padding for the hierarchical all-reduce), how the
// hierarchical all-reduce cuts a buffer into shards (remainders that do not divide by local_size),
// and when it applies. Expected values are computed here independently.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ops/cuda/device_layout.h"
#include "ops/hierarchical/shards.h"

namespace hvd::ops {
namespace {

TEST(DeviceFusionLayout, EveryTensorStartsOn256ByteBoundaries) {
  // Odd sizes in bytes of float16 tensors: 1, 3, 255, 257 elements, an empty one, 1000003.
  const std::vector<int64_t> sizes = {2, 6, 510, 514, 0, 2000006};
  const auto d = cuda::device_fusion_layout(sizes, 2);
  ASSERT_EQ(d.layout.offsets.size(), sizes.size());
  int64_t expect = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    expect = (expect + 255) / 256 * 256;
    EXPECT_EQ(d.layout.offsets[i], expect) << "tensor " << i;
    EXPECT_EQ(d.layout.offsets[i] % 256, 0);
    expect += sizes[i];
  }
  EXPECT_EQ(d.layout.total_bytes, expect);
  EXPECT_EQ(d.elements, expect / 2);
  EXPECT_EQ(d.bytes, expect);
}

TEST(DeviceFusionLayout, RangesDoNotOverlapAndFitTheBuffer) {
  std::vector<int64_t> sizes;
  for (int i = 1; i <= 500; ++i) sizes.push_back((i * 37 % 1001) * 4);  // float32, odd counts
  const auto d = cuda::device_fusion_layout(sizes, 4);
  for (size_t i = 1; i < sizes.size(); ++i)
    EXPECT_GE(d.layout.offsets[i], d.layout.offsets[i - 1] + sizes[i - 1]);
  EXPECT_LE(d.layout.offsets.back() + sizes.back(), d.bytes);
}

TEST(DeviceFusionLayout, PaddedToAMultipleOfTheShardCount) {
  // 7 float32 elements on 3 local ranks: 9 elements reduced, the last 2 are padding.
  auto d = cuda::device_fusion_layout({28}, 4, 3);
  EXPECT_EQ(d.elements, 9);
  EXPECT_EQ(d.bytes, 36);
  // Two tensors: 1 double at 0, 1 double at 256 -> 33 elements used, padded to 36 for 4 ranks.
  d = cuda::device_fusion_layout({8, 8}, 8, 4);
  EXPECT_EQ(d.layout.offsets[1], 256);
  EXPECT_EQ(d.elements, 36);
  // Nothing to reduce stays nothing.
  d = cuda::device_fusion_layout({0, 0}, 4, 4);
  EXPECT_EQ(d.elements, 0);
  EXPECT_EQ(d.bytes, 0);
  d = cuda::device_fusion_layout({}, 4, 2);
  EXPECT_EQ(d.elements, 0);
}

TEST(HierarchicalShards, RemaindersGoToTheFirstShards) {
  for (int parts = 1; parts <= 5; ++parts) {
    for (int64_t count : {0, 1, 2, 3, 4, 5, 7, 8, 1000003}) {
      const auto s = hierarchical::shard(count, parts);
      ASSERT_EQ(s.counts.size(), static_cast<size_t>(parts));
      EXPECT_EQ(std::accumulate(s.counts.begin(), s.counts.end(), int64_t{0}), count);
      int64_t off = 0;
      for (int r = 0; r < parts; ++r) {
        // Shard r holds elements [off, off + counts[r]); element i belongs to the shard whose
        // range contains it, and the sizes differ by at most one, larger ones first.
        EXPECT_EQ(s.offsets[r], off);
        const int64_t want = count / parts + (r < count % parts ? 1 : 0);
        EXPECT_EQ(s.counts[r], want) << "count " << count << ", parts " << parts << ", shard " << r;
        if (r > 0) {
          EXPECT_LE(s.counts[r], s.counts[r - 1]);
        }
        off += s.counts[r];
      }
    }
  }
}

TEST(HierarchicalShards, SpecificSplits) {
  auto s = hierarchical::shard(7, 2);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(s.offsets, (std::vector<int64_t>{0, 4}));
  s = hierarchical::shard(1, 3);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(s.offsets, (std::vector<int64_t>{0, 1, 1}));
  s = hierarchical::shard(1000003, 4);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{250001, 250001, 250001, 250000}));
}

TEST(HierarchicalShards, PaddedCount) {
  EXPECT_EQ(hierarchical::padded_count(0, 4), 0);
  EXPECT_EQ(hierarchical::padded_count(1, 4), 4);
  EXPECT_EQ(hierarchical::padded_count(8, 4), 8);
  EXPECT_EQ(hierarchical::padded_count(1000003, 2), 1000004);
  EXPECT_EQ(hierarchical::padded_count(5, 1), 5);
}

TEST(HierarchicalPlan, AppliesOnlyToSeveralHomogeneousNodes) {
  using hierarchical::plan_hierarchical;
  EXPECT_TRUE(plan_hierarchical(true, 4, 2, 2, true).use);  // 2 x 2
  const auto off = plan_hierarchical(false, 4, 2, 2, true);
  EXPECT_FALSE(off.use);
  const auto uneven = plan_hierarchical(true, 3, 2, 2, false);  // 2 + 1
  EXPECT_FALSE(uneven.use);
  EXPECT_NE(uneven.reason.find("not homogeneous"), std::string::npos) << uneven.reason;
  EXPECT_NE(uneven.reason.find("flat allreduce"), std::string::npos) << uneven.reason;
  const auto one_node = plan_hierarchical(true, 4, 4, 1, true);
  EXPECT_FALSE(one_node.use);
  EXPECT_NE(one_node.reason.find("one node"), std::string::npos) << one_node.reason;
  EXPECT_FALSE(plan_hierarchical(true, 4, 1, 4, true).use);  // one rank per node
  EXPECT_FALSE(plan_hierarchical(true, 1, 1, 1, true).use);
}

}  // namespace
}  // namespace hvd::ops
