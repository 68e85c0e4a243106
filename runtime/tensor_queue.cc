#include "runtime/tensor_queue.h"

#include <algorithm>

#include "hvd/error.h"
#include "runtime/group_unit.h"

namespace hvd {

void TensorQueue::throw_in_flight(RequestType type, const std::string& name, int rank) {
  throw InvalidArgumentError(std::string(request_type_name(type)) + " of '" + name +
                             "' failed: a tensor named '" + name +
                             "' is already in flight on rank " + std::to_string(rank) +
                             ". Wait for its handle before reusing the name, or give each tensor "
                             "a unique name.");
}

bool TensorQueue::in_flight_locked(const std::string& name, uint64_t h) const {
  return find_locked(name, h) >= 0 || lanes_.in_flight(name, h);
}

void TensorQueue::stamp_handle(detail::HandleState& handle) const {
  handle.popped_by = wake_->pops.load() + 1;
  handle.wake = wake_;
}

bool TensorQueue::stamp_locked(std::chrono::steady_clock::time_point now) {
  const bool first = requests_.empty() && !lanes_.any_submitted();
  if (first) first_request_ = now;
  last_request_ = now;
  stamped_at_ = ++submissions_;
  return first;
}

bool TensorQueue::push_request_locked(Request&& request,
                                      std::chrono::steady_clock::time_point now) {
  const bool first = stamp_locked(now);
  request.submitted = now;
  requests_.push_back(std::move(request));
  return first;
}

bool TensorQueue::add(std::vector<TensorTableEntry> entries, std::vector<Request> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) detail::throw_error(close_kind_, close_message_);
  if (!requests.empty() && !entries.empty() && entries[0].handle)
    stamp_handle(*entries[0].handle);  // shared by all
  // Placed one by one, each looked up first among the entries in flight, those placed before it
  // in this call included (a name twice in one group): one hash and one probe per entry. On a
  // clash the ones placed are taken out again, and nothing is added.
  placed_.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorTableEntry& e = entries[i];
    const uint64_t h = NameIndex::hash(e.name);
    // A group's requests come in the order of its entries: the cache's lookup reuses the hash.
    if (i < requests.size() && requests[i].name == e.name) requests[i].name_hash = h;
    if (in_flight_locked(e.name, h)) {
      for (const auto& [slot, ph] : placed_) remove_locked(slot, ph);
      throw_in_flight(e.type, e.name, requests.empty() ? -1 : requests[0].rank);
    }
    placed_.emplace_back(place_locked(std::move(e), h), h);
  }
  const auto now = std::chrono::steady_clock::now();
  bool first = false;
  for (auto& r : requests) first = push_request_locked(std::move(r), now) || first;
  return first;
}

uint64_t TensorQueue::insert_locked(TensorTableEntry&& entry, int rank) {
  if (closed_) detail::throw_error(close_kind_, close_message_);
  const uint64_t h = NameIndex::hash(entry.name);
  if (in_flight_locked(entry.name, h)) throw_in_flight(entry.type, entry.name, rank);
  place_locked(std::move(entry), h);
  return h;
}

uint32_t TensorQueue::place_locked(TensorTableEntry&& entry, uint64_t h) {
  uint32_t i;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    i = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[i].entry = std::move(entry);
  slots_[i].used = true;
  index_.insert(h, i);
  return i;
}

TensorTableEntry TensorQueue::remove_locked(uint32_t i, uint64_t h) {
  index_.erase(h, i);
  slots_[i].used = false;
  free_.push_back(i);
  return std::move(slots_[i].entry);
}

void TensorQueue::add_entry(TensorTableEntry&& entry, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  insert_locked(std::move(entry), rank);
}

bool TensorQueue::add_one(TensorTableEntry&& entry, Request&& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entry.handle) stamp_handle(*entry.handle);
  request.name_hash = insert_locked(std::move(entry), request.rank);  // the same name
  return push_request_locked(std::move(request), std::chrono::steady_clock::now());
}

TensorQueue::LaneResult TensorQueue::try_lane(const std::string& name, TensorRef& in,
                                              TensorRef& out, ReduceOp op, double prescale,
                                              double postscale, bool deterministic,
                                              const std::shared_ptr<detail::HandleState>& handle,
                                              int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lanes_.none_open()) return LaneResult::kNoLane;
  uint64_t h = 0;
  const int64_t at = lanes_.find(name, &h);
  if (at < 0) return LaneResult::kNoLane;  // (an invalid name among them: the caller checks it)
  if (closed_) detail::throw_error(close_kind_, close_message_);
  const auto pos = static_cast<uint32_t>(at);
  if (lanes_.busy(pos) || (index_.size() != 0 && find_locked(name, h) >= 0))
    throw_in_flight(RequestType::kAllreduce, name, rank);
  if (!lanes_.takes(pos, in, op, prescale, postscale, deterministic)) return LaneResult::kNoLane;
  stamp_handle(*handle);
  // No clock per submission (Waiting): the first since the last pop stamps the burst, and the
  // lane's submission counts from then (it only shows if the submission goes the slow way).
  const bool first = requests_.empty() && !lanes_.any_submitted();
  if (first)
    stamp_locked(std::chrono::steady_clock::now());
  else
    ++submissions_;
  lanes_.submit(pos, name, in, out, handle, first_request_);
  return first ? LaneResult::kQueuedFirst : LaneResult::kQueued;
}

void TensorQueue::pop_requests(std::vector<Request>* out, std::vector<uint32_t>* lanes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty() && !lanes_.any_submitted()) return;
  wake_->pops.fetch_add(1, std::memory_order_release);
  if (out->empty()) {
    out->swap(requests_);  // requests_ gets the caller's (cleared) buffer back: no copies
  } else {
    for (auto& r : requests_) out->push_back(std::move(r));
  }
  requests_.clear();
  lanes_.pop(lanes);
}

