#pragma once

// The in-process harness of the controller's tests (test_controller.cc, test_lanes.cc): 1-4 ranks
// as threads of one process (tests/runtime/in_process_channel.h), no MPI, each with its own tensor
// queue and Controller. A test body runs on every rank and checks its own results; the main thread
// then checks that every rank saw the same response list.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/controller.h"
#include "runtime/group_unit.h"
#include "runtime/response_cache.h"
#include "tests/runtime/in_process_channel.h"

namespace hvd::controller_test {

using testing::InProcessHub;
using Clock = std::chrono::steady_clock;

// One tensor of a (possibly fused) response, as a rank executed it.
// One response per tensor of a (possibly fused) response: what each tensor's Seen record shows.
inline std::vector<Response> split_response(const Response& fused) {
  std::vector<Response> out;
  out.reserve(fused.names.size());
  const size_t per = fused.names.empty() ? 0 : fused.first_dims.size() / fused.names.size();
  for (size_t i = 0; i < fused.names.size(); ++i) {
    Response r = fused;
    r.names = {fused.names[i]};
    r.shapes = {fused.shapes.at(i)};
    if (!fused.lanes.empty()) r.lanes = {fused.lanes.at(i)};
    r.first_dims.assign(fused.first_dims.begin() + i * per,
                        fused.first_dims.begin() + (i + 1) * per);
    out.push_back(std::move(r));
  }
  return out;
}

struct Seen {
  ResponseType type;
  std::string name;
  std::vector<int64_t> shape;
  int contributors;
  std::string error;
  int last_joined_rank;
  std::vector<int64_t> first_dims;
  size_t fused_with;  // tensors in the response it came in
  bool operator==(const Seen&) const = default;
};

inline std::string describe(const std::vector<Seen>& seen) {
  std::string out;
  for (const auto& s : seen)
    out += std::string(response_type_name(s.type)) + " " + s.name + " (" +
           std::to_string(s.contributors) + ")" + (s.error.empty() ? "" : ": " + s.error) + "\n";
  return out;
}

inline Request request(int rank, const std::string& name,
                       RequestType type = RequestType::kAllreduce, std::vector<int64_t> shape = {4},
                       DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.type = type;
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = dtype;
  if (type == RequestType::kBroadcast) r.root = 0;
  return r;
}

inline Request join_request(int rank) {
  return request(rank, "__hvd.join", RequestType::kJoin, {});
}

// One rank: its queue and controller, and the helpers a test body uses.
class Rank {
 public:
  Rank(InProcessHub& hub, int rank, const ControllerOptions& options)
      : rank_(rank), size_(hub.size()), controller_(hub.channel(rank), options, queue_) {}

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Submits requests atomically (as one group would be).
  void submit(std::vector<Request> requests) {
    std::vector<TensorTableEntry> entries;
    for (const auto& r : requests) {
      TensorTableEntry e;
      e.name = r.name;
      e.type = r.type;
      entries.push_back(std::move(e));
    }
    queue_.add(std::move(entries), std::move(requests));
  }
  void submit(Request r) { submit(std::vector<Request>{std::move(r)}); }
  // A group as grouped_allreduce_async() queues it (runtime/group_unit.h): one unit request and
  // one entry holding the members (no data: the controller never touches it).
  void submit_unit(const std::string& group, const std::vector<TensorRef>& members) {
    Request q;
    TensorTableEntry e;
    group_unit::make(rank_, group, ReduceOp::kSum, false, members, members,
                     detail::make_handle_state(1), &q, &e);
    queue_.add_one(std::move(e), std::move(q));
  }

  // allreduce_async's lane path (runtime/lanes.h): a float32 sum of this shape,
  // with a handle the test may keep (*handle). Returns what the queue said.
  TensorQueue::LaneResult submit_lane(const std::string& name, std::vector<int64_t> shape = {4},
                                      std::shared_ptr<detail::HandleState>* handle = nullptr) {
    TensorRef in(nullptr, DataType::kFloat32, shape), out(nullptr, DataType::kFloat32, shape);
    auto state = detail::make_handle_state(1);
    if (handle) *handle = state;
    return queue_.try_lane(name, in, out, ReduceOp::kSum, 1.0, 1.0, false, state, rank_);
  }
  TensorQueue& queue() { return queue_; }
  // A first step of `name` (4 floats), through rank 0, after which its lane is open (the runtime
  // syncs the lanes after running a cycle's responses).
  void negotiate(const std::string& name) {
    submit(request(rank_, name));
    until({name});
    controller_.sync_lanes();
  }
  int lane_members() const { return lane_members_; }

