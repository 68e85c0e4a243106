#pragma once

// Which sanitizer this translation unit is built with: GCC defines __SANITIZE_ADDRESS__ /
// __SANITIZE_THREAD__, clang answers __has_feature (whatever flags the build was given, so not a
// definition of hvd's own CMake).

// TSan's runtime: while a thread is inside begin/end (counted, so nested pairs are fine), TSan
// records none of its memory accesses, its interceptors' (memcpy) included; its synchronisation
// still counts. Call only where kThreadSanitizer (a reference elsewhere would not link).
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();

namespace hvd {

#if defined(__has_feature)
#define HVD_HAS_FEATURE_(x) __has_feature(x)
#else
#define HVD_HAS_FEATURE_(x) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || HVD_HAS_FEATURE_(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__) || HVD_HAS_FEATURE_(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#undef HVD_HAS_FEATURE_

}  // namespace hvd
