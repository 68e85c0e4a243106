#pragma once

// The controller: each cycle, the ranks agree on which tensors are ready everywhere.
//
// Protocol (one cycle, the same steps on every rank):
//  1. Pop this rank's new requests. A request whose parameters match a cached response marks the
//     cache position in a "hit" bit vector; one whose name is cached with other parameters clears
//     the position's "valid" bit and goes the slow way; anything else goes the slow way.
//  2. One MPI_Allreduce(BAND) of [flags | hit bits | valid bits]. The flags are inverted so that AND
//     answers "does ANY rank ...": want to shut down, have uncached requests, have joined.
//  3. Positions with a cleared valid bit are erased everywhere (pending hits there go slow).
//     If any rank has joined, all pending hits go slow (rank 0 must count contributors).
//     Otherwise positions whose hit bit survived the AND are ready on every rank: their cached
//     responses run, in position order, with no message to rank 0 (the fast path).
//  4. If any rank has uncached requests (the slow path): MPI_Gatherv of the serialised requests to
//     rank 0, which adds them to its message table, validates every tensor that all non-joined
//     ranks have submitted (op, dtype, shape, reduce op, scale factors, root, device, group) and
//     broadcasts one response list (an ERROR response for a mismatch, so every rank fails that
//     handle with the same message instead of hanging).
//  5. Every rank puts the slow-path responses into its cache (identically, so the caches stay
//     equal), re-checks its pending hits against evictions, and fuses the list (runtime/fusion.h).
// The returned list is identical on every rank, in the same order.
//
// Thread safety: background thread only.

#include <functional>
#include <mpi.h>

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/fusion.h"
#include "runtime/message.h"
#include "runtime/response_cache.h"
#include "runtime/tensor_queue.h"

namespace hvd {

struct ControllerOptions {
  int64_t fusion_threshold_bytes = 64 << 20;
  size_t cache_capacity = 1024;
  // A cached tensor that waits this long for the other ranks goes to rank 0 instead, where the
  // stall inspector can see it (its cache entry is invalidated everywhere first).
  double fast_path_patience_seconds = 5;
  double peer_timeout_seconds = 30;  // HVD_PEER_TIMEOUT_SECONDS
  // Of these silent ranks, those that do not answer the watchdogs' liveness probe either (the
  // really lost ones); the others are alive but busy or slow. Empty: every silent rank is lost.
  std::function<std::vector<int>(const std::vector<int>& ranks)> unresponsive;
  // Rank 0: tells every rank's watchdog which ranks were lost (besides the reply of this cycle,
  // which a rank busy in a collective would not read). Empty: nothing.
  std::function<void(const std::vector<int>& lost)> announce_lost;
};

// The name of the error response that carries the reason for a shutdown decided on rank 0.
inline constexpr const char* kShutdownNotice = "__hvd.shutdown";

class Controller {
 public:
  Controller(MPI_Comm comm, int rank, int size, const ControllerOptions& options,
             TensorQueue& queue);

  // Runs one cycle. `shutdown_requested`: this rank wants to stop. On return, *shutdown tells
  // whether any rank asked (then every rank stops after executing the returned responses).
  std::vector<Response> cycle(bool shutdown_requested, bool* shutdown);

  // Names submitted by some ranks and not others, for the stall inspector (rank 0 only), in order
  // of arrival: who submitted, who did not (joined ranks are neither), and the seconds since the
  // first submission on any rank.
  struct Stall {
    std::string name;
    std::vector<int> submitted_ranks;
    std::vector<int> missing_ranks;
    double seconds = 0;
  };
  std::vector<Stall> stalled(double older_than_seconds) const;
  // Rank 0: fail these tensors on every rank that submitted them (on the next slow path), and
  // tell every rank why hvd is shutting down (an error response named kShutdownNotice).
  void fail_stalled(const std::vector<std::pair<std::string, std::string>>& failures,
                    const std::string& shutdown_reason);

 private:
  void classify(Request&& r);
  void exchange_bits(std::vector<uint64_t>& bits);
  void reap_replies();  // rank 0: forgets the bit-exchange replies whose sends have completed

 public:
  // After the last cycle of a normal shutdown: lets the last replies reach their ranks (at most
  // `seconds`), so that no send is pending when MPI is finalised.
  void finish(double seconds);

 private:
  std::vector<Response> slow_path();
  void coordinator_add(std::vector<Request>&& requests);
  std::vector<Response> coordinator_ready();
  Response build_response(const std::string& name);

  MPI_Comm comm_;
  int rank_, size_;
  ControllerOptions options_;
  TensorQueue& queue_;
  ResponseCache cache_;
  size_t cache_words_;

  bool joined_ = false;
  struct PendingHit {
    Request request;
    std::chrono::steady_clock::time_point since;
  };
  std::map<uint32_t, PendingHit> cached_pending_;  // position -> request waiting for the AND
  std::vector<uint32_t> invalid_positions_;
  std::vector<Request> uncached_;

  // Rank 0: the message table.
  struct TableEntry {
    std::vector<Request> requests;  // by rank; rank == -1 when not yet submitted
    int count = 0;
    std::chrono::steady_clock::time_point first_seen;
  };
  std::unordered_map<std::string, TableEntry> table_;
  std::vector<std::string> arrival_;  // names in order of first arrival
  std::set<int> joined_ranks_;
  int last_joined_ = -1;
  std::map<std::string, std::vector<Response>> group_members_;
  std::map<std::string, int> group_sizes_;
  std::vector<std::pair<std::string, std::string>> stall_failures_;
  std::string shutdown_notice_;
  bool force_slow_ = false;
  // Rank 0: bit-exchange replies still being sent (the buffer lives until every send completes).
  struct PendingReply {
    std::vector<uint64_t> buffer;
    std::vector<MPI_Request> requests;
  };
  std::deque<PendingReply> replies_;
};

}  // namespace hvd
