#include "runtime/terminate_handler.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "hvd/error.h"

namespace hvd::detail {
namespace {

std::atomic<int> g_rank{-1};
std::terminate_handler g_previous = nullptr;
std::atomic<bool> g_installed{false};

[[noreturn]] void on_terminate() {
  if (std::exception_ptr ep = std::current_exception()) {
    try {
      std::rethrow_exception(ep);
    } catch (const hvd::Error& e) {
      std::fprintf(stderr, "hvd: rank %d: %s\n", g_rank.load(), e.what());
      std::fflush(stderr);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::_Exit(1);
    } catch (...) {}
  }
  if (g_previous) g_previous();
  std::abort();
}

}  // namespace

void install_terminate_handler(int rank) {
  g_rank = rank;
  if (g_installed.exchange(true)) return;
  g_previous = std::set_terminate(on_terminate);
}

}  // namespace hvd::detail
