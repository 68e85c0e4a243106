#pragma once

// The hand-off between user threads and the background thread. User threads add() a set of
// tensors (one, or a whole group) with their requests atomically; the background thread pops the
// requests once per cycle and later take()s each entry by name when its response executes.
//
// Lanes (runtime/lanes.h): a cached single allreduce, submitted again with its name and
// parameters, goes into the lane the controller opened for it, with no request and no entry in the
// table (try_lane); the queue owns the lanes and guards them with its mutex, so that a name is in
// flight once, in the table or in a lane.
//
// Thread safety: every method takes the queue's mutex. A name may be in the queue once per rank
// (in the table or in a lane); adding it again before its entry is taken is an error. After
// close() every add() throws the closing error and every entry still in the table or in a lane is
// failed with it.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/function_ref.h"
#include "hvd/tensor.h"
#include "runtime/handle.h"
#include "runtime/lanes.h"
#include "runtime/message.h"
#include "runtime/name_index.h"
#include "runtime/table_entry.h"

namespace hvd {

class TensorQueue {
 public:
  // `wake`: the runtime's signal (runtime/handle.h), whose pop count this queue keeps and stamps
  // on each handle; by default a signal of its own (a queue alone, in tests).
  explicit TensorQueue(
      std::shared_ptr<detail::WakeSignal> wake = std::make_shared<detail::WakeSignal>())
      : wake_(std::move(wake)) {}

  // Throws InvalidArgumentError (nothing added) when a name is already in flight, or the closing
  // error after close(). Returns true when these are the first requests since the last
  // pop_requests() (the caller wakes the background thread, runtime/runtime.cc).
  bool add(std::vector<TensorTableEntry> entries, std::vector<Request> requests);
  // add() of one entry and its request, without the vectors (the hot path of a single tensor).
  bool add_one(TensorTableEntry&& entry, Request&& request);
  // The entry alone, with no request to negotiate: the single-rank path runs it at once
  // (runtime/runtime.cc). The same checks as add().
  void add_entry(TensorTableEntry&& entry, int rank);
  // The lane path of allreduce_async (see the top of this file): when an open lane has this name
  // and these parameters, moves the tensors and the handle into it and returns kQueued, or
  // kQueuedFirst when nothing else was waiting since the last pop (the caller wakes the background
  // thread); otherwise kNoLane, with nothing done (the caller goes the ordinary way, which checks
  // the name: an invalid one has no lane). For a name with a lane, throws as add() does: a name in
  // flight, the closing error.
  enum class LaneResult { kNoLane, kQueued, kQueuedFirst };
  LaneResult try_lane(const std::string& name, TensorRef& in, TensorRef& out, ReduceOp op,
                      double prescale, double postscale, bool deterministic,
                      const std::shared_ptr<detail::HandleState>& handle, int rank);
  // Appends the requests added since the last call to *out (swaps when *out is empty: pass a
  // cleared vector back each time and neither side reallocates), and the positions of the lanes
  // submitted since then to *lanes (likewise).
  void pop_requests(std::vector<Request>* out, std::vector<uint32_t>* lanes);
  // The requests added since the last pop_requests(): none, or when the first and the last came.
  // A lane's submission reads no clock (24 ns a call on this project's VMs, at 1000 a step) unless
  // it is the first since the last pop: `last` is then the time of the last submission that read
  // one, and `last_exact` says whether that was the last submission of all. `submissions` counts
  // every submission ever (lanes and requests): the window's owner tells a burst still coming by
  // it moving (runtime/runtime.cc, wait_for_work).
  struct Waiting {
    bool any = false;
    std::chrono::steady_clock::time_point first, last;
    uint64_t submissions = 0;
    bool last_exact = true;
  };
  Waiting waiting() const;
  // Something is in flight on this rank and all of it was popped (the controller has its
  // requests, waiting for the other ranks): nothing submitted since the last pop waits.
  bool holds_only_popped() const;
  std::optional<TensorTableEntry> take(const std::string& name);
  // take() of every member of a response, under one lock (a fused response's tensors): calls
  // take(i, entry) for each member i in order, with its entry (from the lane that holds it when
  // r.lanes says so, else from the table by name), or nullptr when there is none (the queue was
  // closed). `take` moves out what it keeps; the entry is dropped after the call (a lane's stays
  // in the lane, emptied: no entry is moved or destroyed per tensor on the way). It runs under the
  // queue's lock: it must not call the queue.
  void take_all(const Response& r, FunctionRef<void(size_t, TensorTableEntry*)> take);
  // The name of a response's member i: a member in a lane may have none of its own in the
  // response (Response::lanes), and is named by the lane. Any thread.
  std::string member_name(const Response& r, size_t i) const;