std::optional<Request> TensorQueue::hand_back_locked(std::optional<Lanes::Submission> s) {
  if (!s) return std::nullopt;
  place_locked(std::move(s->entry), s->request.name_hash);
  if (s->popped) return std::move(s->request);
  // Not popped yet: its request waits with the others, as if it had been submitted that way.
  requests_.push_back(std::move(s->request));
  return std::nullopt;
}

Request TensorQueue::lane_to_request(uint32_t pos, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<Request> r = hand_back_locked(lanes_.hand_back(pos, rank));
  if (!r)
    throw InternalError("tensor queue of rank " + std::to_string(rank) +
                        ": no popped submission in lane " + std::to_string(pos) +
                        ": please report this bug.");
  return std::move(*r);
}

std::optional<Request> TensorQueue::close_lane(uint32_t pos, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return hand_back_locked(lanes_.close(pos, rank));
}

void TensorQueue::sync_lanes(const std::vector<std::pair<uint32_t, const Response*>>& wanted,
                             int rank, std::vector<std::pair<uint32_t, Request>>* popped) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  // First every lane that changes closes, then the new ones open: a name that moves from one
  // position to another is never open twice.
  for (const auto& [pos, cached] : wanted) {
    if (cached && lanes_.serves(pos, *cached)) continue;
    if (std::optional<Request> r = hand_back_locked(lanes_.close(pos, rank)))
      popped->emplace_back(pos, std::move(*r));
  }
  for (const auto& [pos, cached] : wanted)
    if (cached && !lanes_.serves(pos, *cached)) lanes_.open(pos, *cached, rank);
}

std::string TensorQueue::lane_name(uint32_t pos) const {
  std::lock_guard<std::mutex> lock(mu_);
  return lanes_.name(pos);
}

std::string TensorQueue::member_name(const Response& r, size_t i) const {
  if (r.names[i].empty() && r.in_lane(i)) return lane_name(r.lanes[i]);
  return r.names[i];
}

size_t TensorQueue::open_lanes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lanes_.open_count();
}

TensorQueue::Waiting TensorQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty() && !lanes_.any_submitted()) return {};
  return {true, first_request_, last_request_, submissions_, stamped_at_ == submissions_};
}

bool TensorQueue::holds_only_popped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.empty() && !lanes_.any_submitted() && index_.size() + lanes_.busy_count() > 0;
}

std::optional<TensorTableEntry> TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t h = NameIndex::hash(name);
  const int64_t i = find_locked(name, h);
  if (i < 0) return std::nullopt;
  return remove_locked(static_cast<uint32_t>(i), h);
}

void TensorQueue::take_all(const Response& r, FunctionRef<void(size_t, TensorTableEntry*)> take) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < r.names.size(); ++i) {
    if (r.in_lane(i)) {
      take(i, lanes_.take(r.lanes[i]));  // null: closed (shutdown), which failed the handle
      continue;
    }
    const uint64_t h = NameIndex::hash(r.names[i]);
    const int64_t at = find_locked(r.names[i], h);
    if (at >= 0) {
      TensorTableEntry e = remove_locked(static_cast<uint32_t>(at), h);
      take(i, &e);
    } else {
      take(i, nullptr);
    }
  }
}

std::string TensorQueue::expand_unit(const std::string& group, int rank) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t h = NameIndex::hash(group);
  const int64_t at = find_locked(group, h);
  if (at < 0) return "";
  TensorTableEntry unit = remove_locked(static_cast<uint32_t>(at), h);
  const size_t n = unit.members ? unit.members->in.size() : 0;
  std::vector<TensorTableEntry> members(n);
  for (size_t i = 0; i < n; ++i) {
    TensorTableEntry& m = members[i];
    group_unit::member_name(group, i, &m.name);
    if (in_flight_locked(m.name, NameIndex::hash(m.name))) {
      lock.unlock();
      const std::string error =
          "grouped_allreduce of '" + group + "' failed: a tensor named '" + m.name +
          "' (the name of its member " + std::to_string(i) + ") is already in flight on rank " +
          std::to_string(rank) +
          ". Wait for that tensor's handle first, or give the group another name.";
      unit.handle->fail(detail::ErrorKind::kInvalidArgument, error);
      return error;
    }
    m.type = RequestType::kAllreduce;
    m.input = std::move(unit.members->in[i]);
    m.output = std::move(unit.members->out[i]);
    m.handle = unit.handle;
  }
  if (n > 1) unit.handle->expect_more(static_cast<int>(n) - 1);
  for (auto& m : members) place_locked(std::move(m), NameIndex::hash(m.name));
  return "";
}

void TensorQueue::close(detail::ErrorKind kind, const std::string& message) {
  std::vector<TensorTableEntry> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) {
      closed_ = true;
      close_kind_ = kind;
      close_message_ = message;
    }
    for (Slot& s : slots_)
      if (s.used) left.push_back(std::move(s.entry));
    const bool lanes_submitted = lanes_.any_submitted();
    lanes_.close_all(&left);
    slots_.clear();
    free_.clear();
    index_.clear();
    // The requests are dropped, as good as taken: a thread still blocked on one must not close the
    // fusion windows of the runtime's other sets, which share the signal (runtime/handle.h).
    if (!requests_.empty() || lanes_submitted) wake_->pops.fetch_add(1, std::memory_order_release);
    requests_.clear();
  }
  for (auto& e : left)
    e.handle->fail(kind, std::string(request_type_name(e.type)) + " of '" + e.name +
                             "' did not complete: " + message);
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size() + lanes_.busy_count();
}

}  // namespace hvd
