#pragma once

// Helpers shared by the argument-check tests (test_validation.cc, test_validation_outputs.cc,
// test_validation_names.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"
#include "tests/support/error_catalogue_gtest.h"

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

// Generous for an oversubscribed machine; an error takes one negotiation cycle.
inline constexpr double kSecondsAllowed = 15.0;

// Runs op(bad) on every rank, bad == (rank == bad_rank). Every rank must fail with `expected`
// (computed for bad_rank) within kSecondsAllowed.
inline void expect_everywhere(const std::string& name, int bad_rank,
                              const std::function<hvd::Handle(bool bad)>& op,
                              const std::string& expected) {
  const bool bad = hvd::rank() == bad_rank;
  std::string msg;
  const auto start = std::chrono::steady_clock::now();
  try {
    Watchdog w(name, 60);
    hvd::Handle h = op(bad);
    h.wait();
    ADD_FAILURE() << name << ": no error on rank " << hvd::rank() << " (bad argument on rank "
                  << bad_rank << ")";
  } catch (const hvd::InvalidArgumentError& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ": expected hvd::InvalidArgumentError on rank " << hvd::rank()
                  << ", got: " << e.what();
    msg = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kSecondsAllowed)
      << name << ": the error took " << seconds << " s on rank " << hvd::rank();
  if (!msg.empty()) {
    EXPECT_EQ(msg, expected) << name << " on rank " << hvd::rank();
    expect_catalogued(msg, name);
  }
  const auto all = gather_messages(msg, name);
  for (size_t r = 0; r < all.size(); ++r)
    EXPECT_EQ(all[r], msg) << name << ": rank " << r << " and rank " << hvd::rank()
                           << " got different messages";
  expect_still_usable(name);
}

// The ranks that take the bad argument: rank 0 and the last rank (one run on one rank).
inline std::vector<int> bad_ranks() {
  const int n = hvd::size();
  return n == 1 ? std::vector<int>{0} : std::vector<int>{0, n - 1};
}

inline std::string reported(const std::string& op, const std::string& name, int rank,
                            const std::string& reason) {
  return op + " of '" + name + "' failed: rank " + std::to_string(rank) + ": " + reason;
}

}  // namespace hvdtest
