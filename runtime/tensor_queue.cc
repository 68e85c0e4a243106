#include "runtime/tensor_queue.h"

#include "hvd/error.h"
#include "runtime/group_unit.h"

namespace hvd {

void TensorQueue::throw_in_flight(const TensorTableEntry& e, int rank) {
  throw InvalidArgumentError(std::string(request_type_name(e.type)) + " of '" + e.name +
                             "' failed: a tensor named '" + e.name +
                             "' is already in flight on rank " + std::to_string(rank) +
                             ". Wait for its handle before reusing the name, or give each tensor "
                             "a unique name.");
}

bool TensorQueue::push_request_locked(Request&& request,
                                      std::chrono::steady_clock::time_point now) {
  const bool first = requests_.empty();
  if (first) first_request_ = now;
  last_request_ = now;
  request.submitted = now;
  requests_.push_back(std::move(request));
  return first;
}

bool TensorQueue::add(std::vector<TensorTableEntry> entries, std::vector<Request> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) detail::throw_error(close_kind_, close_message_);
  if (!requests.empty() && !entries.empty() && entries[0].handle)
    entries[0].handle->popped_by = detail::WakeSignal::get().pops.load() + 1;  // shared by all
  // Placed one by one, each looked up first among the entries in flight, those placed before it
  // in this call included (a name twice in one group): one hash and one probe per entry. On a
  // clash the ones placed are taken out again, and nothing is added.
  placed_.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorTableEntry& e = entries[i];
    const uint64_t h = NameIndex::hash(e.name);
    // A group's requests come in the order of its entries: the cache's lookup reuses the hash.
    if (i < requests.size() && requests[i].name == e.name) requests[i].name_hash = h;
    if (find_locked(e.name, h) >= 0) {
      for (const auto& [slot, ph] : placed_) remove_locked(slot, ph);
      throw_in_flight(e, requests.empty() ? -1 : requests[0].rank);
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
  if (find_locked(entry.name, h) >= 0) throw_in_flight(entry, rank);
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
  if (entry.handle) entry.handle->popped_by = detail::WakeSignal::get().pops.load() + 1;
  request.name_hash = insert_locked(std::move(entry), request.rank);  // the same name
  return push_request_locked(std::move(request), std::chrono::steady_clock::now());
}

void TensorQueue::pop_requests(std::vector<Request>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty()) return;
  detail::WakeSignal::get().pops.fetch_add(1, std::memory_order_release);
  if (out->empty()) {
    out->swap(requests_);  // requests_ gets the caller's (cleared) buffer back: no copies
  } else {
    for (auto& r : requests_) out->push_back(std::move(r));
  }
  requests_.clear();
}

TensorQueue::Waiting TensorQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty()) return {};
  return {true, first_request_, last_request_};
}

std::optional<TensorTableEntry> TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t h = NameIndex::hash(name);
  const int64_t i = find_locked(name, h);
  if (i < 0) return std::nullopt;
  return remove_locked(static_cast<uint32_t>(i), h);
}

void TensorQueue::take_all(const std::vector<std::string>& names,
                           std::vector<std::optional<TensorTableEntry>>* out) {
  out->resize(names.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < names.size(); ++i) {
    const uint64_t h = NameIndex::hash(names[i]);
    const int64_t at = find_locked(names[i], h);
    if (at >= 0)
      (*out)[i] = remove_locked(static_cast<uint32_t>(at), h);
    else
      (*out)[i].reset();
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
    if (find_locked(m.name, NameIndex::hash(m.name)) >= 0) {
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
    slots_.clear();
    free_.clear();
    index_.clear();
    // The requests are dropped, as good as taken: a thread still blocked on one must not close a
    // later runtime's first fusion window (runtime/handle.h, WakeSignal).
    if (!requests_.empty()) detail::WakeSignal::get().pops.fetch_add(1, std::memory_order_release);
    requests_.clear();
  }
  for (auto& e : left)
    e.handle->fail(kind, std::string(request_type_name(e.type)) + " of '" + e.name +
                             "' did not complete: " + message);
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

}  // namespace hvd
