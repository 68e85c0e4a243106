#pragma once

// The test hooks: HVD_TEST_* variables, hidden entries of the configuration registry
// (common/config.cc: parsed by load_config() like every setting, but no hvdrun flag and not in
// docs/configuration.md; tests/README.md, "Test hooks", lists them). The Runtime reads them once,
// at init (test_hooks_from_config), and its background loop, executors and wiring consult this
// struct; no shipped path calls getenv for them.
//
//   HVD_TEST_PAUSE_BACKGROUND=RANK:SECONDS:CYCLE  that rank's background thread sleeps once, before
//       that cycle: a rank that is alive (its watchdog answers) but silent in the negotiation, as
//       on an overloaded node (tests/reliability/test_slow_rank.sh, test_control_tree.sh).
//   HVD_TEST_STOP_IN_OP=RANK:N  that rank's whole process stops (SIGSTOP) right before its N-th
//       data-plane batch (from 1), in every process set it is rank RANK of: a rank frozen in the
//       middle of a collective, as behind a dead link, while its peers have entered it
//       (tests/reliability/test_lost_rank.sh, mode "handler").
//   HVD_TEST_FAKE_LOCAL_SIZE=N  the world split into fake nodes of N consecutive ranks (the
//       hierarchical tests: tests/collectives/test_hierarchical.cc, tests/training).
//   HVD_TEST_OP_DELAY_US=N  every data-plane batch of every rank sleeps N us first: a fixed cost
//       per operation, which makes the best fusion threshold known by construction (tests/tuning).
//
// A value that does not parse as RANK:..., or a RANK that is not this rank, does nothing.

#include <cstdint>

#include "common/config.h"

namespace hvd {

struct TestHooks {
  // HVD_TEST_PAUSE_BACKGROUND: the rank it names, -1 for none.
  int pause_rank = -1;
  double pause_seconds = 0;
  long pause_cycle = -1;
  // HVD_TEST_STOP_IN_OP: the rank (in a process set) it names, -1 for none.
  int stop_rank = -1;
  long stop_batch = -1;
  // HVD_TEST_FAKE_LOCAL_SIZE (0: the real nodes).
  int fake_local_size = 0;
  // HVD_TEST_OP_DELAY_US (0: none).
  int64_t op_delay_us = 0;

  // The cycle before which the background thread of global rank `rank` sleeps
  // (pause_seconds), or -1.
  long pause_cycle_of(int rank) const { return rank == pause_rank ? pause_cycle : -1; }
  // The data-plane batch (from 1) before which the executor of set rank `rank` stops the process,
  // or -1.
  long stop_batch_of(int rank) const { return rank == stop_rank ? stop_batch : -1; }
};

TestHooks test_hooks_from_config(const Config& config);

}  // namespace hvd
