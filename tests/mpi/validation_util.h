#pragma once

// Helpers shared by the argument-check tests (test_validation.cc, test_validation_names.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/mpi/test_collectives_util.h"
#include "tests/unit/error_catalogue_gtest.h"

namespace hvdtest {

// The message's text checks: the catalogue and no repeated prefix.
inline void expect_catalogued(const std::string& msg, const std::string& what) {
  EXPECT_EQ(catalogue_mismatch(catalogue(), msg), "") << what;
  EXPECT_EQ(repeated_prefix(msg), "") << what << ": " << msg;
}

// Every rank's message, through an allgather (also proves that the runtime still works).
inline std::vector<std::string> gather_messages(const std::string& mine, const std::string& name) {
  std::vector<uint8_t> bytes(mine.begin(), mine.end());
  bytes.push_back(0);  // separator
  std::vector<uint8_t> all;
  try {
    Watchdog w(name + ".messages", 60);
    all = hvd::allgather(bytes, name + ".messages");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the runtime is not usable after '" << name << "': " << e.what();
    return {};
  }
  std::vector<std::string> out(1);
  for (uint8_t b : all) {
    if (b == 0)
      out.emplace_back();
    else
      out.back() += static_cast<char>(b);
  }
  out.pop_back();
  return out;
}

// A plain allreduce that must succeed.
inline void expect_still_usable(const std::string& after) {
  std::vector<int32_t> v = {hvd::rank(), 1};
  const std::string name = after + ".then_ok";
  try {
    Watchdog w(name, 60);
    hvd::allreduce(v, name, ReduceOp::kSum);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the runtime is not usable after '" << after << "': " << e.what();
    return;
  }
  const int n = hvd::size();
  EXPECT_EQ(v, (std::vector<int32_t>{n * (n - 1) / 2, n})) << "after " << after;
}

}  // namespace hvdtest
