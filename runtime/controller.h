#pragma once

// The controller: each cycle, the ranks agree on which tensors are ready everywhere. It is the
// protocol only; the messages travel on a comm::ControlChannel (MPI in hvd, in-process threads in
// the unit tests), and rank 0's message table is the Coordinator (runtime/coordinator.h).
//
// Protocol (one cycle, the same steps on every rank):
//  1. Pop this rank's new requests. A request whose parameters match a cached response marks the
//     cache position in a "hit" bit vector; one whose name is cached with other parameters clears
//     the position's "valid" bit and goes the slow way; anything else goes the slow way. (A group
//     takes the fast path only when every member hits; cached hits that waited longer than
//     fast_path_patience_seconds go the slow way, their entries invalidated.) A group unit's
//     request (runtime/group_unit.h) is one request like any other, except that it goes the slow
//     way as its members (go_slow).
//  2. One AND of [flags | hit bits | valid bits] across ranks, rooted at rank 0
//     (ControlChannel::star_and: a star, or up and down a binomial tree, HVD_CONTROL_TOPOLOGY):
//     every rank's vector reaches rank 0, which ANDs them and replies. The flags are inverted so
//     that AND answers "does ANY rank ...": want to shut down, have uncached requests, have joined,
//     want to stop (hvd/stop.h: the ranks learn of a stop request in the same cycle).
//     The star has a deadline (peer_timeout_seconds; the other ranks give rank 0
//     coordinator_grace_seconds more): a rank that stays silent, and does not answer the liveness
//     probe (`unresponsive`), is lost, and every rank throws a CommunicationError naming it ("rank
//     K was lost: ..."); rank 0 tells the others in its reply.
//  3. Positions with a cleared valid bit are erased everywhere (pending hits there go slow).
//     If any rank has joined, all pending hits go slow (rank 0 must count contributors).
//     Otherwise positions whose hit bit survived the AND are ready on every rank: their cached
//     responses run, in position order, with no message to rank 0 (the fast path).
//  4. If any rank has uncached requests (the slow path): every rank's serialised requests are
//     gathered to rank 0 (ControlChannel::gather), which adds them to its message table, validates
//     every tensor that all non-joined ranks have submitted and broadcasts one response list
//     (ControlChannel::broadcast; an ERROR response for a mismatch, so every rank fails that handle
//     with the same message instead of hanging).
//  5. Every rank puts the slow-path responses into its cache (identically, so the caches stay
//     equal; a group whose members all succeeded as its one unit response), re-checks its pending
//     hits against evictions, and fuses the list (runtime/fusion.h).
//  A cycle that released operations is measured in the next cycle: two more words of the vector,
//  combined by maximum, carry every rank's wait for that release, so every rank learns which rank
//  arrived last and by how much (runtime/straggler.h; the global set only).
// The returned list is identical on every rank, in the same order.
//
// Thread safety: background thread only.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comm/control_channel.h"
#include "runtime/autotune.h"
#include "runtime/coordinator.h"
#include "runtime/fusion.h"
#include "runtime/message.h"
#include "runtime/parameters.h"
#include "runtime/response_cache.h"
#include "runtime/straggler.h"
#include "runtime/tensor_queue.h"

