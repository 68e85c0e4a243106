#pragma once

// The slow rank, named every step (docs/reliability.md, "The slow rank").
//
// Every negotiation cycle of the global process set that releases operations is measured: each
// rank takes how long it waited, from the arrival of the last of its own tensors among those
// released to their release (its own clock only). The rank that arrived last waited the least;
// the others waited about its lateness longer. The ranks' waits travel, as a fixed two words, in
// the next cycle's negotiation (no message is added, with the star or the tree), so every rank
// learns, per release, which rank was last and by how much (the largest wait minus the smallest).

#include <cstdint>
#include <vector>

namespace hvd {

struct StragglerReport {
  // Measured releases in the window: negotiation cycles that released operations of the global
  // process set since the previous call.
  int64_t releases = 0;
  // The largest lateness of a release in the window, in milliseconds, and the rank that was last
  // in that release (-1 when there is none). Reported whatever the threshold.
  double lateness_ms = 0;
  int last_rank = -1;
  // The rank named: last_rank when lateness_ms reaches the threshold, otherwise -1 (nobody held
  // the others up beyond the noise).
  int rank = -1;
  double threshold_ms = 0;  // HVD_STRAGGLER_THRESHOLD_MS
  // Per rank (index = rank; empty in a job of one rank): the releases of the window in which it
  // arrived last by at least the threshold.
  std::vector<int64_t> last_counts;
};

// What happened since the previous call (or since init()), on this rank; every rank learns the
// same measures, so calls made at the same point of the training loop (each step's end) return
// the same report on every rank. A release's measure arrives with the next cycle: the call first
// waits for the measure of every release this rank has seen (it asks for that cycle at once, and
// waits at most 1 s; what is not in by then comes with the next call). In a job of one rank
// it returns an empty report at once. Any thread; throws hvd::Error before init().
StragglerReport straggler_report();

}  // namespace hvd
