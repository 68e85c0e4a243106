#include "runtime/stop_state.h"

#include "hvd/stop.h"

namespace hvd::detail {
namespace {
// The generation in which this thread waited for a marked handle (0: never). Initial-exec, as the
// handle pool's (runtime/handle.cc says why).
thread_local uint32_t tls_stop_seen __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

// Constant-initialised and trivially destructible: a signal handler's first call runs no
// initialisation, and nothing is destroyed at exit.
constinit StopState g_stop_state;

StopState& StopState::get() { return g_stop_state; }

void note_stop_seen() {
  tls_stop_seen = StopState::get().generation.load(std::memory_order_relaxed);
}

bool stop_seen_by_this_thread() {
  return tls_stop_seen != 0 &&
         tls_stop_seen == StopState::get().generation.load(std::memory_order_relaxed);
}

}  // namespace hvd::detail

namespace hvd {

void request_stop(int signal) noexcept {
  int expected = 0;
  // The first request's signal is kept (messages name what asked first).
  detail::StopState::get().requested.compare_exchange_strong(
      expected, signal > 0 ? signal : detail::StopState::kNotASignal, std::memory_order_relaxed);
}

bool stop_requested() noexcept {
  return detail::StopState::get().requested.load(std::memory_order_relaxed) != 0;
}

int stop_signal() noexcept {
  const int s = detail::StopState::get().requested.load(std::memory_order_relaxed);
  return s > 0 ? s : 0;
}

}  // namespace hvd
