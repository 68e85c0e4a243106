#include "runtime/tensor_queue.h"

#include "hvd/error.h"

namespace hvd {

bool TensorQueue::add(std::vector<TensorTableEntry> entries, std::vector<Request> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) detail::throw_error(close_kind_, close_message_);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    bool twice_here = false;
    for (size_t j = 0; j < i; ++j) twice_here = twice_here || entries[j].name == e.name;
    if (table_.count(e.name) || twice_here)
      throw InvalidArgumentError(
          std::string(request_type_name(e.type)) + " of '" + e.name + "' failed: a tensor named '" +
          e.name + "' is already in flight on rank " +
          std::to_string(requests.empty() ? -1 : requests[0].rank) +
          ". Wait for its handle before reusing the name, or give each tensor a unique name.");
  }
  for (auto& e : entries) {
    std::string name = e.name;
    table_.emplace(std::move(name), std::move(e));
  }
  const auto now = std::chrono::steady_clock::now();
  const bool first = requests_.empty() && !requests.empty();
  if (first) first_request_ = now;
  if (!requests.empty()) last_request_ = now;
  for (auto& r : requests) {
    r.submitted = now;
    requests_.push_back(std::move(r));
  }
  return first;
}

void TensorQueue::pop_requests(std::vector<Request>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : requests_) out->push_back(std::move(r));
  requests_.clear();
}

TensorQueue::Waiting TensorQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.empty()) return {};
  return {true, first_request_, last_request_};
}

std::optional<TensorTableEntry> TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table_.find(name);
  if (it == table_.end()) return std::nullopt;
  TensorTableEntry e = std::move(it->second);
  table_.erase(it);
  return e;
}

void TensorQueue::close(detail::ErrorKind kind, const std::string& message) {
  std::unordered_map<std::string, TensorTableEntry> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) {
      closed_ = true;
      close_kind_ = kind;
      close_message_ = message;
    }
    left.swap(table_);
    requests_.clear();
  }
  for (auto& [name, e] : left)
    e.handle->fail(kind, std::string(request_type_name(e.type)) + " of '" + name +
                             "' did not complete: " + message);
}

size_t TensorQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.size();
}

}  // namespace hvd
