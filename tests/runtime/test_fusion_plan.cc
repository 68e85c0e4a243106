// Fusion planning: what fuses, what does not, thresholds, groups, determinism; buffer layout.
#include <gtest/gtest.h>

#include "ops/fusion_buffer.h"
#include "runtime/fusion.h"

namespace hvd {
namespace {

Response ar(const std::string& name, int64_t n, DataType dt = DataType::kFloat32,
            ReduceOp op = ReduceOp::kSum) {
  Response r;
  r.type = ResponseType::kAllreduce;
  r.names = {name};
  r.shapes = {{n}};
  r.dtype = dt;
  r.reduce_op = op;
  r.contributors = 2;
  return r;
}

std::vector<std::vector<std::string>> names(const std::vector<Response>& rs) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : rs) out.push_back(r.names);
  return out;
}

TEST(FusionPlan, CompatibleAllreducesFuseInOrder) {
  auto plan = plan_fusion({ar("a", 10), ar("b", 20), ar("c", 30)}, {1 << 20});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(plan[0].shapes.size(), 3u);
  EXPECT_EQ(response_bytes(plan[0]), 60 * 4);
}

TEST(FusionPlan, DifferentDtypeOpScaleOrContributorsDoNotFuseButLookAheadSkipsThem) {
  Response scaled = ar("s", 4);
  scaled.prescale = 0.5;
  Response fewer = ar("f", 4);
  fewer.contributors = 1;
  auto plan =
      plan_fusion({ar("a", 4), ar("d", 4, DataType::kFloat64), ar("b", 4),
                   ar("m", 4, DataType::kFloat32, ReduceOp::kMax), scaled, fewer, ar("c", 4)},
                  {1 << 20});
  EXPECT_EQ(names(plan),
            (std::vector<std::vector<std::string>>{{"a", "b", "c"}, {"d"}, {"m"}, {"s"}, {"f"}}));
}

TEST(FusionPlan, ThresholdIsRespectedAndSmallerTensorsFillTheGap) {
  // 100 floats = 400 B each; threshold 1000 B: two fit, the third starts a new bucket; a 40 B
  // tensor further on still fits in the first bucket.
  auto plan = plan_fusion({ar("a", 100), ar("b", 100), ar("c", 100), ar("d", 10)}, {1000});
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"a", "b", "d"}, {"c"}}));
}

TEST(FusionPlan, ZeroThresholdDisablesFusion) {
  auto plan = plan_fusion({ar("a", 1), ar("b", 1)}, {0});
  EXPECT_EQ(plan.size(), 2u);
}

TEST(FusionPlan, TensorLargerThanThresholdRunsAlone) {
  auto plan = plan_fusion({ar("big", 1000), ar("x", 1)}, {100});
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"big"}, {"x"}}));
}

TEST(FusionPlan, GroupMembersStayTogetherEvenPastTheThreshold) {
  Response g0 = ar("g.0", 100), g1 = ar("g.1", 100), g2 = ar("g.2", 100);
  for (auto* g : {&g0, &g1, &g2}) g->group = "g";
  auto plan = plan_fusion({g0, ar("x", 100), g1, g2}, {500});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].names, (std::vector<std::string>{"g.0", "g.1", "g.2"}));
  EXPECT_EQ(plan[1].names, (std::vector<std::string>{"x"}));
}

TEST(FusionPlan, OtherCollectivesAndErrorsPassThroughUnfused) {
  Response bc = ar("bc", 4);
  bc.type = ResponseType::kBroadcast;
  Response err = ar("e", 4);
  err.type = ResponseType::kError;
  err.error = "boom";
  auto plan = plan_fusion({ar("a", 4), bc, err, ar("b", 4)}, {1 << 20});
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"a", "b"}, {"bc"}, {"e"}}));
}

TEST(FusionPlan, IsDeterministic) {
  std::vector<Response> in;
  for (int i = 0; i < 300; ++i)
    in.push_back(ar("t" + std::to_string(i), 1 + (i * 37) % 500,
                    i % 3 ? DataType::kFloat32 : DataType::kInt32));
  EXPECT_EQ(names(plan_fusion(in, {8192})), names(plan_fusion(in, {8192})));
  size_t total = 0;
  for (const auto& r : plan_fusion(in, {8192})) total += r.names.size();
  EXPECT_EQ(total, in.size());
}

TEST(FusionLayout, OffsetsAreAlignedAndCoverEveryTensor) {
  auto l = ops::fusion_layout({3, 0, 64, 1, 100}, 64);
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 64, 64, 128, 192}));
  EXPECT_EQ(l.total_bytes, 292);
  auto packed = ops::fusion_layout({3, 5, 7}, 1);
  EXPECT_EQ(packed.offsets, (std::vector<int64_t>{0, 3, 8}));
  EXPECT_EQ(packed.total_bytes, 15);
  EXPECT_EQ(ops::fusion_layout({}, 64).total_bytes, 0);
  EXPECT_ANY_THROW(ops::fusion_layout({1}, 48));
}

}  // namespace
}  // namespace hvd
