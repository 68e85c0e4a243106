// Argument checks of the outputs: an all-reduce's output against its input (size, dtype, device,
// partial overlap; in place and shared inputs are fine), and a grouped all-reduce's outputs (one
// per input, no overlap between members). The bad argument is on rank 0, then on the last rank;
// every rank must fail with the same message, within seconds, and the runtime stays usable.
// (Bad tensors and parameters: test_validation.cc; names: test_validation_names.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"
#include "tests/errors/validation_util.h"

namespace hvdtest {
namespace {

using hvd::Device;
using hvd::TensorRef;

class Validation : public HvdTest {};

// ---- allreduce: output against input --------------------------------------------------------

TEST_F(Validation, OutputDoesNotMatchInput) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> in(4, 1.0f), out(4, 0.0f);
    std::vector<double> out64(4, 0.0);
    const std::string name = "v.mismatch.allreduce.r" + std::to_string(bad_rank);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          return hvd::allreduce_async(TensorRef(in.data(), DataType::kFloat32, {4}),
                                      TensorRef(out.data(), DataType::kFloat32, {bad ? 3 : 4}),
                                      name, ReduceOp::kSum);
        },
        reported("allreduce", name, bad_rank,
                 "the output (float32 [3]) does not match the input (float32 [4]): pass an output "
                 "of the same dtype "
                 "and number of elements, or the input itself."));
    const std::string gname = "v.mismatch.grouped.r" + std::to_string(bad_rank);
    std::vector<float> in1(4, 1.0f), out1(4, 0.0f);
    expect_everywhere(
        gname, bad_rank,
        [&](bool bad) {
          return hvd::grouped_allreduce_async(
              {TensorRef(in.data(), DataType::kFloat32, {4}),
               TensorRef(in1.data(), DataType::kFloat32, {4})},
              {TensorRef(out.data(), DataType::kFloat32, {4}),
               bad ? TensorRef(out64.data(), DataType::kFloat64, {2, 2})
                   : TensorRef(out1.data(), DataType::kFloat32, {4})},
              gname, ReduceOp::kSum);
        },
        reported("allreduce", gname + ".1", bad_rank,
                 "output 1 (float64 [2,2]) does not match input 1 (float32 [4]): pass an output of "
                 "the same dtype and "
                 "number of elements, or the input itself."));
  }
}

TEST_F(Validation, OutputOnAnotherDevice) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> in(4, 1.0f), out(4, 0.0f);
    const std::string name = "v.device_mismatch.r" + std::to_string(bad_rank);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          return hvd::allreduce_async(
              TensorRef(in.data(), DataType::kFloat32, {4}),
              TensorRef(out.data(), DataType::kFloat32, {4}, bad ? Device::cuda(0) : Device::cpu()),
              name, ReduceOp::kSum);
        },
        reported("allreduce", name, bad_rank,
                 "the input is on cpu but the output on cuda:0: pass both on the same device."));
    const std::string gname = "v.device_mismatch.grouped.r" + std::to_string(bad_rank);
    expect_everywhere(
        gname, bad_rank,
        [&](bool bad) {
          return hvd::grouped_allreduce_async({TensorRef(in.data(), DataType::kFloat32, {4})},
                                              {TensorRef(out.data(), DataType::kFloat32, {4},
                                                         bad ? Device::cuda(0) : Device::cpu())},
                                              gname, ReduceOp::kSum);
        },
        reported("allreduce", gname + ".0", bad_rank,
                 "input 0 is on cpu but output 0 on cuda:0: pass both on the same device."));
  }
}