namespace hvd {

struct ControllerOptions {
  // The live parameters (runtime/parameters.h), of which this controller reads the fusion
  // threshold every cycle; null: the defaults (ParameterValues{}), its own.
  std::shared_ptr<const Parameters> params;
  // HVD_AUTOTUNE (runtime/autotune.h): the search's verdicts travel in this channel's control
  // vector while it runs, and the fast path finds the step marker on rank 0. The global set only;
  // null: none. Every rank of the channel must agree.
  std::shared_ptr<Autotuner> tuner;
  size_t cache_capacity = 1024;
  // A cached tensor that waits this long for the other ranks goes to rank 0 instead, where the
  // stall inspector can see it (its cache entry is invalidated everywhere first).
  double fast_path_patience_seconds = 5;
  double peer_timeout_seconds = 30;  // HVD_PEER_TIMEOUT_SECONDS
  // Rank 0 may itself be stuck in a data-plane op with the lost rank: its watchdog probes every
  // rank after HVD_PEER_TIMEOUT_SECONDS (up to 3 s) and tells the others whom it lost. The other
  // ranks wait this much longer than rank 0 before blaming rank 0, so that rank 0 (which may have
  // entered the cycle a little later) names the real culprit first.
  double coordinator_grace_seconds = 5;
  // Of these silent ranks, those that do not answer the watchdogs' liveness probe either (the
  // really lost ones); the others are alive but busy or slow. Empty: every silent rank is lost.
  std::function<std::vector<int>(const std::vector<int>& ranks)> unresponsive;
  // Rank 0: tells every rank's watchdog which ranks were lost (besides the reply of this cycle,
  // which a rank busy in a collective would not read). Empty: nothing.
  std::function<void(const std::vector<int>& lost)> announce_lost;
  // Called when a group unit goes the slow way as its members (runtime/group_unit.h): the
  // timeline's rows follow. Empty: nothing.
  std::function<void(const std::string& group, int32_t members)> on_unit_expanded;
  // Open a lane in the queue for every cached single allreduce (runtime/lanes.h;
  // HVD_CACHED_LANES).
  bool lanes = true;
  // Where the measure of each release goes (runtime/straggler.h); null: none is measured (a job of
  // one rank, a process set other than the global one). Every rank of the channel must agree.
  std::shared_ptr<StragglerWindow> straggler;
  // The global rank of each rank of the channel (a process set's members), for messages; empty:
  // the channel's ranks are global ones. `unresponsive` and `announce_lost` take channel ranks.
  std::vector<int> global_ranks;
};

class Controller {
 public:
  Controller(std::unique_ptr<comm::ControlChannel> channel, const ControllerOptions& options,
             TensorQueue& queue);

  // What a rank asks for in a cycle, and (after the AND) whether any rank did.
  struct CycleFlags {
    bool shutdown = false;  // hvd::shutdown(): every rank stops after this cycle's responses
    bool stop = false;      // hvd::request_stop(): the training loop stops at an agreed step
    // A process set's run of cycles (ProcessSetTable::cycle, runtime/process_set.h): `leave` ends
    // the run after this cycle. `more` is an answer only: a rank took new requests this cycle.
    bool leave = false;
    bool more = false;
  };
  // Runs one cycle with this rank's flags `mine`; *any receives whether any rank set each.
  std::vector<Response> cycle(const CycleFlags& mine, CycleFlags* any);

  // Rank 0, for the stall inspector: see Coordinator::stalled.
  using Stall = Coordinator::Stall;
  std::vector<Stall> stalled(double older_than_seconds) const {
    return coordinator_.stalled(older_than_seconds);
  }
  // Rank 0: fail these tensors on every rank that submitted them (on the next slow path), and
  // tell every rank why hvd is shutting down (an error response named kShutdownNotice).
  void fail_stalled(const std::vector<std::pair<std::string, std::string>>& failures,
                    const std::string& shutdown_reason) {
    coordinator_.fail_stalled(failures, shutdown_reason);
  }

  // After the responses of a cycle have run: the queue's lanes follow the entries that cycle put
  // into the response cache (runtime/lanes.h), so that the next step's tensors find
  // their lanes. (Not before they have run: one of them may run from a lane whose position was just
  // given to another tensor.) The next cycle does it first if the caller did not.
  void sync_lanes();

  // After the last cycle of a normal shutdown: lets the last replies reach their ranks (at most
  // `seconds`), so that no send is pending when the transport shuts down.
  void finish(double seconds) { channel_->finish(seconds); }

 private:
  void take_requests();
  // A request's cache lookup, done once per cycle (a group's verdict and classify() share it).
  struct Looked {
    ResponseCache::Lookup result = ResponseCache::Lookup::kMiss;
    uint32_t pos = 0;
  };
  void classify(Request&& r, const Looked& looked);
  void go_slow(Request&& r);
  std::vector<Looked> looked_;  // take_requests()' scratch, reused
  std::vector<uint64_t> local_bits(const CycleFlags& mine);
  void exchange_bits(std::vector<uint64_t>& bits);
  std::vector<int> probe_silent(const std::vector<int>& ranks, double waited) const;
  std::vector<int> global(std::vector<int> ranks) const;  // channel ranks to global ones
  void erase_invalid(const std::vector<uint64_t>& bits);
  std::vector<Response> fast_path(const std::vector<uint64_t>& bits);
  std::vector<Response> slow_path();
  void requeue_evicted_hits();

