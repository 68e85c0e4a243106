#pragma once

// The control channel over MPI (comm/control_channel.h). Its gather is MPI_Gather + MPI_Gatherv,
// its broadcast two MPI_Bcast (length, bytes). Its bit-vector AND (star_and) takes one of two
// shapes (HVD_CONTROL_TOPOLOGY):
//
//  - star: every rank sends its vector to rank 0, which ANDs them and replies to each (tag 7301,
//    [status | lost rank | bits] replies). Rank 0 handles 2 (n - 1) messages per cycle.
//  - tree (the default): the same AND up a binomial tree (comm/control_tree.h) and the result back
//    down it: rank 0 handles 2 ceil(log2 n) messages per cycle, every rank at most as many.
//
// Why the tree keeps the star's lost-rank semantics (StarPatience / StarOutcome):
//  - Up (tag 7302, [status | lost rank | seconds waited | bits]): each rank waits for its
//    children with the star's deadline. When it passes, the ranks whose bits have not arrived are
//    the silent children's whole subtrees (their bits travel through the child), and those are
//    what patience.silent is shown: it probes them (the watchdog) and names the ones that do not
//    answer, so a lost rank in the middle of the tree is named itself, and its children, which
//    answer, are not. A rank other than 0 that finds a lost rank reports it up (status kLost)
//    instead of its bits; a parent forwards a report at once. Rank 0 takes a report, or its own
//    verdict, as the cycle's outcome (kSilent, lost, seconds waited).
//  - Notice (tag 7304, [kLost | lost rank | 0]): rank 0 then tells every rank it did not lose
//    directly, not down the tree (a lost interior rank would cut its subtree off). Every other rank
//    keeps one receive for it posted from its first cycle on and watches it while it waits, up or
//    down: it returns kReported with the rank named there.
//  - Down (tag 7303, [kOk | 0 | 0 | bits]): each rank waits for its parent's result (deadline:
//    the patience of a rank other than 0; when it passes, patience.silent is shown {0}, as in the
//    star: the coordinator decides), then forwards it to its children. As rank 0's replies in the
//    star, the sends up and down are not waited for (a rank that has just stopped may never take
//    them): they complete in the background and finish() lets the last ones out.
//  A rank's parent lost after it sent its bits up is noticed by rank 0 at the next cycle (that
//  parent stays silent), which names it in its notice; the children waiting on it for the result
//  wait for that notice meanwhile (their probe finds rank 0 alive).
//
// Counters: messages and bytes this rank sent and received in star_and (not gather or broadcast:
// MPI's collectives hide theirs), for the coordination benchmark (tests/bench/control_bench.cc).
//
// Thread safety: background thread only (the contract of ControlChannel); counters() likewise.
// The communicator must stay valid while the channel is used; the destructor makes no MPI call
// (it may run after MPI_Finalize), so sends still pending then are dropped.

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "comm/control_channel.h"
#include "common/config.h"

namespace hvd::comm {

enum class ControlTopology { kStar, kTree };
// From this many ranks up, HVD_CONTROL_TOPOLOGY=auto (the default) takes the tree: below it the
// star's two hops cost less than the tree's 2 log2 n (docs/scaling.md: the fitted model puts the
// crossover near 100 ranks with a core per rank; on an oversubscribed machine the star wins at any
// size measured).
inline constexpr int kAutoTreeFromRanks = 64;
// "auto" | "star" | "tree" (the HVD_CONTROL_TOPOLOGY values, any case) and the job's size -> the
// topology; throws InvalidArgumentError for anything else.
ControlTopology parse_control_topology(const std::string& value, int size = 1);
// The setting (Config::control_topology) and the job's size -> the topology.
ControlTopology resolve_control_topology(ControlTopologySetting setting, int size);

struct ControlCounters {
  uint64_t messages_sent = 0, messages_received = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
};

class MpiControlChannel : public ControlChannel {
 public:
  // Collective over `comm`: checks that every rank passed the same topology (InvalidArgumentError
  // on every rank, naming two that differ, otherwise).
  explicit MpiControlChannel(MPI_Comm comm, ControlTopology topology = ControlTopology::kTree);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  StarOutcome star_and(std::vector<uint64_t>& bits, const StarPatience& patience) override;
  std::vector<std::string> gather(const std::string& mine) override;
  void broadcast(std::string& data) override;
  void finish(double seconds) override;

  ControlTopology topology() const { return topology_; }
  const ControlCounters& counters() const { return counters_; }

 private:
  // The star.
  StarOutcome collect_and_reply(std::vector<uint64_t>& bits, const StarPatience& patience);
  StarOutcome send_and_wait(std::vector<uint64_t>& bits, const StarPatience& patience);
  void send_replies(std::vector<uint64_t> reply, const std::vector<int>& lost);
  // The tree.
  struct Up {               // what a rank's wait for its children ended with
    std::vector<int> lost;  // found by this rank or reported from below; empty: every child's bits
    double waited = 0;      // seconds, when `lost`
    bool reported = false;  // rank 0's notice arrived (it names notice_lost)
    int notice_lost = -1;
  };
  Up tree_up(std::vector<uint64_t>& bits, const StarPatience& patience);
  StarOutcome tree_down(std::vector<uint64_t>& bits, const StarPatience& patience);
  StarOutcome tree_lost(const std::vector<int>& lost, double waited);  // rank 0
  void send_later(std::vector<uint64_t> buffer, const std::vector<int>& to, int tag);
  bool notice_arrived();

  void reap_replies();  // forgets the sends that have completed

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  ControlTopology topology_;
  std::vector<int> children_;  // tree
  int parent_ = -1;            // tree
  ControlCounters counters_;
  // Sends not waited for (star: rank 0's replies; tree: every rank's sends up and down); each
  // buffer lives until its sends complete.
  struct PendingReply {
    std::vector<uint64_t> buffer;
    std::vector<MPI_Request> requests;
  };
  std::deque<PendingReply> replies_;
  // Tree, ranks other than 0: the receive for rank 0's lost-rank notice, posted at the first cycle.
  std::vector<uint64_t> notice_;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
};

}  // namespace hvd::comm