TEST_F(Validation, OutputPartlyOverlapsInput) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> buf(8, 1.0f), out(4, 0.0f);
    const std::string name = "v.overlap.r" + std::to_string(bad_rank);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          // The output starts 2 floats into the input: 8 bytes in common.
          return hvd::allreduce_async(
              TensorRef(buf.data(), DataType::kFloat32, {4}),
              TensorRef(bad ? buf.data() + 2 : out.data(), DataType::kFloat32, {4}), name,
              ReduceOp::kSum);
        },
        reported("allreduce", name, bad_rank,
                 "the output overlaps the input (8 bytes in common) without being the same buffer: "
                 "pass the same "
                 "buffer as input and output for an in-place allreduce, or buffers that do not "
                 "overlap."));
    // Also backwards: the output ends inside the input.
    const std::string name2 = "v.overlap_before.r" + std::to_string(bad_rank);
    expect_everywhere(
        name2, bad_rank,
        [&](bool bad) {
          return hvd::allreduce_async(
              TensorRef(buf.data() + 3, DataType::kFloat32, {4}),
              TensorRef(bad ? buf.data() : out.data(), DataType::kFloat32, {4}), name2,
              ReduceOp::kSum);
        },
        reported("allreduce", name2, bad_rank,
                 "the output overlaps the input (4 bytes in common) without being the same buffer: "
                 "pass the same "
                 "buffer as input and output for an in-place allreduce, or buffers that do not "
                 "overlap."));
  }
}

TEST_F(Validation, GroupedOutputOverlapsAnotherMembersInput) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 0.0f), d(4, 0.0f);
    const std::string name = "v.group_overlap.r" + std::to_string(bad_rank);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          // Output 1 is input 0 (a whole buffer, but another member's): reduced in place, input 0
          // would change under member 0.
          return hvd::grouped_allreduce_async(
              {TensorRef(a.data(), DataType::kFloat32, {4}),
               TensorRef(b.data(), DataType::kFloat32, {4})},
              {TensorRef(c.data(), DataType::kFloat32, {4}),
               TensorRef(bad ? a.data() : d.data(), DataType::kFloat32, {4})},
              name, ReduceOp::kSum);
        },
        reported("allreduce", name + ".0", bad_rank,
                 "output 1 overlaps input 0 (16 bytes in common) without being the same buffer: "
                 "pass the same buffer "
                 "as input and output for an in-place allreduce, or buffers that do not overlap."));
  }
}

TEST_F(Validation, GroupedOutputsOverlap) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(8, 0.0f), d(4, 0.0f);
    const std::string name = "v.group_outputs.r" + std::to_string(bad_rank);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          return hvd::grouped_allreduce_async(
              {TensorRef(a.data(), DataType::kFloat32, {4}),
               TensorRef(b.data(), DataType::kFloat32, {4})},
              {TensorRef(c.data(), DataType::kFloat32, {4}),
               TensorRef(bad ? c.data() + 1 : d.data(), DataType::kFloat32, {4})},
              name, ReduceOp::kSum);
        },
        reported("allreduce", name + ".0", bad_rank,
                 "output 0 and output 1 overlap in memory: give every output its own buffer."));
  }
}

// What stays allowed: in place (output == input), one input in several members, disjoint buffers
// side by side.
TEST_F(Validation, InPlaceAndSharedInputsAreFine) {
  const int n = size_;
  std::vector<float> a(4, 1.0f), b(4, 2.0f), c(8, 0.0f);
  {
    Watchdog w("v.ok.inplace");
    hvd::Handle h = hvd::allreduce_async(TensorRef(a.data(), DataType::kFloat32, {4}),
                                         TensorRef(a.data(), DataType::kFloat32, {2, 2}),
                                         "v.ok.inplace", ReduceOp::kSum);
    EXPECT_TRUE(wait_ok(h, "v.ok.inplace"));
    EXPECT_EQ(a, std::vector<float>(4, static_cast<float>(n)));
  }
  {
    Watchdog w("v.ok.grouped");
    // Input 0 twice; the outputs side by side in one buffer; member 2 in place.
    hvd::Handle h = hvd::grouped_allreduce_async(
        {TensorRef(b.data(), DataType::kFloat32, {4}), TensorRef(b.data(), DataType::kFloat32, {4}),
         TensorRef(a.data(), DataType::kFloat32, {4})},
        {TensorRef(c.data(), DataType::kFloat32, {4}),
         TensorRef(c.data() + 4, DataType::kFloat32, {4}),
         TensorRef(a.data(), DataType::kFloat32, {4})},
        "v.ok.grouped", ReduceOp::kSum);
    EXPECT_TRUE(wait_ok(h, "v.ok.grouped"));
    EXPECT_EQ(c, std::vector<float>(8, 2.0f * n));
    EXPECT_EQ(a, std::vector<float>(4, static_cast<float>(n * n)));
  }
  {
    Watchdog w("v.ok.null_empty");
    // A null pointer is fine without elements, in every entry point.
    hvd::Handle h1 =
        hvd::allreduce_async(TensorRef(nullptr, DataType::kFloat32, {0}),
                             TensorRef(nullptr, DataType::kFloat32, {0, 3}), "v.ok.null_empty.ar");
    hvd::Handle h2 =
        hvd::allgather_async(TensorRef(nullptr, DataType::kInt8, {0, 5}), "v.ok.null_empty.ag");
    hvd::Handle h3 =
        hvd::broadcast_async(TensorRef(nullptr, DataType::kInt8, {0}), 0, "v.ok.null_empty.bc");
    hvd::Handle h4 =
        hvd::alltoall_async(TensorRef(nullptr, DataType::kInt8, {0}), {}, "v.ok.null_empty.a2a");
    hvd::Handle h5 =
        hvd::reducescatter_async(TensorRef(nullptr, DataType::kInt8, {0}), "v.ok.null_empty.rs");
    for (hvd::Handle* h : {&h1, &h2, &h3, &h4, &h5}) EXPECT_TRUE(wait_ok(*h, "v.ok.null_empty"));
  }
}

