#pragma once

// What a job's stderr says about the ranks and nodes it lost, read line by line as hvdrun copies
// it through (exec.cc). Two sources, because whoever notices a loss first reports it:
//  - hvd's lost-rank sentence (common/ranks.h lost_ranks_message), printed by the surviving ranks
//    when a peer stops answering: "rank 2 was lost: ...", "ranks 2, 3 were lost: ...",
//    "ranks 0-2, 5 were lost: ..." (a node cut off: its ranks are silent, the others exit 70);
//  - Open MPI's notices: "mpirun noticed that process rank 2 with PID 0 on node node2 exited on
//    signal 9 (Killed)." (a rank killed outright: mpirun ends the job within a second, before any
//    survivor's watchdog has spoken) and "Remote daemon: [[1234,0],1] on node node2" (mpirun lost
//    a node's daemon).
// Only SIGKILL counts as a loss among the signal deaths: it is what the OOM killer, a node's
// shutdown and `kill -9` send; a rank that crashes (SIGSEGV, SIGABRT) has a bug a restart would
// only repeat.
//
// Pure parsing, no side effects: unit-tested in tests/launcher/test_launcher_plan.cc.

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::launcher {

struct JobLoss {
  std::set<int> lost_ranks;                 // named in hvd's lost-rank sentence
  std::set<int> killed_ranks;               // mpirun: died on SIGKILL
  std::set<std::string> killed_on_hosts;    // the nodes mpirun named for killed_ranks
  std::set<std::string> lost_daemon_hosts;  // mpirun lost the daemon of these nodes
  bool any() const {
    return !lost_ranks.empty() || !killed_ranks.empty() || !lost_daemon_hosts.empty();
  }
};

// The ranks named by hvd's lost-rank sentence in `line`, or nullopt when it has none. Accepts
// rank_list's forms: "rank 3", "ranks 2, 3", "ranks 0-2, 5"; a list cut short with
// " and N more" gives the ranks it names.
std::optional<std::vector<int>> parse_lost_ranks(std::string_view line);

// Feeds stderr as it comes (in pieces of any size) and collects a JobLoss from whole lines.
class JobLossScanner {
 public:
  void feed(std::string_view bytes);
  const JobLoss& loss() const { return loss_; }

 private:
  void scan_line(std::string_view line);
  std::string partial_;  // the current line so far (bounded: a runaway line is cut)
  JobLoss loss_;
};

}  // namespace hvd::launcher