  std::unique_ptr<comm::ControlChannel> channel_;
  int rank_, size_;
  ControllerOptions options_;
  TensorQueue& queue_;
  ResponseCache cache_;
  size_t cache_words_;
  std::chrono::nanoseconds patience_;  // options_.fast_path_patience_seconds, for the pending hits

  bool joined_ = false;
  bool took_ = false;  // take_requests() took new requests this cycle (CycleFlags::more)
  // The requests waiting for the AND, by cache position (flat tables: a cycle of 1000 cached
  // gradients allocates nothing here); pending_bits_ marks the positions that hold one. Kept as
  // separate arrays: the per-hit work of every cycle (the patience check, the fast path) reads the
  // dense times and bits, 8 bytes and 2 bits per position, and never the requests, which a lane's
  // submission does not have (the queue holds it); at 1000 hits a cycle, whose records the step's
  // data has pushed out of the cache since the last cycle, each record's own cache line was a miss.
  std::vector<Request> pending_requests_;  // unused for a lane's submission
  std::vector<std::chrono::steady_clock::time_point> pending_since_;
  std::vector<uint64_t> pending_bits_;
  std::vector<uint64_t> pending_lane_bits_;  // the pending hit is a lane's submission
  bool has_pending(uint32_t pos) const {
    return pos / 64 < pending_bits_.size() && (pending_bits_[pos / 64] >> (pos % 64) & 1);
  }
  bool pending_lane(uint32_t pos) const {  // has_pending(pos)
    return pending_lane_bits_[pos / 64] >> (pos % 64) & 1;
  }
  // request: moved from; null for a lane's submission (the queue holds it).
  void add_pending(uint32_t pos, Request* request, std::chrono::steady_clock::time_point since);
  // has_pending(pos): clears its bit and returns its request, for the caller to move from.
  Request& take_pending(uint32_t pos);
  // A lane's popped submission at `pos` (pending) goes the slow way as an ordinary request.
  void lane_goes_slow(uint32_t pos);
  // After a put at `pos` (-1: nothing put): the queue's lane there follows the cache's entry from
  // the next cycle on (sync_lanes(), at its start).
  void lane_to_sync(int64_t pos) {
    if (pos >= 0) lanes_to_sync_.push_back(static_cast<uint32_t>(pos));
  }
  std::vector<uint32_t> lanes_to_sync_;
  std::vector<uint32_t> popped_lanes_;  // take_requests()' scratch, reused
  template <typename F>
  void for_each_pending(F&& f) const;  // f(pos), in position order
  void requeue_all_pending();
  std::vector<uint32_t> invalid_positions_;
  std::vector<Request> uncached_;
  std::vector<Request> fresh_;  // take_requests()' scratch: swapped with the queue's (no copies)

  // The straggler measure (runtime/straggler.h), when options_.straggler: the latest local arrival
  // of a tensor this cycle released, this rank's wait for the last release (-1: nothing of its
  // own in it), to be sent with the next cycle, and the arrivals of requests sent to rank 0.
  using TimePoint = std::chrono::steady_clock::time_point;
  bool measure_ = false;
  TimePoint latest_arrival_{};
  bool measure_pending_ = false;
  int64_t measure_wait_us_ = -1;
  std::unordered_map<std::string, TimePoint> slow_arrivals_;
  void arrived(TimePoint t) {
    if (t > latest_arrival_) latest_arrival_ = t;
  }
  void measure_release(bool released);
  void find_marker(const std::vector<Response>& responses);
  size_t straggler_offset_ = 0;  // where the straggler words start in this cycle's vector

  // HVD_AUTOTUNE: whether this cycle's vector holds the tuner's word (where it starts), and, on
  // rank 0, the step marker (runtime/autotune.h): a cache position (or a name when the cache is
  // off) and whether this cycle released it.
  bool tuning_ = false;
  size_t tuning_offset_ = 0;
  bool watch_marker_ = false;
  int64_t marker_pos_ = -1;
  std::string marker_name_;
  bool marker_seen_ = false;
  int64_t threshold() const { return options_.params->fusion_threshold_bytes(); }

  Coordinator coordinator_;  // rank 0's message table (unused on the other ranks)
};

}  // namespace hvd