// ---- grouped allreduce: one output per input ---------------------------------------------------

TEST_F(Validation, GroupedCountMismatch) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    const std::string name = "v.group_count.r" + std::to_string(bad_rank);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          std::vector<TensorRef> in = {TensorRef(a.data(), DataType::kFloat32, {4}),
                                       TensorRef(b.data(), DataType::kFloat32, {4})};
          std::vector<TensorRef> out = in;
          if (bad) out.pop_back();
          return hvd::grouped_allreduce_async(in, out, name, ReduceOp::kSum);
        },
        reported("allreduce", name + ".0", bad_rank,
                 "2 inputs but 1 outputs; pass one output per input."));
  }
}

// Issue 9 (3): rank 0 passes a null output in a group. It used to die with SIGSEGV inside
// MPI_Allreduce while the other ranks returned normally.
TEST_F(Validation, GroupedNullOutputOnRankZero) {
  std::vector<float> data(4, 1.0f);
  TensorRef in(data.data(), DataType::kFloat32, {4});
  expect_everywhere(
      "g", 0,
      [&](bool) {
        return hvd::grouped_allreduce_async(
            {in}, {rank_ == 0 ? TensorRef(nullptr, DataType::kFloat32, {4}) : in}, "g",
            ReduceOp::kSum);
      },
      reported("allreduce", "g.0", 0, "output 0 has 4 elements but a null data pointer."));
  EXPECT_EQ(data, std::vector<float>(4, 1.0f)) << "a failed operation must not touch its buffers";
}

// Found by fuzz_api: the unchanged member used to run from the cache alone while the reshaped one
// waited for the whole group at rank 0, on every rank, forever (runtime/controller.cc, cycle()).
TEST_F(Validation, GroupSubmittedAgainWithOneMemberChanged) {
  std::vector<float> a(49, 1.0f), b(49, 1.0f);
  {
    Watchdog w("v.regroup (first)", 30);
    hvd::Handle h = hvd::grouped_allreduce_async({TensorRef(a.data(), DataType::kFloat32, {}),
                                                  TensorRef(b.data(), DataType::kFloat32, {7, 7})},
                                                 {TensorRef(a.data(), DataType::kFloat32, {}),
                                                  TensorRef(b.data(), DataType::kFloat32, {7, 7})},
                                                 "v.regroup", ReduceOp::kSum);
    EXPECT_TRUE(wait_ok(h, "v.regroup (first)"));
  }
  {
    Watchdog w("v.regroup (member 0 reshaped)", 30);
    hvd::Handle h = hvd::grouped_allreduce_async({TensorRef(a.data(), DataType::kFloat32, {7, 7}),
                                                  TensorRef(b.data(), DataType::kFloat32, {7, 7})},
                                                 {TensorRef(a.data(), DataType::kFloat32, {7, 7}),
                                                  TensorRef(b.data(), DataType::kFloat32, {7, 7})},
                                                 "v.regroup", ReduceOp::kSum);
    EXPECT_TRUE(wait_ok(h, "v.regroup (member 0 reshaped)"));
  }
}

}  // namespace
}  // namespace hvdtest
