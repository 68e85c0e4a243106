#pragma once

// Lanes: the steady state of one allreduce_async per tensor, in one type.
//
// Every tensor of a training step is submitted again at the next step with the same name and
// parameters, and its response is then in the response cache (runtime/response_cache.h): a request
// and a table entry found by name would only be built to be matched against that response once
// more. So the controller opens a *lane* for each cached single allreduce, at the cache position of
// its response (TensorQueue::sync_lanes). A submission whose name and parameters match an open
// lane (TensorQueue::try_lane) writes its tensors and handle into the lane and lists the position:
// no request, no name copy, no entry in the table. The controller pops the positions with the
// requests and sets their hit bits; the executor takes the lanes' tensors by position
// (TensorQueue::take_all). Wherever a cached request would go the slow way (patience, a joined
// rank, its cache entry erased or replaced), the lane's submission becomes an entry and a request
// like any other (to_request, close), so everything after the hand-off is the path every tensor
// takes. Lanes exist only for what the cache holds (the controller closes a position's lane when
// the cache drops it, and syncs the lanes of the positions it put one cycle later: a fused response
// of this cycle may still run from a lane whose position the cycle's slow path gave to another
// tensor). Lanes know nothing of the cache.
//
// Outside TensorQueue and Controller, a lane shows only as a position in a fused response
// (Response::lanes: a member in a lane may have no name or shape of its own there).
//
// A lane's states: closed → open (idle) → submitted → popped → taken (idle again), or, from
// submitted or popped, handed back as an entry with a request (idle, or closed).
//
// Thread safety: none of its own. Its one owner, TensorQueue, calls it under the queue's mutex,
// which also guards the queue's table, so that a name is in flight once (in the table or in a
// lane).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/name_index.h"
#include "runtime/table_entry.h"

namespace hvd {

class Lanes {
 public:
  bool none_open() const { return index_.size() == 0; }
  size_t open_count() const { return index_.size(); }
  size_t busy_count() const { return busy_; }  // submitted or popped, not taken yet
  bool any_submitted() const { return !submitted_.empty(); }

  // The open lane named `name`, or -1; *hash: the name's hash when found. Tries first the lane
  // submitted after the last submission's lane the step before (no hash, no probe; see next_).
  int64_t find(const std::string& name, uint64_t* hash) const {
    const uint32_t guess = last_ < lanes_.size() ? lanes_[last_].next : kNoLane;
    if (guess < lanes_.size() && lanes_[guess].state != State::kClosed &&
        lanes_[guess].name == name) {
      *hash = lanes_[guess].hash;
      return guess;
    }
    *hash = NameIndex::hash(name);
    return find_hashed(name, *hash);
  }
  // A submission is in the lane at `pos` (open), or was popped and not taken yet.
  bool busy(uint32_t pos) const { return lanes_[pos].busy(); }
  // A busy lane has this name (h: its hash).
  bool in_flight(const std::string& name, uint64_t h) const {
    if (index_.size() == 0) return false;
    const int64_t l = find_hashed(name, h);
    return l >= 0 && lanes_[l].busy();
  }
  // The open lane at `pos` takes a submission with these parameters (those of its response).
  bool takes(uint32_t pos, const TensorRef& in, ReduceOp op, double prescale, double postscale,
             bool deterministic) const {
    return lanes_[pos].takes(in.dtype(), in.device().kind, op, prescale, postscale, deterministic,
                             in.shape());
  }
  // The open, idle lane at `pos` (find, takes) holds the tensors and the handle until popped.
  // `since`: when the burst it belongs to began (the request the lane's submission may become
  // carries it). Prefetches what the next two submissions will likely read.
  void submit(uint32_t pos, const std::string& name, TensorRef& in, TensorRef& out,
              const std::shared_ptr<detail::HandleState>& handle,
              std::chrono::steady_clock::time_point since);

  // Appends the positions submitted since the last pop to *out (swaps when *out is empty) and
  // marks them popped.
  void pop(std::vector<uint32_t>* out);
  // The popped lane at `pos`: its entry (no name), for the caller to move from under the owner's
  // lock; the lane is idle again. Null when no popped submission is there (closed at shutdown).
  TensorTableEntry* take(uint32_t pos) {
    if (pos >= lanes_.size() || lanes_[pos].state != State::kPopped) return nullptr;
    Lane& l = lanes_[pos];
    l.state = State::kIdle;
    --busy_;
    return &l.entry;  // (left as the caller leaves it: submit() sets every field that is read)
  }

