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
  if (find_locked(name, h) >= 0) return true;
  if (lane_index_.size() == 0) return false;
  const int64_t l = find_lane_locked(name, h);
  return l >= 0 && lanes_[l].busy();
}

void TensorQueue::stamp_handle(detail::HandleState& handle) const {
  handle.popped_by = wake_->pops.load() + 1;
  handle.wake = wake_;
}

bool TensorQueue::stamp_locked(std::chrono::steady_clock::time_point now) {
  const bool first = requests_.empty() && ready_.empty();
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

void TensorQueue::prefetch_next_locked(const Lane& l) const {
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

TensorQueue::LaneResult TensorQueue::try_lane(const std::string& name, TensorRef& in,
                                              TensorRef& out, ReduceOp op, double prescale,
                                              double postscale, bool deterministic,
                                              const std::shared_ptr<detail::HandleState>& handle,
                                              int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lane_index_.size() == 0) return LaneResult::kNoLane;
  int64_t at = -1;
  uint64_t h = 0;
  const uint32_t guess = last_lane_ < lanes_.size() ? lanes_[last_lane_].next : kNoLane;
  if (guess < lanes_.size() && lanes_[guess].state != Lane::State::kClosed &&
      lanes_[guess].name == name) {
    at = guess;
    h = lanes_[guess].hash;
  } else {
    h = NameIndex::hash(name);
    at = find_lane_locked(name, h);
    if (at < 0) return LaneResult::kNoLane;  // (an invalid name among them: the caller checks it)
  }
  if (closed_) detail::throw_error(close_kind_, close_message_);
  Lane& l = lanes_[at];
  if (l.busy() || (index_.size() != 0 && find_locked(name, h) >= 0))
    throw_in_flight(RequestType::kAllreduce, name, rank);
  if (!l.takes(in.dtype(), in.device().kind, op, prescale, postscale, deterministic, in.shape()))
    return LaneResult::kNoLane;
  if (last_lane_ < lanes_.size() && lanes_[last_lane_].next != static_cast<uint32_t>(at))
    lanes_[last_lane_].next = static_cast<uint32_t>(at);
  last_lane_ = static_cast<uint32_t>(at);
  l.caller_name = name.data();
  l.last_handle = handle.get();
  prefetch_next_locked(l);
  stamp_handle(*handle);
  l.entry.input = std::move(in);
  l.entry.output = std::move(out);
  l.entry.handle = handle;
  l.state = Lane::State::kSubmitted;
  ++busy_lanes_;
  // No clock per submission (Waiting): the first since the last pop stamps the burst, and the
  // lane's submission counts from then (it only shows if the submission goes the slow way).
  const bool first = requests_.empty() && ready_.empty();
  if (first)
    stamp_locked(std::chrono::steady_clock::now());
  else
    ++submissions_;
  l.submitted = first_request_;
  ready_.push_back(static_cast<uint32_t>(at));
  return first ? LaneResult::kQueuedFirst : LaneResult::kQueued;
}

void TensorQueue::pop_requests(std::vector<Request>* out, std::vector<uint32_t>* lanes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty() && ready_.empty()) return;
  wake_->pops.fetch_add(1, std::memory_order_release);
  if (out->empty()) {
    out->swap(requests_);  // requests_ gets the caller's (cleared) buffer back: no copies
  } else {
    for (auto& r : requests_) out->push_back(std::move(r));
  }
  requests_.clear();
  for (uint32_t pos : ready_) lanes_[pos].state = Lane::State::kPopped;
  if (lanes->empty()) {
    lanes->swap(ready_);
  } else {
    lanes->insert(lanes->end(), ready_.begin(), ready_.end());
  }
  ready_.clear();
}

Request TensorQueue::lane_entry_locked(Lane& l, int rank) {
  Request r;
  r.rank = rank;
  r.type = RequestType::kAllreduce;
  r.dtype = l.dtype;
  r.reduce_op = l.reduce_op;
  r.device = l.entry.input.device();
  r.prescale = l.prescale;
  r.postscale = l.postscale;
  r.deterministic = l.deterministic;
  r.name = l.name;
  r.shape = l.shape.vec();
  r.submitted = l.submitted;
  r.name_hash = l.hash;
  TensorTableEntry e = std::move(l.entry);  // (left empty: try_lane sets every field it reads)
  e.name = l.name;
  e.type = RequestType::kAllreduce;
  place_locked(std::move(e), l.hash);
  l.state = Lane::State::kIdle;
  --busy_lanes_;
  return r;
}

Request TensorQueue::lane_to_request(uint32_t pos, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pos >= lanes_.size() || lanes_[pos].state != Lane::State::kPopped)
    throw InternalError("tensor queue of rank " + std::to_string(rank) +
                        ": no popped submission in lane " + std::to_string(pos) +
                        ": please report this bug.");
  return lane_entry_locked(lanes_[pos], rank);
}