  // Lanes, for the controller (background thread). close_lane: the position's lane is closed; a
  // submission in it becomes an entry with a request, which joins the queue's requests when it
  // was not popped yet, and is returned when it was (for the caller to send the slow way).
  // sync_lanes: for each (position, response), the lane there serves that single allreduce
  // response from now on (null: no lane there); a lane there for another name or other parameters
  // is closed first (as close_lane, its popped submission appended to *popped with its position).
  // lane_to_request: the popped submission in the lane at `pos` becomes an entry with a request,
  // returned; the lane stays open. `rank`: this rank, for the requests.
  std::optional<Request> close_lane(uint32_t pos, int rank);
  void sync_lanes(const std::vector<std::pair<uint32_t, const Response*>>& wanted, int rank,
                  std::vector<std::pair<uint32_t, Request>>* popped);
  Request lane_to_request(uint32_t pos, int rank);
  size_t open_lanes() const;                  // tests
  std::string lane_name(uint32_t pos) const;  // "" when none is open there (tests)
  // The background thread, for a group unit that goes the slow way (runtime/group_unit.h): replaces
  // the unit's entry `group` by one entry per member ("<group>.<i>", sharing the unit's handle,
  // which then expects one completion per member). Returns "" when done or when the entry is
  // gone (closed); otherwise (a member's name is already in flight on this rank) the error, after
  // failing the unit's handle with it: the unit's entry is then gone, and the tensor in flight is
  // left as it was.
  std::string expand_unit(const std::string& group, int rank);
  // Fails every entry with the message and refuses later adds with it.
  void close(detail::ErrorKind kind, const std::string& message);
  size_t size() const;

 private:
  const std::shared_ptr<detail::WakeSignal> wake_;
  mutable std::mutex mu_;
  // Under mu_: the pop that will take `handle`'s requests, and the signal that counts the pops
  // (runtime/handle.h, HandleState::popped_by).
  void stamp_handle(detail::HandleState& handle) const;
  // The entries in flight: a slab of slots (empty ones reused through a free list), found by name
  // through index_ (no node and no copy of the name per tensor; runtime/name_index.h).
  struct Slot {
    TensorTableEntry entry;  // moved out (empty) while the slot is free
    bool used = false;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  NameIndex index_;
  int64_t find_locked(const std::string& name, uint64_t h) const {
    return index_.find(h, [&](uint32_t i) { return slots_[i].entry.name == name; });
  }
  // h: the name's hash, not in index_; returns the slot.
  uint32_t place_locked(TensorTableEntry&& entry, uint64_t h);
  std::vector<std::pair<uint32_t, uint64_t>> placed_;      // add()'s (slot, hash) pairs, reused
  TensorTableEntry remove_locked(uint32_t i, uint64_t h);  // h: the name's hash
  std::vector<Request> requests_;
  // Of requests_ and the lanes' submissions together (waiting()).
  std::chrono::steady_clock::time_point first_request_, last_request_;
  uint64_t submissions_ = 0;  // Waiting::submissions
  uint64_t stamped_at_ = 0;   // submissions_ when last_request_ was last set
  // Under mu_: a submission at `now`; returns whether it is the first since the last pop.
  bool stamp_locked(std::chrono::steady_clock::time_point now);
  // Under mu_: stamps the request with `now` and appends it; returns whether it is the first since
  // the last pop_requests().
  bool push_request_locked(Request&& request, std::chrono::steady_clock::time_point now);
  [[noreturn]] static void throw_in_flight(RequestType type, const std::string& name, int rank);
  // Under mu_: is the name in flight, in the table or in a lane?
  bool in_flight_locked(const std::string& name, uint64_t h) const;

  Lanes lanes_;  // under mu_
  // Under mu_: a lane's submission handed back becomes an entry in the table; its request is
  // returned when it had been popped, else it joins requests_.
  std::optional<Request> hand_back_locked(std::optional<Lanes::Submission> s);
  // Under mu_: checks, then inserts; returns the name's hash.
  uint64_t insert_locked(TensorTableEntry&& entry, int rank);

  bool closed_ = false;
  detail::ErrorKind close_kind_ = detail::ErrorKind::kNone;
  std::string close_message_;
};

}  // namespace hvd
