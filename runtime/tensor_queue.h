#pragma once

// The hand-off between user threads and the background thread. User threads add() a set of
// tensors (one, or a whole group) with their requests atomically; the background thread pops the
// requests once per cycle and later take()s each entry by name when its response executes.
//
// Thread safety: every method takes the queue's mutex. A name may be in the queue once per rank;
// adding it again before its entry is taken is an error. After close() every add() throws the
// closing error and every entry still in the table is failed with it.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hvd/tensor.h"
#include "runtime/handle.h"
#include "runtime/message.h"
#include "runtime/name_index.h"

namespace hvd {

struct TensorTableEntry {
  std::string name;
  RequestType type = RequestType::kAllreduce;
  TensorRef input;
  TensorRef output;
  std::vector<int64_t> splits;
  std::shared_ptr<detail::HandleState> handle;
  // A grouped allreduce queued as one unit (runtime/group_unit.h): the members' tensors. Behind a
  // pointer: every other entry pays one pointer for it, not two vectors, in each of its moves.
  struct Members {
    std::vector<TensorRef> in, out;
  };
  std::unique_ptr<Members> members;
};

class TensorQueue {
 public:
  // Throws InvalidArgumentError (nothing added) when a name is already in flight, or the closing
  // error after close(). Returns true when these are the first requests since the last
  // pop_requests() (the caller wakes the background thread, runtime/runtime.cc).
  bool add(std::vector<TensorTableEntry> entries, std::vector<Request> requests);
  // add() of one entry and its request, without the vectors (the hot path of a single tensor).
  bool add_one(TensorTableEntry&& entry, Request&& request);
  // The entry alone, with no request to negotiate: the single-rank path runs it at once
  // (runtime/runtime.cc). The same checks as add().
  void add_entry(TensorTableEntry&& entry, int rank);
  // Appends the requests added since the last call to *out (swaps when *out is empty: pass a
  // cleared vector back each time and neither side reallocates).
  void pop_requests(std::vector<Request>* out);
  // The requests added since the last pop_requests(): none, or when the first and the last came.
  struct Waiting {
    bool any = false;
    std::chrono::steady_clock::time_point first, last;
  };
  Waiting waiting() const;
  std::optional<TensorTableEntry> take(const std::string& name);
  // take() of every name, under one lock (a fused response's tensors): (*out)[i] is names[i]'s
  // entry. *out is the caller's, reused from batch to batch (no allocation once it is large enough).
  void take_all(const std::vector<std::string>& names,
                std::vector<std::optional<TensorTableEntry>>* out);
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
  mutable std::mutex mu_;
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
  std::chrono::steady_clock::time_point first_request_, last_request_;  // of requests_
  // Under mu_: stamps the request with `now` and appends it; returns whether it is the first since
  // the last pop_requests().
  bool push_request_locked(Request&& request, std::chrono::steady_clock::time_point now);
  [[noreturn]] static void throw_in_flight(const TensorTableEntry& e, int rank);
  // Under mu_: checks, then inserts; returns the name's hash.
  uint64_t insert_locked(TensorTableEntry&& entry, int rank);

  bool closed_ = false;
  detail::ErrorKind close_kind_ = detail::ErrorKind::kNone;
  std::string close_message_;
};

}  // namespace hvd