std::optional<Request> TensorQueue::close_lane_locked(uint32_t pos, int rank) {
  if (pos >= lanes_.size() || lanes_[pos].state == Lane::State::kClosed) return std::nullopt;
  Lane& l = lanes_[pos];
  std::optional<Request> popped;
  if (l.state == Lane::State::kSubmitted) {
    // Not popped yet: its request waits with the others, as if it had been submitted that way.
    ready_.erase(std::find(ready_.begin(), ready_.end(), pos));
    requests_.push_back(lane_entry_locked(l, rank));
  } else if (l.state == Lane::State::kPopped) {
    popped = lane_entry_locked(l, rank);
  }
  lane_index_.erase(l.hash, pos);
  l.state = Lane::State::kClosed;
  l.name.clear();
  return popped;
}

std::optional<Request> TensorQueue::close_lane(uint32_t pos, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return close_lane_locked(pos, rank);
}

bool TensorQueue::lane_serves_locked(uint32_t pos, const Response& cached) const {
  if (pos >= lanes_.size()) return false;
  const Lane& l = lanes_[pos];
  return l.state != Lane::State::kClosed && l.name == cached.names.at(0) &&
         l.takes(cached.dtype, cached.device_kind, cached.reduce_op, cached.prescale,
                 cached.postscale, cached.deterministic, cached.shapes.at(0));
}

void TensorQueue::sync_lanes(const std::vector<std::pair<uint32_t, const Response*>>& wanted,
                             int rank, std::vector<std::pair<uint32_t, Request>>* popped) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  // First every lane that changes closes, then the new ones open: a name that moves from one
  // position to another is never open twice.
  for (const auto& [pos, cached] : wanted) {
    if (cached && lane_serves_locked(pos, *cached)) continue;
    if (std::optional<Request> r = close_lane_locked(pos, rank))
      popped->emplace_back(pos, std::move(*r));
  }
  for (const auto& [pos, cached] : wanted) {
    if (!cached || lane_serves_locked(pos, *cached)) continue;
    const std::string& name = cached->names.at(0);
    const uint64_t h = NameIndex::hash(name);
    if (find_lane_locked(name, h) >= 0)
      throw InternalError("tensor queue of rank " + std::to_string(rank) + ": a lane for '" + name +
                          "' is open at another position: please report this bug.");
    if (pos >= lanes_.size()) lanes_.resize(pos + 1);
    Lane& l = lanes_[pos];
    l.name = name;
    l.hash = h;
    l.dtype = cached->dtype;
    l.device_kind = cached->device_kind;
    l.reduce_op = cached->reduce_op;
    l.prescale = cached->prescale;
    l.postscale = cached->postscale;
    l.deterministic = cached->deterministic;
    l.shape = cached->shapes.at(0);
    l.state = Lane::State::kIdle;
    lane_index_.insert(h, pos);
  }
}

std::string TensorQueue::lane_name(uint32_t pos) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pos < lanes_.size() ? lanes_[pos].name : std::string();
}

size_t TensorQueue::open_lanes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lane_index_.size();
}

TensorQueue::Waiting TensorQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty() && ready_.empty()) return {};
  return {true, first_request_, last_request_, submissions_, stamped_at_ == submissions_};
}

bool TensorQueue::holds_only_popped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.empty() && ready_.empty() && index_.size() + busy_lanes_ > 0;
}

std::optional<TensorTableEntry> TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t h = NameIndex::hash(name);
  const int64_t i = find_locked(name, h);
  if (i < 0) return std::nullopt;
  return remove_locked(static_cast<uint32_t>(i), h);
}

void TensorQueue::take_all(const std::vector<std::string>& names,
                           const std::vector<uint32_t>& lanes,
                           FunctionRef<void(size_t, TensorTableEntry*)> take) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < names.size(); ++i) {
    if (i < lanes.size() && lanes[i] != kNoLane) {
      const uint32_t pos = lanes[i];
      if (pos < lanes_.size() && lanes_[pos].state == Lane::State::kPopped) {
        Lane& l = lanes_[pos];
        take(i, &l.entry);  // (left as take() leaves it: try_lane sets every field it reads)
        l.state = Lane::State::kIdle;
        --busy_lanes_;
      } else {
        take(i, nullptr);  // closed (shutdown), which failed the handle
      }
      continue;
    }
    const uint64_t h = NameIndex::hash(names[i]);
    const int64_t at = find_locked(names[i], h);
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
    for (Lane& l : lanes_) {
      if (l.busy()) {
        left.push_back(std::move(l.entry));
        left.back().name = l.name;
        left.back().type = RequestType::kAllreduce;
      }
    }
    lanes_.clear();
    lane_index_.clear();
    busy_lanes_ = 0;
    slots_.clear();
    free_.clear();
    index_.clear();
    // The requests are dropped, as good as taken: a thread still blocked on one must not close the
    // fusion windows of the runtime's other sets, which share the signal (runtime/handle.h).
    if (!requests_.empty() || !ready_.empty()) wake_->pops.fetch_add(1, std::memory_order_release);
    requests_.clear();
    ready_.clear();
  }
  for (auto& e : left)
    e.handle->fail(kind, std::string(request_type_name(e.type)) + " of '" + e.name +
                             "' did not complete: " + message);
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size() + busy_lanes_;
}

}  // namespace hvd
