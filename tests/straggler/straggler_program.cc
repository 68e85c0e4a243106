// The slow rank, named every step (hvd/straggler.h), end to end under mpirun.
//
// usage: straggler_program SLOW_RANK SLEEP_MS STEPS [MAX_NAMED_SHARE]
// Every step each rank submits 16 all-reduces of 4 KiB and waits for them, then reads
// hvd::straggler_report(); SLOW_RANK (-1: none) first sleeps SLEEP_MS. After 3 warm-up steps
// (the first negotiates the tensors on the slow path and fills the cache), STEPS steps count:
//  - with a slow rank: it is named in at least 90 % of them, each time late by at least half the
//    sleep, and no other rank is named in more than 10 %;
//  - with none: some rank is named in at most MAX_NAMED_SHARE of them (default 0.1);
//  - on every rank alike: every rank's report of every step names the same rank (all-reduced
//    min and max per step), and every step's report covers at least one measured release;
//  - one rank: every report is empty (no release measured, nobody named).
// Each rank prints what it finds; a failure on any rank fails every rank (exit 1). Rank 0 ends
// with "PASS: ..." when every rank passed. With HVD_TIMELINE set, rank 0 then also finds the
// slowed rank named by the timeline's STRAGGLER events in at least 90 % of the steps (exit 1 on
// rank 0 otherwise, which fails the job).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SLOW_RANK SLEEP_MS STEPS [MAX_NAMED_SHARE]\n", argv[0]);
    return 2;
  }
  const int slow = std::atoi(argv[1]);
  const double sleep_ms = std::atof(argv[2]);
  const int steps = std::atoi(argv[3]);
  const double max_named_share = argc > 4 ? std::atof(argv[4]) : 0.1;
  constexpr int kWarmup = 3, kTensors = 16, kFloats = 1024;
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  std::vector<std::vector<float>> grads(kTensors, std::vector<float>(kFloats, 1.0f));
  std::vector<double> named(static_cast<size_t>(steps), -1), lateness(steps, 0);
  std::vector<int64_t> releases(static_cast<size_t>(steps), 0);
  double call_ms_max = 0, call_ms_sum = 0;  // straggler_report()'s own time
  for (int step = 0; step < kWarmup + steps; ++step) {
    if (rank == slow)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
    std::vector<hvd::Handle> handles;
    for (int t = 0; t < kTensors; ++t)
      handles.push_back(hvd::allreduce_async(std::span<float>(grads[t]),
                                             "grad." + std::to_string(t), hvd::ReduceOp::kSum));
    for (auto& h : handles) h.wait();
    for (auto& g : grads) std::fill(g.begin(), g.end(), 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    const hvd::StragglerReport r = hvd::straggler_report();
    const double call_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (step < kWarmup) continue;
    const int i = step - kWarmup;
    named[i] = r.rank;
    lateness[i] = r.lateness_ms;
    releases[i] = r.releases;
    call_ms_max = std::max(call_ms_max, call_ms);
    call_ms_sum += call_ms;
  }
  std::string why;
  auto fail = [&](const std::string& what) { why += (why.empty() ? "" : "; ") + what; };
  // The same report on every rank.
  std::vector<double> lo = named, hi = named;
  hvd::allreduce_async(std::span<double>(lo), "check.min", hvd::ReduceOp::kMin).wait();
  hvd::allreduce_async(std::span<double>(hi), "check.max", hvd::ReduceOp::kMax).wait();
  for (int i = 0; i < steps; ++i)
    if (lo[i] != hi[i]) {
      fail("step " + std::to_string(kWarmup + i) + ": the ranks named different ranks (" +
           std::to_string(static_cast<int>(lo[i])) + " and " +
           std::to_string(static_cast<int>(hi[i])) + ")");
      break;
    }
  std::vector<int> count(static_cast<size_t>(size) + 1, 0);  // [size]: nobody
  int late_enough = 0, measured = 0;
  double worst_other = 0;
  for (int i = 0; i < steps; ++i) {
    const int n = static_cast<int>(named[i]);
    ++count[n >= 0 && n < size ? n : size];
    if (n == slow && lateness[i] >= sleep_ms / 2) ++late_enough;
    if ((slow < 0 || n != slow) && lateness[i] > worst_other) worst_other = lateness[i];
    if (releases[i] >= 1) ++measured;
  }
  std::string counts;
  for (int r = 0; r < size; ++r)
    counts += " r" + std::to_string(r) + ":" + std::to_string(count[r]);
  counts += " none:" + std::to_string(count[size]);
  std::printf(
      "rank %d: %d steps, slow rank %d (sleep %.0f ms), threshold %.1f ms, named%s; slow rank "
      "named and late by >= half the sleep in %d; largest lateness of the other steps %.2f ms; "
      "straggler_report() took %.3f ms on average, %.3f ms at most\n",
      rank, steps, slow, sleep_ms, hvd::straggler_report().threshold_ms, counts.c_str(),
      late_enough, worst_other, call_ms_sum / steps, call_ms_max);
  if (size == 1) {
    if (count[size] != steps || measured != 0) fail("one rank: some report was not empty");
  } else {
    if (measured != steps)
      fail("a report covered no release (" + std::to_string(measured) + " of " +
           std::to_string(steps) + " did)");
    if (slow >= 0) {
      if (late_enough < (steps * 9 + 9) / 10)
        fail("the slow rank was named (late by >= " + std::to_string(sleep_ms / 2) + " ms) in " +
             std::to_string(late_enough) + " of " + std::to_string(steps) + " steps, want >= 90 %");
      for (int r = 0; r < size; ++r)
        if (r != slow && count[r] * 10 > steps)
          fail("rank " + std::to_string(r) + " (not slowed) was named in " +
               std::to_string(count[r]) + " steps");
    } else if ((steps - count[size]) > max_named_share * steps) {
      fail("no rank is slowed, yet a rank was named in " + std::to_string(steps - count[size]) +
           " of " + std::to_string(steps) + " steps");
    }
  }
  if (!why.empty()) std::printf("rank %d: FAIL: %s\n", rank, why.c_str());
  std::vector<double> ok = {why.empty() ? 1.0 : 0.0};
  hvd::allreduce_async(std::span<double>(ok), "check.ok", hvd::ReduceOp::kMin).wait();
  std::fflush(stdout);
  hvd::shutdown();
  if (ok[0] != 1.0) return 1;
  // With HVD_TIMELINE, rank 0's file holds a STRAGGLER instant event naming the slowed rank for
  // at least 90 % of the counted steps (and none naming another rank in more than 10 %).
  if (const char* path = std::getenv("HVD_TIMELINE"); path && *path && rank == 0) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int> events(static_cast<size_t>(size), 0);
    for (size_t at = text.find("\"STRAGGLER\""); at != std::string::npos;
         at = text.find("\"STRAGGLER\"", at + 1)) {
      const size_t r = text.find("\"rank\":", at);
      if (r == std::string::npos) break;
      const int who = std::atoi(text.c_str() + r + 7);
      if (who >= 0 && who < size) ++events[static_cast<size_t>(who)];
    }
    std::printf("rank 0: timeline %s: STRAGGLER events per rank:", path);
    for (int r = 0; r < size; ++r) std::printf(" r%d:%d", r, events[static_cast<size_t>(r)]);
    std::printf("\n");
    for (int r = 0; r < size; ++r) {
      const bool want = r == slow;
      if (want ? events[static_cast<size_t>(r)] * 10 < steps * 9
               : events[static_cast<size_t>(r)] * 10 > steps + 10 * kWarmup) {
        std::printf("rank 0: FAIL: the timeline has %d STRAGGLER events naming rank %d\n",
                    events[static_cast<size_t>(r)], r);
        return 1;
      }
    }
  }
  if (rank == 0)
    std::printf("PASS: %s on %d ranks over %d steps\n",
                slow >= 0 ? ("the slowed rank " + std::to_string(slow) + " was named").c_str()
                          : "no rank slowed, none named beyond the allowance",
                size, steps);
  return 0;
}
