// HVD_AUTOTUNE (runtime/autotune.h): the search on step times given by a cost function whose best
// settings are known, and the agreement on 1-4 in-process ranks (real controllers on the
// in-process channel): every rank applies every trial at the same cycle, fuses alike, and ends
// with the same report.

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <thread>

#include "runtime/autotune.h"
#include "tests/runtime/controller_harness.h"

namespace hvd {
namespace {

using controller_test::Rank;
using controller_test::request;
using controller_test::Seen;

ParameterValues defaults() { return ParameterValues{}; }

// Runs the search to its end on step times from `cost`; returns it.
AutotuneSearch run_search(const ParameterValues& start,
                          const std::function<double(const ParameterValues&)>& cost) {
  AutotuneSearch s(start);
  for (auto v = s.next(); v; v = s.next()) s.measured(cost(*v), 5);
  return s;
}

TEST(AutotuneSearch, FindsTheBestSettingsOfAKnownCost) {
  // A step splits into one op per `threshold` bytes of its 2 MiB (5 ms each, fusion off: 64 ops);
  // cycle times and windows cost their distance from 0.5 ms and 20 us.
  auto cost = [](const ParameterValues& v) {
    const double bytes = 2 << 20;
    const double ops = v.fusion_threshold_bytes == 0
                           ? 64
                           : std::ceil(bytes / static_cast<double>(v.fusion_threshold_bytes));
    return 5 * std::min(ops, 64.0) + std::abs(std::log2(v.cycle_time_ms / 0.5)) +
           std::abs(v.fusion_window_us - 20) / 10;
  };
  ParameterValues start = defaults();
  start.fusion_threshold_bytes = 0;  // a bad start: the search must leave it
  AutotuneSearch s = run_search(start, cost);
  ASSERT_TRUE(s.over());
  const ParameterValues w = s.values(s.winner());
  EXPECT_GE(w.fusion_threshold_bytes, 2 << 20) << "any threshold >= a step's 2 MiB fuses it whole";
  EXPECT_EQ(w.cycle_time_ms, 0.5);
  EXPECT_EQ(w.fusion_window_us, 20);
  // Every combination ran once, the start first; then the start and the winner twice more each,
  // alternately.
  std::set<std::string> seen;
  std::vector<std::string> confirms;
  for (int i = 0; i < static_cast<int>(s.trials().size()); ++i) {
    EXPECT_GE(s.trials()[i].step_ms, 0);
    if (s.trials()[i].varies == "confirm") {
      confirms.push_back(s.values(i).settings());
      continue;
    }
    EXPECT_TRUE(confirms.empty()) << "a search trial after the confirmation";
    EXPECT_TRUE(seen.insert(s.values(i).settings()).second) << s.values(i).settings();
  }
  EXPECT_EQ(confirms, (std::vector<std::string>{start.settings(), w.settings(), start.settings(),
                                                w.settings()}));
  EXPECT_EQ(s.trials()[0].varies, "start");
  EXPECT_LE(static_cast<int>(s.trials().size()), s.planned());
  const std::string why = s.explanation();
  EXPECT_NE(why.find("of one setting: the fusion threshold"), std::string::npos) << why;
  EXPECT_NE(why.find("x faster"), std::string::npos) << why;
}

TEST(AutotuneSearch, KeepsTheStartWhenNothingBeatsItBeyondTheMargin) {
  // Every setting within 1 %: the noise; the start stays, and the explanation says why.
  int calls = 0;
  auto cost = [&](const ParameterValues&) { return 10.0 - 0.01 * (calls++ % 7); };
  AutotuneSearch s = run_search(defaults(), cost);
  EXPECT_EQ(s.winner(), 0);
  EXPECT_EQ(s.values(s.winner()), defaults());
  EXPECT_NE(s.explanation().find("the starting settings stay"), std::string::npos)
      << s.explanation();
}

TEST(AutotuneSearch, ACandidateMustWinEveryPairOfTheConfirmation) {
  // 1 MiB is far faster in the search and on average, but slower than the start once in the
  // confirmation: a lucky draw, and the start stays.
  const int64_t mib = 1 << 20;
  int candidate_runs = 0;
  ParameterValues candidate = defaults();
  candidate.fusion_threshold_bytes = mib;
  auto cost = [&](const ParameterValues& v) {
    if (!(v == candidate)) return 10.0;
    return ++candidate_runs == 2 ? 12.0 : 2.0;
  };
  AutotuneSearch s = run_search(defaults(), cost);
  EXPECT_EQ(candidate_runs, 3);
  EXPECT_EQ(s.winner(), 0);
  EXPECT_NE(s.explanation().find("lucky draw"), std::string::npos) << s.explanation();
  // Without that lost pair it wins.
  candidate_runs = 10;
  AutotuneSearch t = run_search(defaults(), cost);
  EXPECT_EQ(t.values(t.winner()).fusion_threshold_bytes, mib);
  EXPECT_NE(t.explanation().find("so it wins"), std::string::npos) << t.explanation();
}

TEST(AutotuneSearch, TheSameInputsGiveTheSameTrialsOnEveryRank) {
  auto cost = [](const ParameterValues& v) {
    return 3.0 + static_cast<double>(v.fusion_threshold_bytes % 7) + v.cycle_time_ms;
  };
  AutotuneSearch a = run_search(defaults(), cost), b = run_search(defaults(), cost);
  ASSERT_EQ(a.trials().size(), b.trials().size());
  for (size_t i = 0; i < a.trials().size(); ++i)
    EXPECT_EQ(a.values(static_cast<int>(i)), b.values(static_cast<int>(i)));
  EXPECT_EQ(a.winner(), b.winner());
}

// The agreement, on real controllers: rank 0 times the steps, the verdicts travel in the control
// vector, and every rank applies each trial at the same cycle.
void agree_on(int n) {
  testing::InProcessHub hub(n);
  std::vector<std::vector<int64_t>> thresholds(n);  // per rank: the threshold in force each cycle
  std::vector<TuningReport> reports(n);
  std::vector<std::vector<Seen>> seen(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto params = std::make_shared<Parameters>(defaults());
        AutotuneOptions ao;
        ao.rank = r;
        ao.warmup_steps = 2;
        ao.steps_per_trial = 2;
        ao.trial_seconds = 0;
        auto tuner = std::make_shared<Autotuner>(ao, *params);
        ControllerOptions o = controller_test::test_options();
        o.params = params;
        o.tuner = tuner;
        Rank me(hub, r, o);
        // Steps of 8 tensors (the first step goes to rank 0; the others are cache hits).
        std::vector<std::string> names;
        for (int i = 0; i < 8; ++i) names.push_back("grad." + std::to_string(i));
        for (int step = 0; step < 400 && !tuner->report().done; ++step) {
          for (const auto& name : names) me.submit(request(r, name, RequestType::kAllreduce, {16}));
          std::set<std::string> left(names.begin(), names.end());
          while (!left.empty()) {
            for (const auto& s : me.cycle()) left.erase(s.name);
            thresholds[r].push_back(params->fusion_threshold_bytes());
          }
        }
        reports[r] = tuner->report();
        seen[r] = me.seen();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        hub.drop(r);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(n));
    const TuningReport& rep = reports[r];
    ASSERT_TRUE(rep.done) << rep.state;
    ASSERT_GE(rep.winner, 0);
    EXPECT_GE(rep.trials.size(), 10u);
    EXPECT_EQ(rep.settings, reports[0].settings);
    EXPECT_EQ(rep.explanation, reports[0].explanation);
    ASSERT_EQ(rep.trials.size(), reports[0].trials.size());
    for (size_t i = 0; i < rep.trials.size(); ++i) {
      EXPECT_EQ(rep.trials[i].fusion_threshold_bytes, reports[0].trials[i].fusion_threshold_bytes);
      EXPECT_EQ(rep.trials[i].step_ms, reports[0].trials[i].step_ms);
    }
    // The winner is in force.
    const TuningTrial& w = rep.trials[rep.winner];
    EXPECT_EQ(rep.fusion_threshold_bytes, w.fusion_threshold_bytes);
    EXPECT_EQ(rep.cycle_time_ms, w.cycle_time_ms);
    EXPECT_EQ(rep.fusion_window_us, w.fusion_window_us);
    EXPECT_EQ(rep.settings.find("HVD_FUSION_THRESHOLD=" + std::to_string(w.fusion_threshold_bytes)),
              0u)
        << rep.settings;
    // Each change took effect at the same cycle on every rank, and the ranks fused alike.
    EXPECT_EQ(thresholds[r], thresholds[0]);
    EXPECT_EQ(seen[r], seen[0]);
  }
  // The trials did change the threshold during the run (0, 64 KiB, ...).
  std::set<int64_t> distinct(thresholds[0].begin(), thresholds[0].end());
  EXPECT_GE(distinct.size(), 5u);
}

TEST(AutotuneAgreement, EveryRankAppliesEachTrialAtTheSameCycle) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    agree_on(n);
  }
}

}  // namespace
}  // namespace hvd
