#pragma once

// Shared by every fuzz target: the rule that decides what a finding is.
//
// A parser given hostile bytes may only (a) return a value that passes the target's own checks,
// or (b) throw hvd::Error (or a subclass) with a non-empty message. Anything else is a finding and
// aborts, so that libFuzzer saves the input: any other exception (std::out_of_range,
// std::bad_alloc, std::length_error ...), a failed property check, a crash, a hang, or an
// AddressSanitizer / UndefinedBehaviorSanitizer report (the targets are built with
// -fno-sanitize-recover, so UBSan aborts too).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>

#include "hvd/error.h"

namespace hvd::fuzz {

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "hvd fuzz finding at %s:%d: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs body(); hvd::Error is the expected rejection of bad input, anything else is a finding.
template <class F>
void guarded(F&& body) {
  try {
    body();
  } catch (const hvd::Error& e) {
    if (std::strlen(e.what()) == 0) fail(__FILE__, __LINE__, "hvd::Error with an empty message");
  } catch (const std::exception& e) {
    fail(
        __FILE__, __LINE__,
        std::string("unexpected exception ") + typeid(e).name() + " (not hvd::Error): " + e.what());
  } catch (...) {
    fail(__FILE__, __LINE__, "unexpected exception of a type not derived from std::exception");
  }
}

}  // namespace hvd::fuzz

// A property the parser's result must have; aborts with the condition and a message when not.
#define HVD_FUZZ_CHECK(cond, msg)                                                          \
  do {                                                                                     \
    if (!(cond)) ::hvd::fuzz::fail(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); \
  } while (0)
