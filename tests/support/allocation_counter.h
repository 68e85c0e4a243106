#pragma once

// Counts the calls of the global operator new (and new[]) of the whole process, every thread
// included, for the tests that check that a path does not allocate (tests/common/test_shape.cc,
// tests/runtime/test_steady_allocations.cc). It *replaces* the global allocation functions, so
// exactly one translation unit of a test binary includes it.
#include <atomic>
#include <cstdlib>
#include <new>

namespace hvdtest::detail {
inline std::atomic<long> g_allocations{0};
inline void* counted_malloc(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace hvdtest::detail

void* operator new(std::size_t n) { return hvdtest::detail::counted_malloc(n); }
void* operator new[](std::size_t n) { return hvdtest::detail::counted_malloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace hvdtest {
// operator new calls so far, on every thread of the process.
inline long allocations() { return detail::g_allocations.load(std::memory_order_relaxed); }
}  // namespace hvdtest
