// A tensor alone in its response (submitted, then waited on, before the next) is reduced straight
// from the caller's buffers: out of place from input to output, in place on the caller's buffer,
// never through the fusion buffer. Every rank checks its own exact values for every reduce op and
// dtype, in place and out of place, with and without prescale/postscale, and that the process-wide
// fusion-buffer copy counters (ops/host_memory.h, fusion_copy_counts()) did not move. A grouped
// pair, which is fused, must move them by its bytes: the counters are live, so the zero checks can
// fail. A rank that has joined contributes a stand-in, also reduced without the buffer.
//
// ctest runs it on 1..4 ranks; with HVD_COMPRESSION=fp16 (np3), where float32/float64 tensors must
// go through the buffer (the 16-bit casts happen while packing) and the other dtypes must not; and
// on 2 fake nodes of 2 ranks with HVD_HIERARCHICAL_ALLREDUCE=1 (np4), whose rings also reduce a
// lone tensor in place in its output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "ops/host_memory.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

using hvd::ops::fusion_copy_counts;
using hvd::ops::FusionCopyCounts;

bool compressed_run() {
  const char* c = std::getenv("HVD_COMPRESSION");
  return c != nullptr && std::string(c) != "none" && std::string(c) != "";
}

// Whether HVD_COMPRESSION packs this dtype as 16 bits (common/compression.h: float32 and float64).
bool packed_as_16_bits(DataType t) {
  return compressed_run() && (t == DataType::kFloat32 || t == DataType::kFloat64);
}

FusionCopyCounts operator-(const FusionCopyCounts& a, const FusionCopyCounts& b) {
  return FusionCopyCounts{a.packed_bytes - b.packed_bytes, a.unpacked_bytes - b.unpacked_bytes,
                          a.batches - b.batches};
}

// fp16 rounds the average of some inputs (not the sums: the inputs are small integers) and the
// 16-bit dtypes their average; everything else is exact.
double tolerance(ReduceOp op, DataType t) {
  if (op == ReduceOp::kAverage && (is_16bit_float(t) || packed_as_16_bits(t))) return 1e-3;
  return 0.0;
}

// One allreduce of `n` elements, alone in flight on every rank, checked on this rank; returns the
// fusion-buffer counters it moved.
FusionCopyCounts lone_allreduce(ReduceOp op, DataType t, int64_t n, bool in_place, double prescale,
                                double postscale, const std::string& name) {
  const int rank = hvd::rank(), size = hvd::size();
  Buffer in(t, n), out;
  in.fill([&](int64_t i) { return reduce_contrib(op, t, rank, size, i); });
  if (!in_place) {
    out = Buffer(t, n);
    out.fill([](int64_t) { return 99; });
  }
  const FusionCopyCounts before = fusion_copy_counts();
  {
    Watchdog w(name);
    hvd::TensorRef i = in.ref();
    hvd::TensorRef o = in_place ? i : out.ref();
    hvd::Handle h =
        enqueue([&] { return hvd::allreduce_async(i, o, name, op, prescale, postscale); }, name);
    wait_ok(h, name);
  }
  const FusionCopyCounts moved = fusion_copy_counts() - before;
  check_values(
      in_place ? in : out,
      [&](int64_t i) { return reduce_expected(op, t, size, i, prescale, postscale); }, name,
      tolerance(op, t));
  if (!in_place) {
    check_values(
        in, [&](int64_t i) { return reduce_contrib(op, t, rank, size, i); },
        name + " input must be unchanged");
  }
  return moved;
}

// Every dtype x size, in place and out of place, for `op`: exact values, and no fusion-buffer copy
// unless HVD_COMPRESSION packs the dtype.
void run_op(ReduceOp op, double prescale, double postscale, const std::string& tag) {
  for (DataType t : all_dtypes()) {
    for (int64_t n : all_sizes()) {
      for (bool in_place : {false, true}) {
        const std::string name = "lone." + tag + "." + op_str(op) + "." + type_str(t) + "." +
                                 std::to_string(n) + (in_place ? ".in" : ".out");
        const FusionCopyCounts moved =
            lone_allreduce(op, t, n, in_place, prescale, postscale, name);
        if (packed_as_16_bits(t)) {
          if (n > 0) {
            EXPECT_EQ(moved.batches, 1)
                << name << ": a compressed tensor is packed (rank " << hvd::rank() << ")";
            EXPECT_EQ(moved.unpacked_bytes, n * 2) << name;
            EXPECT_GE(moved.packed_bytes, n * 2) << name;
          }
        } else {
          EXPECT_EQ(moved.batches, 0) << name << ": a lone tensor went through the fusion buffer "
                                      << "(rank " << hvd::rank() << ")";
          EXPECT_EQ(moved.packed_bytes, 0) << name;
          EXPECT_EQ(moved.unpacked_bytes, 0) << name;
        }
      }
    }
  }
}

class LoneAllreduce : public HvdTest {};

