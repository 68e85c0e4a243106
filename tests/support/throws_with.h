#pragma once

// Whether f() throws an hvd::Error whose message contains `part`; a gtest failure with the message
// (or "no error") when it does not. Shared by the multi-rank tests that check a message in part.
#include <gtest/gtest.h>

#include <string>

#include "hvd/error.h"

namespace hvdtest {

template <class F>
bool throws_with(F&& f, const std::string& part) {
  try {
    f();
  } catch (const hvd::Error& e) {
    if (std::string(e.what()).find(part) != std::string::npos) return true;
    ADD_FAILURE() << "message: " << e.what() << "\nexpected to contain: " << part;
    return false;
  }
  ADD_FAILURE() << "no error; expected one containing: " << part;
  return false;
}

}  // namespace hvdtest
