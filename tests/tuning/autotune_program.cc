// HVD_AUTOTUNE end to end under mpirun (hvd/tuning.h, runtime/autotune.h; docs/tuning.md).
//
// usage: autotune_program TENSORS FLOATS MIN_THRESHOLD MAX_STEPS
// Every step each rank all-reduces TENSORS tensors of FLOATS float32 (submitted at once, then
// waited for) and checks every element of every result. It runs until hvd::tuning_report() says
// the search is over, and 5 steps more under the winner (at most MAX_STEPS steps). Then, on every
// rank:
//  - the search finished, the winner is in force, and its settings line names its values;
//  - the winner's fusion threshold is at least MIN_THRESHOLD bytes (the known best: the test sets
//    HVD_TEST_OP_DELAY_US, a fixed cost per operation, so that any threshold under the step's bytes
//    splits the step into operations that each cost that much more);
//  - every rank ended with the same report (trials, step times, winner, explanation: all-reduced
//    min and max of a digest);
//  - rank 0, with HVD_AUTOTUNE_LOG: the CSV has a row per trial and marks the winner once.
// One rank: the report says the tuner is off (nothing to negotiate), and the values are right.
// Each rank prints what it finds; a failure on any rank fails every rank (exit 1). Rank 0 ends
// with "PASS: ..." when every rank passed.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

std::string digest_text(const hvd::TuningReport& r) {
  std::string s = r.settings + "|" + r.explanation + "|" + std::to_string(r.winner);
  for (const auto& t : r.trials)
    s += "|" + std::to_string(t.fusion_threshold_bytes) + "," + std::to_string(t.cycle_time_ms) +
         "," + std::to_string(t.fusion_window_us) + "," + std::to_string(t.step_ms);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s TENSORS FLOATS MIN_THRESHOLD MAX_STEPS\n", argv[0]);
    return 2;
  }
  const int tensors = std::atoi(argv[1]);
  const size_t floats = static_cast<size_t>(std::atol(argv[2]));
  const int64_t min_threshold = std::atoll(argv[3]);
  const int max_steps = std::atoi(argv[4]);
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  std::vector<std::string> problems;
  auto fail = [&](const std::string& what) {
    if (problems.size() < 10) problems.push_back(what);
  };

  std::vector<std::vector<float>> grads(tensors, std::vector<float>(floats));
  int steps = 0, done_at = -1;
  for (; steps < max_steps; ++steps) {
    for (int t = 0; t < tensors; ++t)
      for (size_t j = 0; j < floats; ++j)
        grads[t][j] = static_cast<float>((rank + 1) * (t + 1) + steps % 7 + j % 3);
    std::vector<hvd::Handle> handles;
    for (int t = 0; t < tensors; ++t)
      handles.push_back(hvd::allreduce_async(std::span<float>(grads[t]),
                                             "grad." + std::to_string(t), hvd::ReduceOp::kSum));
    for (auto& h : handles) h.wait();
    for (int t = 0; t < tensors; ++t)
      for (size_t j = 0; j < floats; ++j) {
        const double want = (t + 1) * size * (size + 1) / 2.0 + size * (steps % 7 + j % 3);
        if (grads[t][j] != static_cast<float>(want)) {
          fail("step " + std::to_string(steps) + ": grad." + std::to_string(t) + "[" +
               std::to_string(j) + "] = " + std::to_string(grads[t][j]) + ", expected " +
               std::to_string(want));
          break;
        }
      }
    // The search ends at one negotiation cycle on every rank, but each user thread sees it at its
    // own next call: the ranks agree on the step through an all-reduce.
    std::vector<int> over{hvd::tuning_report().done ? 1 : 0};
    hvd::allreduce(over, "autotune.over", hvd::ReduceOp::kMin);
    if (done_at < 0 && over[0] == 1) done_at = steps;
    if (done_at >= 0 && steps >= done_at + 5) break;
    if (size == 1 && steps >= 10) break;
  }

  const hvd::TuningReport r = hvd::tuning_report();
  if (size == 1) {
    if (r.enabled || r.state.find("one rank") == std::string::npos)
      fail("one rank: the tuner should be off, state '" + r.state + "'");
  } else {
    if (!r.enabled) fail("the tuner is off: " + r.state);
    if (!r.done)
      fail("the search did not finish in " + std::to_string(steps) + " steps: " + r.state);
    if (r.done) {
      if (r.winner < 0 || r.winner >= static_cast<int>(r.trials.size())) {
        fail("no winner");
      } else {
        const hvd::TuningTrial& w = r.trials[r.winner];
        if (w.fusion_threshold_bytes != r.fusion_threshold_bytes ||
            w.cycle_time_ms != r.cycle_time_ms || w.fusion_window_us != r.fusion_window_us)
          fail("the winner is not in force");
        if (r.settings.rfind("HVD_FUSION_THRESHOLD=" + std::to_string(w.fusion_threshold_bytes) +
                                 " HVD_CYCLE_TIME=",
                             0) != 0)
          fail("the settings line does not name the winner: " + r.settings);
        if (r.fusion_threshold_bytes < min_threshold)
          fail("the winner's fusion threshold is " + std::to_string(r.fusion_threshold_bytes) +
               " bytes, under the " + std::to_string(min_threshold) + " known to be best");
        if (r.explanation.empty()) fail("no explanation");
      }
      for (const auto& t : r.trials)
        if (t.step_ms <= 0) fail("a trial without a step time");
    }
    // Every rank has the same report.
    const double d =
        static_cast<double>(std::hash<std::string>{}(digest_text(r)) % (uint64_t{1} << 52));
    std::vector<double> lo{d}, hi{d};
    hvd::allreduce(lo, "autotune.digest.min", hvd::ReduceOp::kMin);
    hvd::allreduce(hi, "autotune.digest.max", hvd::ReduceOp::kMax);
    if (lo[0] != hi[0]) fail("the ranks' reports differ");
    if (rank == 0) {
      if (const char* path = std::getenv("HVD_AUTOTUNE_LOG"); path && *path && r.done) {
        std::ifstream in(path);
        std::string line;
        int rows = -1, winners = 0, winner_row = -1;
        while (std::getline(in, line)) {
          if (++rows == 0) continue;  // the header
          if (line.size() >= 2 && line.substr(line.size() - 2) == ",1") {
            ++winners;
            winner_row = std::atoi(line.c_str());
          }
        }
        if (rows != static_cast<int>(r.trials.size()))
          fail(std::string(path) + ": " + std::to_string(rows) + " rows for " +
               std::to_string(r.trials.size()) + " trials");
        if (winners != 1 || winner_row != r.winner)
          fail(std::string(path) + ": the winner is not marked once, on its row");
      }
    }
  }

  for (const auto& p : problems) std::printf("rank %d: FAIL: %s\n", rank, p.c_str());
  std::printf("rank %d: %d steps; %s; %s\n", rank, steps, r.state.c_str(),
              r.done ? (r.settings + " (" + std::to_string(r.trials.size()) + " trials)").c_str()
                     : "no winner");
  std::vector<int> bad{problems.empty() ? 0 : 1};
  hvd::allreduce(bad, "autotune.bad", hvd::ReduceOp::kSum);
  if (rank == 0 && bad[0] == 0)
    std::printf("PASS: %d ranks; %s\n", size,
                size == 1 ? "tuner off on one rank" : r.explanation.c_str());
  hvd::shutdown();
  return bad[0] == 0 ? 0 : 1;
}
