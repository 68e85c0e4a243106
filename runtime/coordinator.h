#pragma once

// Rank 0's message table: the requests of every rank, gathered by the controller's slow path
// (runtime/controller.h), and the responses they make. A tensor is ready when every rank that has
// not joined has submitted it; its response is then validated (op, dtype, shape, reduce op, scale
// factors, root, device, group: an ERROR response on a mismatch, so that every rank fails that
// handle with the same message instead of hanging). A send/recv (common/op_kind.h, kPair) is ready
// when its two ranks have submitted it. Members of a group are held back until the
// whole group is ready, then released together (all failing if any failed). When every rank has
// joined, one join response names the rank that joined last.
//
// Thread safety: rank 0's background thread only.

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/message.h"

namespace hvd {

// The response every rank runs for this request when all ranks agree with it: its name, shape,
// dtype and parameters, `contributors` ranks contributing (allgather: first_dims of rank 0 only,
// for a job of one rank). Coordinator::build_response() and the single-rank path
// (runtime/runtime.cc).
Response response_for(const Request& request, int32_t contributors);
// The same, moving the request's name, shape and group into the response.
Response response_for(Request&& request, int32_t contributors);
// The same into *out, every field set anew and its vectors' capacity kept (the one-rank inline
// path reuses one Response for every tensor instead of allocating two vectors each time).
void response_for(Request&& request, int32_t contributors, Response* out);

class Coordinator {
 public:
  // `global_ranks`: the global rank of each rank of the process set, for messages (empty: the
  // ranks are global ones).
  explicit Coordinator(int size, std::vector<int> global_ranks = {})
      : size_(size), global_ranks_(std::move(global_ranks)) {}

  // Adds one rank's requests (a join marks the rank joined).
  void add(std::vector<Request>&& requests);
  // The responses to send this cycle, in order: stall failures, the shutdown notice, ready tensors
  // in order of first arrival (complete groups after them), the join response.
  std::vector<Response> ready();

  // Names submitted by some ranks and not others, for the stall inspector, in order of arrival:
  // who submitted, who did not (joined ranks are neither), and the seconds since the first
  // submission on any rank.
  struct Stall {
    std::string name;
    std::vector<int> submitted_ranks;
    std::vector<int> missing_ranks;
    double seconds = 0;
  };
  std::vector<Stall> stalled(double older_than_seconds) const;
  // Fails these tensors on every rank that submitted them (in the next ready()), and tells every
  // rank why hvd is shutting down (an error response named kShutdownNotice).
  void fail_stalled(const std::vector<std::pair<std::string, std::string>>& failures,
                    const std::string& shutdown_reason);
  // fail_stalled() was called since the last ready(): the next cycle must take the slow path.
  bool has_notices() const { return has_notices_; }

 private:
  struct TableEntry {
    std::vector<Request> requests;  // by rank; rank == -1 when not yet submitted
    int count = 0;
    std::chrono::steady_clock::time_point first_seen;
  };
  void add_one(Request&& r, std::chrono::steady_clock::time_point now);
  void release_stall_failures(std::vector<Response>& out);
  void release_ready(std::vector<Response>& out);
  void release_groups(std::vector<Response>& out);
  void release_join(std::vector<Response>& out);
  Response build_response(const std::string& name);
  bool is_ready(const TableEntry& e) const;
  static const Request* submitted(const TableEntry& e);  // a rank's request for it, or null
  static bool is_pair(const Request& r);  // its kind is submitted by two ranks (common/op_kind.h)
  std::string who(const Request& q) const { return "rank " + std::to_string(global(q.rank)); }
  int global(int rank) const {
    return rank >= 0 && rank < static_cast<int>(global_ranks_.size()) ? global_ranks_[rank] : rank;
  }
  std::string mismatch(const Request& a, const Request& b, const std::string& name) const;
  std::string pair_mismatch(const Request& a, const Request& b) const;

  int size_;
  std::vector<int> global_ranks_;
  std::unordered_map<std::string, TableEntry> table_;
  std::vector<std::string> arrival_;  // names in order of first arrival
  std::set<int> joined_ranks_;
  int last_joined_ = -1;
  std::map<std::string, std::vector<Response>> group_members_;
  std::map<std::string, int> group_sizes_;
  std::vector<std::pair<std::string, std::string>> stall_failures_;
  std::string shutdown_notice_;
  bool has_notices_ = false;
};

}  // namespace hvd