TEST_F(LoneAllreduce, SumNoFusionBufferInPlaceAndOutOfPlace) {
  run_op(ReduceOp::kSum, 1.0, 1.0, "plain");
}
TEST_F(LoneAllreduce, AverageNoFusionBufferInPlaceAndOutOfPlace) {
  run_op(ReduceOp::kAverage, 1.0, 1.0, "plain");
}
TEST_F(LoneAllreduce, MinNoFusionBufferInPlaceAndOutOfPlace) {
  run_op(ReduceOp::kMin, 1.0, 1.0, "plain");
}
TEST_F(LoneAllreduce, MaxNoFusionBufferInPlaceAndOutOfPlace) {
  run_op(ReduceOp::kMax, 1.0, 1.0, "plain");
}
TEST_F(LoneAllreduce, ProductNoFusionBufferInPlaceAndOutOfPlace) {
  run_op(ReduceOp::kProduct, 1.0, 1.0, "plain");
}
// Prescale before the reduction (copied into the output first out of place, scaled in place in
// place), postscale after; the values stay exact in every dtype (prescale 2 makes them even).
TEST_F(LoneAllreduce, PrescaleAndPostscaleSumAndAverage) {
  run_op(ReduceOp::kSum, 2.0, 1.5, "scaled");
  run_op(ReduceOp::kAverage, 2.0, 1.5, "scaled");
}
TEST_F(LoneAllreduce, PrescaleAndPostscaleMinAndMax) {
  run_op(ReduceOp::kMin, 2.0, 1.5, "scaled");
  run_op(ReduceOp::kMax, 2.0, 1.5, "scaled");
}

// The counters are live: a grouped pair is one fused response, packed and unpacked.
TEST_F(LoneAllreduce, FusedPairMovesTheCounters) {
  const int rank = hvd::rank(), size = hvd::size();
  for (DataType t : {DataType::kInt32, DataType::kFloat32}) {
    const std::string name = std::string("lone.pair.") + type_str(t);
    Buffer a(t, 5), b(t, 1000);
    for (Buffer* x : {&a, &b})
      x->fill([&](int64_t i) { return reduce_contrib(ReduceOp::kSum, t, rank, size, i); });
    const FusionCopyCounts before = fusion_copy_counts();
    {
      Watchdog w(name);
      try {
        hvd::grouped_allreduce(std::vector<hvd::TensorRef>{a.ref(), b.ref()}, name, ReduceOp::kSum);
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " threw on rank " << rank << ": " << e.what();
      }
    }
    const FusionCopyCounts moved = fusion_copy_counts() - before;
    for (Buffer* x : {&a, &b}) {
      check_values(
          *x, [&](int64_t i) { return reduce_expected(ReduceOp::kSum, t, size, i, 1.0, 1.0); },
          name);
    }
    EXPECT_EQ(moved.batches, 1) << name << " (rank " << rank << ")";
    const int64_t esize = packed_as_16_bits(t) ? 2 : static_cast<int64_t>(elem_size(t));
    EXPECT_EQ(moved.unpacked_bytes, 1005 * esize) << name;
    if (packed_as_16_bits(t))
      EXPECT_GE(moved.packed_bytes, 1005 * esize) << name << " (padded to the rank count)";
    else
      EXPECT_EQ(moved.packed_bytes, 1005 * esize) << name;
  }
}

// The last rank joins at once; the others reduce lone tensors (in place and out of place, average
// over the contributors) while its stand-ins contribute the identity. No rank copies through the
// fusion buffer, the joined one included.
TEST_F(LoneAllreduce, JoinedRankStandInsSkipTheBuffer) {
  const int rank = hvd::rank(), size = hvd::size();
  if (size < 2) GTEST_SKIP() << "needs a rank that joins and one that does not";
  const bool joins = rank == size - 1;
  const DataType t = DataType::kInt64;  // never packed as 16 bits
  const int64_t n = 1001;
  const FusionCopyCounts before = fusion_copy_counts();
  if (!joins) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      for (bool in_place : {false, true}) {
        const std::string name =
            std::string("lone.join.") + op_str(op) + (in_place ? ".in" : ".out");
        // Symmetric around base over the k contributors (every rank but the joined one): the sum
        // is k * base, the average base exactly, the maximum base + k - 1.
        const int k = size - 1;
        auto base = [](int64_t x) { return static_cast<double>(10 + x % 7); };
        Buffer in(t, n), out(t, n);
        in.fill([&](int64_t x) { return base(x) + 2 * rank - (k - 1); });
        hvd::TensorRef i = in.ref();
        hvd::TensorRef o = in_place ? i : out.ref();
        Watchdog w(name);
        hvd::Handle h = enqueue([&] { return hvd::allreduce_async(i, o, name, op); }, name);
        wait_ok(h, name);
        check_values(
            in_place ? in : out,
            [&](int64_t x) {
              if (op == ReduceOp::kMax) return base(x) + (k - 1);
              return op == ReduceOp::kSum ? k * base(x) : base(x);
            },
            name);
      }
    }
  }
  {
    Watchdog w("lone.join.join");
    try {
      hvd::join();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "join threw on rank " << rank << ": " << e.what();
    }
  }
  const FusionCopyCounts moved = fusion_copy_counts() - before;
  EXPECT_EQ(moved.batches, 0) << "rank " << rank << (joins ? " (joined)" : "");
  EXPECT_EQ(moved.packed_bytes, 0) << "rank " << rank;
  EXPECT_EQ(moved.unpacked_bytes, 0) << "rank " << rank;
}

}  // namespace
}  // namespace hvdtest
