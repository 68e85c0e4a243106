#include "runtime/handle.h"

#include "hvd/collectives.h"
#include "hvd/error.h"

namespace hvd::detail {

WakeSignal& WakeSignal::get() {
  static WakeSignal* signal = new WakeSignal;  // never destroyed (see handle.h)
  return *signal;
}

void WakeSignal::notify() {
  { std::lock_guard<std::mutex> lock(mu); }
  cv.notify_one();
}

void WakeSignal::waiting_for(uint64_t popped_by) {
  if (popped_by == 0 || pops.load(std::memory_order_acquire) >= popped_by) return;  // taken
  uint64_t seen = waited_for.load(std::memory_order_relaxed);
  while (seen < popped_by &&
         !waited_for.compare_exchange_weak(seen, popped_by, std::memory_order_release)) {}
  notify();
}

void HandleState::complete_one() {
  std::lock_guard<std::mutex> lock(mu);
  if (done) return;
  if (--pending <= 0) {
    done = true;
    cv.notify_all();
  }
}

void HandleState::fail(ErrorKind kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu);
  if (done) return;
  error_kind = kind;
  error = message;
  done = true;
  cv.notify_all();
}

void HandleState::set_join_result(int rank) {
  std::lock_guard<std::mutex> lock(mu);
  join_result = rank;
}

std::pair<ErrorKind, std::string> classify(const std::exception& e) {
  if (dynamic_cast<const InvalidArgumentError*>(&e)) return {ErrorKind::kInvalidArgument, e.what()};
  if (dynamic_cast<const CommunicationError*>(&e)) return {ErrorKind::kCommunication, e.what()};
  if (dynamic_cast<const InternalError*>(&e)) return {ErrorKind::kInternal, e.what()};
  return {ErrorKind::kGeneric, e.what()};
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      throw InvalidArgumentError(message);
    case ErrorKind::kCommunication:
      throw CommunicationError(message);
    case ErrorKind::kInternal:
      throw InternalError(message);
    default:
      throw Error(message);
  }
}

}  // namespace hvd::detail

namespace hvd {

namespace {
detail::HandleState& state_of(const std::shared_ptr<detail::HandleState>& s) {
  if (!s)
    throw InvalidArgumentError(
        "this hvd::Handle is empty: it was default-constructed, not returned by a collective.");
  return *s;
}
}  // namespace

bool Handle::ready() const {
  auto& s = state_of(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done;
}

void Handle::wait() {
  auto& s = state_of(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.done) {
    // This thread blocks: if its requests still wait in the queue, the fusion window need not
    // (popped_by is set before the handle is returned; the signal's mutex is not taken under ours).
    lock.unlock();
    detail::WakeSignal::get().waiting_for(s.popped_by);
    lock.lock();
  }
  s.cv.wait(lock, [&] { return s.done; });
  if (s.error_kind != detail::ErrorKind::kNone) detail::throw_error(s.error_kind, s.error);
}

Tensor& Handle::output() {
  auto& s = state_of(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.output;
}

const std::vector<int64_t>& Handle::received_splits() const {
  auto& s = state_of(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.received_splits;
}

}  // namespace hvd