  // A busy lane's submission handed back: the entry (named) and its request. `popped`: it had been
  // popped (the controller holds its position), else it was still waiting for the next pop.
  struct Submission {
    TensorTableEntry entry;
    Request request;
    bool popped = false;
  };
  // The popped submission at `pos` as an entry and a request; the lane stays open. Null when none
  // is popped there.
  std::optional<Submission> hand_back(uint32_t pos, int rank);
  // Closes the lane at `pos` (nothing when none is open there), handing its submission back if it
  // is busy.
  std::optional<Submission> close(uint32_t pos, int rank);
  // The lane at `pos` is open for the single allreduce `cached` (same name and parameters).
  bool serves(uint32_t pos, const Response& cached) const;
  // Opens a lane at `pos` (closed) for the cached single allreduce. Throws InternalError when a
  // lane with that name is open elsewhere (close first: a name is never open twice).
  void open(uint32_t pos, const Response& cached, int rank);
  // The name of the lane at `pos` ("" when closed).
  std::string name(uint32_t pos) const {
    return pos < lanes_.size() ? lanes_[pos].name : std::string();
  }
  // Closes every lane; the busy ones' submissions, named, are appended to *left.
  void close_all(std::vector<TensorTableEntry>* left);

 private:
  enum class State : uint8_t { kClosed, kIdle, kSubmitted, kPopped };
  struct Lane {
    State state = State::kClosed;
    // The position submitted after this one the last time (kNoLane: none yet).
    uint32_t next = kNoLane;
    // The characters of the name as the caller passed it last time (its std::string's data()): a
    // caller that keeps its names passes the same string every step, and prefetch_next() asks for
    // them. Only ever prefetched, never read: it may point to freed memory.
    const char* caller_name = nullptr;
    // The handle state of the last submission, likewise only prefetched: a caller that keeps one
    // handle per tensor drops it when it assigns the next step's handle there, right after the
    // next submission to this lane returns.
    const detail::HandleState* last_handle = nullptr;
    std::string name;
    uint64_t hash = 0;
    // The cached response's parameters, which a submission must match.
    DataType dtype = DataType::kFloat32;
    Device::Kind device_kind = Device::kCPU;
    ReduceOp reduce_op = ReduceOp::kSum;
    double prescale = 1.0, postscale = 1.0;
    bool deterministic = false;
    Shape shape;
    TensorTableEntry entry;  // kSubmitted, kPopped: the tensors and handle (no name)
    std::chrono::steady_clock::time_point submitted;
    bool busy() const { return state == State::kSubmitted || state == State::kPopped; }
    bool takes(DataType t, Device::Kind k, ReduceOp op, double pre, double post, bool det,
               const Shape& s) const {
      return t == dtype && k == device_kind && op == reduce_op && pre == prescale &&
             post == postscale && det == deterministic && s == shape;
    }
  };
  int64_t find_hashed(const std::string& name, uint64_t h) const {
    return index_.find(h, [&](uint32_t i) { return lanes_[i].name == name; });
  }
  // The busy lane's submission as an entry and a request; the lane is idle after it.
  Submission to_submission(Lane& l, int rank);
  void prefetch_next(const Lane& l) const;

  std::vector<Lane> lanes_;          // by cache position
  NameIndex index_;                  // the open lanes' names -> position
  std::vector<uint32_t> submitted_;  // positions submitted since the last pop, in order
  size_t busy_ = 0;
  // The submissions of a step come in the order of the step before (a trainer's gradients), and at
  // 1000 tensors a step the lanes' lines are out of the cache by the time their tensors come again
  // (the data of a step passes through it in between). So each lane remembers the position
  // submitted after it (Lane::next): find() checks that lane first, with no hash of the name and no
  // probe of the index, and submit() prefetches what the next two submissions will likely read
  // (the lanes, their names, the caller's names, the handle the caller drops). A guess is only a
  // guess: it must be open and have the same name.
  uint32_t last_ = kNoLane;  // the position of the last submission
};

inline void Lanes::prefetch_next(const Lane& l) const {
  if (l.next >= lanes_.size()) return;
  const Lane& n = lanes_[l.next];  // (its lines came in at the submission before this one)
  __builtin_prefetch(n.name.data());
  __builtin_prefetch(n.caller_name);  // (a prefetch never faults)
  // The state with the shared_ptr's control block: one line (make_handle_state's block).
  if (n.last_handle) __builtin_prefetch(n.last_handle, 1);
  if (n.next >= lanes_.size()) return;
  const char* after = reinterpret_cast<const char*>(&lanes_[n.next]);
  for (size_t off = 0; off < sizeof(Lane); off += 64) __builtin_prefetch(after + off, 1);
}

inline void Lanes::submit(uint32_t pos, const std::string& name, TensorRef& in, TensorRef& out,
                          const std::shared_ptr<detail::HandleState>& handle,
                          std::chrono::steady_clock::time_point since) {
  if (last_ < lanes_.size() && lanes_[last_].next != pos) lanes_[last_].next = pos;
  last_ = pos;
  Lane& l = lanes_[pos];
  l.caller_name = name.data();
  l.last_handle = handle.get();
  prefetch_next(l);
  l.entry.input = std::move(in);
  l.entry.output = std::move(out);
  l.entry.handle = handle;
  l.state = State::kSubmitted;
  l.submitted = since;
  ++busy_;
  submitted_.push_back(pos);
}

}  // namespace hvd
