// The stall inspector's decisions on given stalls: when it warns, what it names, when it fails.
#include <gtest/gtest.h>

#include "runtime/stall_inspector.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

Controller::Stall stall(const std::string& name, std::vector<int> submitted,
                        std::vector<int> missing, double s) {
  Controller::Stall st;
  st.name = name;
  st.submitted_ranks = std::move(submitted);
  st.missing_ranks = std::move(missing);
  st.seconds = s;
  return st;
}

TEST(StallInspector, RankListsCollapseRuns) {
  EXPECT_EQ(StallInspector::rank_list({3}), "rank 3");
  EXPECT_EQ(StallInspector::rank_list({0, 2}), "ranks 0, 2");
  EXPECT_EQ(StallInspector::rank_list({0, 1}), "ranks 0, 1");
  EXPECT_EQ(StallInspector::rank_list({0, 1, 2, 5, 7, 8, 9}), "ranks 0-2, 5, 7-9");
  std::vector<int> many;
  for (int r = 0; r < 100; r += 2) many.push_back(r);
  EXPECT_NE(StallInspector::rank_list(many).find("and 34 more"), std::string::npos)
      << StallInspector::rank_list(many);
}

TEST(StallInspector, WarnsOnceTheOldestStallReachesTheSettingThenEveryPeriod) {
  StallOptions o;
  o.check_seconds = 2;
  StallInspector si(o);
  const auto t0 = Clock::now();
  EXPECT_TRUE(si.judge({stall("a", {0}, {1}, 1.9)}, t0).warnings.empty());
  auto v = si.judge({stall("a", {0}, {1}, 2.0), stall("b", {1}, {0}, 0.5)},
                    t0 + std::chrono::milliseconds(100));
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_NE(v.warnings[0].find("'a' (submitted by rank 0; missing rank 1; 2.0 s)"),
            std::string::npos)
      << v.warnings[0];
  EXPECT_EQ(v.warnings[0].find("'b'"), std::string::npos) << "b is younger than the setting";
  EXPECT_TRUE(v.failures.empty());
  // Not again before the period is over; again after it.
  EXPECT_TRUE(
      si.judge({stall("a", {0}, {1}, 3.0)}, t0 + std::chrono::milliseconds(1100)).warnings.empty());
  EXPECT_EQ(
      si.judge({stall("a", {0}, {1}, 4.1)}, t0 + std::chrono::milliseconds(2200)).warnings.size(),
      1u);
}

TEST(StallInspector, ShutdownFailsEveryStalledTensorWithOneMessageNamingAll) {
  StallOptions o;
  o.check_seconds = 2;
  o.shutdown_seconds = 7;
  StallInspector si(o);
  auto v = si.judge({stall("images", {1}, {0, 2}, 7.0), stall("grad.2", {0, 2}, {1}, 7.2)},
                    Clock::now());
  ASSERT_EQ(v.failures.size(), 2u);
  EXPECT_EQ(v.failures[0].first, "grad.2") << "oldest first";
  EXPECT_EQ(v.failures[0].second, v.failures[1].second);
  EXPECT_EQ(v.shutdown_reason, v.failures[0].second);
  const std::string& m = v.shutdown_reason;
  EXPECT_NE(m.find("HVD_STALL_SHUTDOWN_TIME_SECONDS=7 s"), std::string::npos) << m;
  EXPECT_NE(m.find("'grad.2' (submitted by ranks 0, 2; missing rank 1;"), std::string::npos) << m;
  EXPECT_NE(m.find("'images' (submitted by rank 1; missing ranks 0, 2;"), std::string::npos) << m;
  // Younger than the shutdown time: warnings only.
  StallInspector si2(o);
  EXPECT_TRUE(si2.judge({stall("x", {0}, {1}, 6.9)}, Clock::now()).failures.empty());
}

TEST(StallInspector, DisabledSaysNothing) {
  StallOptions o;
  o.check_seconds = 1;
  o.shutdown_seconds = 1;
  o.disabled = true;
  StallInspector si(o);
  auto v = si.judge({stall("x", {0}, {1}, 100)}, Clock::now());
  EXPECT_TRUE(v.warnings.empty());
  EXPECT_TRUE(v.failures.empty());
}

}  // namespace
}  // namespace hvd
