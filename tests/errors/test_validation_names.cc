// Bad names throw at once on the rank that passes them (no other rank could match them): every
// rank passes the same bad name here, through every entry point and the vector forms, and must
// throw the same hvd::InvalidArgumentError at once, whose text matches its row of docs/errors.md;
// the runtime stays usable. Also the other errors thrown at once: a name already in flight, an
// empty group with outputs, an empty handle. (Bad tensors and parameters: test_validation.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <functional>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/errors/validation_util.h"

namespace hvdtest {
namespace {

using hvd::TensorRef;

class Validation : public HvdTest {};

// ---- thrown at once, on every rank that passes the same bad name -------------------------------

// Runs op, which must throw InvalidArgumentError at once (not through the handle) with `expected`
// (the same text on every rank unless it names the rank).
void expect_at_once(const std::string& what, const std::function<void()>& op,
                    const std::string& expected, bool same_on_every_rank = true) {
  std::string msg;
  try {
    Watchdog w(what, 30);
    op();
    ADD_FAILURE() << what << ": did not throw at once on rank " << hvd::rank();
  } catch (const hvd::InvalidArgumentError& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, expected) << what;
  expect_catalogued(msg, what);
  const auto all = gather_messages(msg, "v.at_once");
  if (!same_on_every_rank) return;
  for (const auto& m : all) EXPECT_EQ(m, msg) << what;
}

// Calls every entry point (and the vector forms) with `name`; each must throw at once.
void every_entry_point_rejects(const std::string& name,
                               const std::function<std::string(const char* op)>& expected) {
  std::vector<float> v(static_cast<size_t>(2 * hvd::size()), 1.0f);
  TensorRef t(v.data(), DataType::kFloat32, {2 * hvd::size()});
  expect_at_once(
      "allreduce_async", [&] { hvd::allreduce_async(t, t, name); }, expected("allreduce"));
  expect_at_once(
      "allreduce (vector)", [&] { hvd::allreduce(v, name); }, expected("allreduce"));
  expect_at_once(
      "grouped_allreduce_async", [&] { hvd::grouped_allreduce_async({t}, {t}, name); },
      expected("grouped_allreduce"));
  expect_at_once(
      "allgather_async", [&] { hvd::allgather_async(t, name); }, expected("allgather"));
  expect_at_once(
      "allgather (vector)", [&] { hvd::allgather(v, name); }, expected("allgather"));
  expect_at_once(
      "broadcast_async", [&] { hvd::broadcast_async(t, 0, name); }, expected("broadcast"));
  expect_at_once(
      "broadcast (vector)", [&] { hvd::broadcast(v, 0, name); }, expected("broadcast"));
  expect_at_once(
      "alltoall_async", [&] { hvd::alltoall_async(t, {}, name); }, expected("alltoall"));
  expect_at_once(
      "alltoall (vector)", [&] { hvd::alltoall(v, {}, name); }, expected("alltoall"));
  expect_at_once(
      "reducescatter_async", [&] { hvd::reducescatter_async(t, name); }, expected("reducescatter"));
  expect_at_once(
      "reducescatter (vector)", [&] { hvd::reducescatter(v, name); }, expected("reducescatter"));
  expect_still_usable("v.bad_name");
}

TEST_F(Validation, EmptyName) {
  every_entry_point_rejects("", [](const char* op) {
    return std::string(op) + " needs a tensor name: every rank must pass the same non-empty name.";
  });
}

TEST_F(Validation, NameTooLong) {
  const std::string name(hvd::kMaxNameBytes + 1, 'n');
  every_entry_point_rejects(name, [&](const char* op) {
    return std::string(op) + " of '" + std::string(64, 'n') +
           "...' failed: the name has 1025 bytes; names may have " + "at most 1024 bytes.";
  });
  // The longest name is fine.
  std::vector<int32_t> v = {1};
  Watchdog w("v.longest_name");
  hvd::allreduce(v, std::string(hvd::kMaxNameBytes, 'm'), ReduceOp::kSum);
  EXPECT_EQ(v[0], size_);
}

TEST_F(Validation, NameWithNul) {
  const std::string name("ab\0cd", 5);
  every_entry_point_rejects(name, [](const char* op) {
    return std::string(op) +
           " of 'ab\\0cd' failed: the name has a NUL byte at offset 2; names may not contain NUL "
           "bytes.";
  });
}

TEST_F(Validation, NameStartingWithNul) {
  const std::string name("\0", 1);
  every_entry_point_rejects(name, [](const char* op) {
    return std::string(op) +
           " of '\\0' failed: the name has a NUL byte at offset 0; names may not contain NUL "
           "bytes.";
  });
}

TEST_F(Validation, ReservedName) {
  for (const std::string name : {"__hvd.barrier", "__hvd.join", "__hvd.shutdown", "__hvd.x"}) {
    every_entry_point_rejects(name, [&](const char* op) {
      return std::string(op) + " of '" + name +
             "' failed: names starting with '__hvd.' are reserved for hvd's own operations; choose "
             "another name.";
    });
  }
  // barrier() and join() still work.
  Watchdog w("v.barrier_after_reserved");
  hvd::barrier();
}

// allreduce_async checks a name in full only when no lane takes the tensor (a lane's name passed
// the checks when it was first negotiated): with lanes open for "v.lane.*", bad names, one of them
// a lane's name followed by a NUL byte, still throw their own error at once, and the name's error
// still comes before a bad tensor's.
TEST_F(Validation, BadNamesWhileLanesAreOpen) {
  std::vector<std::vector<float>> grads(4, std::vector<float>(8, 1.0f));
  auto step = [&] {
    std::vector<hvd::Handle> hs;
    for (size_t i = 0; i < grads.size(); ++i)
      hs.push_back(hvd::allreduce_async(std::span<float>(grads[i]), "v.lane." + std::to_string(i),
                                        ReduceOp::kSum));
    for (auto& h : hs) h.wait();
  };
  Watchdog w("v.lanes", 60);
  for (int s = 0; s < 3; ++s) step();  // negotiated, cached, then served by the lanes
  std::vector<float> v(8, 1.0f);
  TensorRef t(v.data(), DataType::kFloat32, {8});
  const std::string nul_after_lane("v.lane.0\0x", 10);
  expect_at_once(
      "lane name + NUL", [&] { hvd::allreduce_async(t, t, nul_after_lane); },
      "allreduce of 'v.lane.0\\0x' failed: the name has a NUL byte at offset 8; names may not "
      "contain NUL bytes.");
  expect_at_once(
      "empty name", [&] { hvd::allreduce_async(t, t, ""); },
      "allreduce needs a tensor name: every rank must pass the same non-empty name.");
  expect_at_once(
      "reserved name", [&] { hvd::allreduce_async(t, t, "__hvd.v.lane.0"); },
      "allreduce of '__hvd.v.lane.0' failed: names starting with '__hvd.' are reserved for hvd's "
      "own operations; choose another name.");
  TensorRef null_data(nullptr, DataType::kFloat32, {8});
  expect_at_once(
      "bad name and bad tensor", [&] { hvd::allreduce_async(null_data, null_data, ""); },
      "allreduce needs a tensor name: every rank must pass the same non-empty name.");
  // The lanes still serve their tensors.
  for (auto& g : grads) std::fill(g.begin(), g.end(), 1.0f);
  step();
  for (const auto& g : grads) EXPECT_EQ(g[7], static_cast<float>(size_));
}

TEST_F(Validation, NameAlreadyInFlight) {
  std::vector<int32_t> a = {1, 2}, b = {3, 4};
  const std::string name = "v.in_flight";
  SlowNegotiation slow;
  Watchdog w(name, 60);
  hvd::Handle first = hvd::allreduce_async(std::span<int32_t>(a), name, ReduceOp::kSum);
  expect_at_once(
      name, [&] { hvd::allreduce_async(std::span<int32_t>(b), name, ReduceOp::kSum); },
      "allreduce of '" + name + "' failed: a tensor named '" + name +
          "' is already in flight on rank " + std::to_string(rank_) +
          ". Wait for its handle before reusing the name, or give each tensor a unique name.",
      /*same_on_every_rank=*/false);
  EXPECT_TRUE(wait_ok(first, name));
  EXPECT_EQ(a, (std::vector<int32_t>{size_, 2 * size_}));
}

TEST_F(Validation, EmptyGroupWithOutputs) {
  std::vector<float> v(4, 1.0f);
  expect_at_once(
      "v.empty_group",
      [&] {
        hvd::grouped_allreduce_async({}, {TensorRef(v.data(), DataType::kFloat32, {4})},
                                     "v.empty_group");
      },
      "grouped_allreduce of 'v.empty_group' failed: 0 inputs but 1 outputs; pass one output per "
      "input.");
  // An empty group without outputs is complete at once.
  hvd::Handle h = hvd::grouped_allreduce_async({}, {}, "v.empty_group");
  EXPECT_TRUE(h.ready());
  EXPECT_TRUE(wait_ok(h, "v.empty_group"));
}

TEST_F(Validation, EmptyHandle) {
  expect_at_once(
      "v.empty_handle", [] { hvd::Handle().wait(); },
      "this hvd::Handle is empty: it was default-constructed, not returned by a collective.");
}

}  // namespace
}  // namespace hvdtest
