#pragma once

// Helpers shared by the unit tests (no MPI).

#include <string>

#include "hvd/error.h"

namespace hvdtest {

// The message of the InvalidArgumentError that `f()` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hvd::InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

}  // namespace hvdtest
