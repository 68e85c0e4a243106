#pragma once

// SLURM's compressed notations, expanded exactly as SLURM expands them.
//
// Hostlists ("node[01-04,07],login1") name the nodes of an allocation or a job step
// (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST). Task counts ("2(x3),1") give the tasks on each of
// those nodes in the same order (SLURM_TASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE).
//
// Contract:
//  - Order is SLURM's: entries left to right; inside an entry, bracket groups vary like an odometer
//    (the rightmost group fastest), ranges in the order written. Nothing is sorted or
//    de-duplicated: the i-th name pairs with the i-th task count and SLURM_NODEID i.
//  - Zero padding is kept: the width of a range is the number of digits of its lower bound
//    ("[01-10]" -> 01..10, "[9-11]" -> 9 10 11), as in SLURM's hostlist.c.
//  - Every name must be a host name (cluster/host_name.h): "n[1-2];x" is refused, naming the
//    entry's position, the name and the character.
//  - Malformed input throws hvd::InvalidArgumentError naming the input, the 0-based character
//    position and what was expected there. An empty (or all-blank) string is an empty list.
//  - Expansion is bounded (kMaxExpandedHosts names, 64 MiB of names in all) so that a hostile
//    string cannot exhaust memory.
//  - Pure functions; thread-safe.

#include <cstddef>
#include <string>
#include <vector>

namespace hvd::cluster {

// Upper bound on the names one hostlist or task-count string may expand to.
inline constexpr std::size_t kMaxExpandedHosts = 1u << 20;

// "node[01-04,07]" -> {"node01","node02","node03","node04","node07"}.
// Entries are separated by commas outside brackets (and by blanks, which SLURM also accepts).
std::vector<std::string> expand_hostlist(const std::string& hostlist);

// "2(x3),1" -> {2,2,2,1}. Each element is "N" or "N(xM)" with N >= 0 and M >= 1.
std::vector<int> expand_task_counts(const std::string& counts);

}  // namespace hvd::cluster