  // One cycle; the tensors of its responses leave the queue (as the runtime's perform() takes
  // them). Returns them.
  std::vector<Seen> cycle(bool shutdown_requested = false, bool* shutdown = nullptr,
                          bool stop_requested = false, bool* stop = nullptr) {
    Controller::CycleFlags any;
    std::vector<Response> responses =
        controller_.cycle({.shutdown = shutdown_requested, .stop = stop_requested}, &any);
    if (shutdown) *shutdown = any.shutdown;
    if (stop) *stop = any.stop;
    std::vector<Seen> out;
    for (const auto& fused : responses) {
      if (!fused.lanes.empty()) {
        // Members in lanes have neither name nor shape: the lane and its tensors have them.
        std::vector<std::optional<TensorTableEntry>> taken(fused.names.size());
        queue_.take_all(fused, [&](size_t i, TensorTableEntry* e) {
          if (e) taken[i] = std::move(*e);
        });
        for (size_t i = 0; i < fused.names.size(); ++i) {
          const bool lane = fused.lanes[i] != kNoLane;
          if (lane && !taken[i])
            throw std::runtime_error("rank " + std::to_string(rank_) + ": lane " +
                                     std::to_string(fused.lanes[i]) + " held no tensor");
          lane_members_ += lane ? 1 : 0;
          out.push_back({fused.type,
                         queue_.member_name(fused, i),
                         lane ? taken[i]->input.shape().vec() : fused.shapes[i],
                         fused.contributors,
                         fused.error,
                         fused.last_joined_rank,
                         {},
                         fused.names.size()});
          if (taken[i] && taken[i]->handle) taken[i]->handle->complete_one();
        }
        continue;
      }
      for (const auto& r : split_response(fused)) {
        out.push_back({r.type, r.names[0], r.shapes[0], r.contributors, r.error, r.last_joined_rank,
                       r.first_dims, fused.names.size()});
        queue_.take(r.names[0]);
      }
    }
    seen_.insert(seen_.end(), out.begin(), out.end());
    return out;
  }

  // Cycles until every one of `names` has had its response (every rank sees them in the same
  // cycle, so every rank runs as many cycles); returns the responses of those cycles.
  std::vector<Seen> until(const std::vector<std::string>& names) {
    std::vector<Seen> out;
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    auto done = [&] {
      for (const auto& n : names) {
        bool found = false;
        for (const auto& s : out) found = found || s.name == n;
        if (!found) return false;
      }
      return true;
    };
    while (!done()) {
      if (Clock::now() > give_up)
        throw std::runtime_error("rank " + std::to_string(rank_) + ": no response for " +
                                 names.front() + " after 20 s; had:\n" + describe(out));
      std::vector<Seen> got = cycle();
      out.insert(out.end(), got.begin(), got.end());
    }
    return out;
  }

  Seen find(const std::vector<Seen>& seen, const std::string& name) const {
    for (const auto& s : seen)
      if (s.name == name) return s;
    throw std::runtime_error("rank " + std::to_string(rank_) + ": no response for " + name);
  }

  const std::vector<Seen>& seen() const { return seen_; }
  Controller& controller() { return controller_; }

 private:
  int rank_, size_;
  TensorQueue queue_;
  Controller controller_;
  std::vector<Seen> seen_;
  int lane_members_ = 0;
};

inline ControllerOptions test_options() {
  ControllerOptions o;
  o.peer_timeout_seconds = 10;  // a rank that fails its test stops; the others fail, not hang
  o.coordinator_grace_seconds = 0.2;
  return o;
}

// Runs `body` on `n` ranks (threads), each with its own controller on one hub. A rank whose body
// throws fails the test with its message. Returns every rank's responses, by rank.
inline std::vector<std::vector<Seen>> run_ranks(int n, const std::function<void(Rank&)>& body,
                                                ControllerOptions options = test_options(),
                                                InProcessHub* shared_hub = nullptr) {
  InProcessHub own_hub(n);
  InProcessHub& hub = shared_hub ? *shared_hub : own_hub;
  std::vector<std::vector<Seen>> seen(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        Rank rank(hub, r, options);
        body(rank);
        seen[r] = rank.seen();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " of " << n << ": " << e.what();
        hub.drop(r);  // the others see silence instead of waiting for this rank
      }
    });
  for (auto& t : threads) t.join();
  return seen;
}

inline void expect_same_everywhere(const std::vector<std::vector<Seen>>& seen) {
  for (size_t r = 1; r < seen.size(); ++r)
    EXPECT_EQ(seen[r], seen[0]) << "rank " << r << ":\n"
                                << describe(seen[r]) << "rank 0:\n"
                                << describe(seen[0]);
}

}  // namespace hvd::controller_test
