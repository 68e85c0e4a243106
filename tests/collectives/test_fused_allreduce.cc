// The all-reduce skeleton (ops/fused_allreduce.h) on host memory (ops/host_memory.h), with a fake
// reduce() that records what it is given and stands for `contributors` ranks holding the same data
// (sum: input * contributors; the other ranks contribute the identity, 0). Checks the single-tensor
// path (no packing, input to output or in place, prescale before the reduction), the packed layout
// (the FusionBuffer's fusion_layout, alignment 1), prescale/postscale, the average over the
// contributors, zero-size and odd sizes, every dtype, the 16-bit packing of HVD_COMPRESSION with
// its zero padding, a backend that folds part of the post factor into its reduction, and the
// timeline phases, and the fusion-buffer copy counters (none for a lone tensor). Also the small
// helpers of ops/collective_op.h (row_bytes, check_device). And the copies cut into slices for
// helper threads (HVD_COPY_THREADS): the same bytes reduced and written as on one thread.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/dtype_math.h"
#include "hvd/error.h"
#include "ops/fused_allreduce.h"
#include "tests/support/dtype_values.h"
#include "ops/host_memory.h"

namespace hvd::ops {
namespace {

using hvdtest::get;
using hvdtest::kAllDtypes;
using hvdtest::put;
using hvdtest::value;

struct Call {
  const void* in;
  void* out;
  int64_t count;
  DataType dtype;
  double post;
  std::vector<unsigned char> bytes;  // what `in` held
};

class FakeAllreduce : public FusedAllreduce<HostMemory> {
 public:
  explicit FakeAllreduce(FusionBuffer& buffer, CopyWorkers* copies = nullptr)
      : FusedAllreduce(HostMemory(buffer, copies)) {}
  const char* name() const override { return "fake_allreduce"; }
  bool enabled(const OpBatch&) const override { return true; }

  std::vector<Call> calls;
  DataType packed_as = DataType::kFloat32;
  bool pack_as_wire = false;  // packed_dtype() returns packed_as for float32/float64 batches
  int64_t parts_of = 1;
  bool direct = true;
  bool folds_division = false;  // reduce() divides by the contributors itself

 protected:
  double reduce(const void* in, void* out, int64_t count, DataType dtype, const OpBatch& batch,
                double post) override {
    Call c{in, out, count, dtype, post, {}};
    const auto* b = static_cast<const unsigned char*>(in);
    c.bytes.assign(b, b + count * static_cast<int64_t>(dtype_size(dtype)));
    calls.push_back(std::move(c));
    const double k = batch.contributors;
    if (dtype == DataType::kFloat16 && batch.dtype != dtype) {
      auto* h = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < count; ++i) {
        double v = half_to_float(static_cast<const uint16_t*>(in)[i]) * k;
        if (folds_division) v /= k;
        h[i] = float_to_half(static_cast<float>(v));
      }
    } else {
      scale_copy(dtype, in, out, static_cast<size_t>(count), folds_division ? 1.0 : k);
    }
    return folds_division ? batch.postscale : post;
  }
  DataType packed_dtype(const OpBatch& batch) const override {
    const bool wide = batch.dtype == DataType::kFloat32 || batch.dtype == DataType::kFloat64;
    return pack_as_wire && wide ? packed_as : batch.dtype;
  }
  bool reduce_directly(const OpBatch&) const override { return direct; }
  int64_t parts(const OpBatch&, DataType) const override { return parts_of; }
};

// Tensors of `sizes` elements filled with value(); outputs filled with a marker.
struct Tensors {
  Tensors(DataType dtype, const std::vector<int64_t>& sizes, bool in_place) : dtype(dtype) {
    for (size_t j = 0; j < sizes.size(); ++j) {
      const size_t n = static_cast<size_t>(sizes[j]);
      in.emplace_back(n * dtype_size(dtype) + 1);
      out.emplace_back(n * dtype_size(dtype) + 1, static_cast<unsigned char>(0xab));
      for (size_t i = 0; i < n; ++i) put(dtype, in[j].data(), i, value(dtype, j, i));
      shapes.push_back({sizes[j]});
    }
    this->in_place = in_place;
  }
  OpBatch batch(ReduceOp op, double prescale, double postscale, int contributors) {
    OpBatch b;
    b.dtype = dtype;
    b.reduce_op = op;
    b.prescale = prescale;
    b.postscale = postscale;
    b.contributors = contributors;
    for (size_t j = 0; j < in.size(); ++j) {
      OpEntry e;
      e.name =
          std::string("t").append(std::to_string(j));  // not "t" + ...: GCC 12 -Wrestrict misfire
      e.input = TensorRef(in[j].data(), dtype, shapes[j]);
      e.output = in_place ? e.input : TensorRef(out[j].data(), dtype, shapes[j]);
      b.entries.push_back(std::move(e));
    }
    return b;
  }
  void* result(size_t j) { return in_place ? in[j].data() : out[j].data(); }

  DataType dtype;
  bool in_place;
  std::vector<std::vector<unsigned char>> in, out;
  std::vector<std::vector<int64_t>> shapes;
};

// Every output element is value() * expect_factor.
void expect_results(Tensors& t, const std::vector<int64_t>& sizes, double factor,
                    const std::string& what) {
  for (size_t j = 0; j < sizes.size(); ++j)
    for (size_t i = 0; i < static_cast<size_t>(sizes[j]); ++i)
      ASSERT_EQ(get(t.dtype, t.result(j), i), value(t.dtype, j, i) * factor)
          << what << ": tensor " << j << " element " << i;
}

TEST(FusedAllreduce, SingleTensorGoesStraightFromInputToOutput) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  Tensors t(DataType::kFloat32, {7}, false);
  OpBatch b = t.batch(ReduceOp::kSum, 1.0, 1.0, 3);
  op.execute(b);
  ASSERT_EQ(op.calls.size(), 1u);
  EXPECT_EQ(op.calls[0].in, t.in[0].data());
  EXPECT_EQ(op.calls[0].out, t.out[0].data());
  EXPECT_EQ(op.calls[0].count, 7);
  EXPECT_EQ(op.calls[0].dtype, DataType::kFloat32);
  EXPECT_EQ(buffer.capacity(), 0u) << "the fusion buffer must not be used";
  expect_results(t, {7}, 3.0, "sum");
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(get(t.dtype, t.in[0].data(), i), value(t.dtype, 0, i));
}

TEST(FusedAllreduce, SingleTensorPrescaleIsCopiedIntoTheOutputFirst) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  Tensors t(DataType::kFloat64, {5}, false);
  OpBatch b = t.batch(ReduceOp::kSum, 2.0, 0.5, 3);
  op.execute(b);
  ASSERT_EQ(op.calls.size(), 1u);
  EXPECT_EQ(op.calls[0].in, t.out[0].data()) << "reduced in place in the output";
  EXPECT_EQ(op.calls[0].out, t.out[0].data());
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(get(t.dtype, op.calls[0].bytes.data(), i), value(t.dtype, 0, i) * 2.0);
  EXPECT_EQ(buffer.capacity(), 0u);
  expect_results(t, {5}, 3.0, "prescale 2, 3 ranks, postscale 0.5");
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(get(t.dtype, t.in[0].data(), i), value(t.dtype, 0, i));
}

TEST(FusedAllreduce, SingleTensorInPlace) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  Tensors t(DataType::kInt32, {9}, true);
  OpBatch b = t.batch(ReduceOp::kSum, 2.0, 1.0, 2);
  op.execute(b);
  ASSERT_EQ(op.calls.size(), 1u);
  EXPECT_EQ(op.calls[0].in, t.in[0].data());
  EXPECT_EQ(op.calls[0].out, t.in[0].data());
  expect_results(t, {9}, 4.0, "in place");
}

TEST(FusedAllreduce, ZeroSizeTensorsAreNotReduced) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  {
    Tensors t(DataType::kFloat32, {0}, false);
    OpBatch b = t.batch(ReduceOp::kSum, 2.0, 3.0, 2);
    op.execute(b);
  }
  {
    Tensors t(DataType::kFloat32, {0, 0, 0}, false);
    OpBatch b = t.batch(ReduceOp::kAverage, 2.0, 3.0, 2);
    op.execute(b);
    EXPECT_EQ(t.out[1][0], 0xab) << "nothing written";
  }
  EXPECT_TRUE(op.calls.empty());
}

TEST(FusedAllreduce, FusedBatchLayoutScalesAndAverage) {
  const std::vector<int64_t> sizes = {1, 7, 0, 13, 1001, 2};
  for (DataType dtype : kAllDtypes) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (in_place ? " in place" : ""));
      FusionBuffer buffer;
      FakeAllreduce op(buffer);
      Tensors t(dtype, sizes, in_place);
      // Average over 4 contributors: x * 2 (prescale) * 4 (ranks) * 0.5 (postscale) / 4 = x.
      OpBatch b = t.batch(ReduceOp::kAverage, 2.0, 0.5, 4);
      op.execute(b);
      ASSERT_EQ(op.calls.size(), 1u);
      const Call& c = op.calls[0];
      std::vector<int64_t> bytes;
      for (int64_t s : sizes) bytes.push_back(s * static_cast<int64_t>(dtype_size(dtype)));
      const FusionLayout layout = fusion_layout(bytes, 1);
      EXPECT_EQ(c.in, c.out) << "in place in the fusion buffer";
      EXPECT_GE(buffer.capacity(), static_cast<size_t>(layout.total_bytes));
      EXPECT_EQ(c.count * static_cast<int64_t>(dtype_size(dtype)), layout.total_bytes);
      EXPECT_EQ(c.dtype, dtype);
      EXPECT_EQ(c.post, 0.5 / 4);
      for (size_t j = 0; j < sizes.size(); ++j)
        for (size_t i = 0; i < static_cast<size_t>(sizes[j]); ++i)
          ASSERT_EQ(get(dtype, c.bytes.data() + layout.offsets[j], i), value(dtype, j, i) * 2.0)
              << "packed tensor " << j << " element " << i;
      expect_results(t, sizes, 1.0, "average");
      if (!in_place) {
        EXPECT_EQ(t.out[2][0], 0xab) << "the zero-size output is not written";
      }
    }
  }
}

TEST(FusedAllreduce, SingleTensorEveryDtype) {
  for (DataType dtype : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    FusionBuffer buffer;
    FakeAllreduce op(buffer);
    Tensors t(dtype, {13}, false);
    OpBatch b = t.batch(ReduceOp::kSum, 2.0, 0.5, 3);
    op.execute(b);
    ASSERT_EQ(op.calls.size(), 1u);
    EXPECT_EQ(buffer.capacity(), 0u);
    expect_results(t, {13}, 3.0, "sum");
  }
}

TEST(FusedAllreduce, BackendMayRefuseTheDirectPath) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  op.direct = false;
  op.parts_of = 4;  // 7 elements padded to 8
  Tensors t(DataType::kInt64, {7}, false);
  OpBatch b = t.batch(ReduceOp::kSum, 1.0, 1.0, 2);
  op.execute(b);
  ASSERT_EQ(op.calls.size(), 1u);
  EXPECT_NE(op.calls[0].in, t.in[0].data());
  EXPECT_EQ(op.calls[0].count, 8);
  EXPECT_EQ(get(DataType::kInt64, op.calls[0].bytes.data(), 7), 0.0) << "padding is zero";
  expect_results(t, {7}, 2.0, "sum");
}

// HVD_COMPRESSION's packing: float32/float64 cast to fp16 with the prescale folded in, padded with
// zeros to a multiple of parts; unpacked with the factor reduce() leaves.
TEST(FusedAllreduce, CompressedPackingAndFoldedDivision) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    for (bool folds : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (folds ? " folds 1/contributors" : ""));
      FusionBuffer buffer;
      FakeAllreduce op(buffer);
      op.pack_as_wire = true;
      op.packed_as = DataType::kFloat16;
      op.parts_of = 3;
      op.folds_division = folds;
      const std::vector<int64_t> sizes = {5, 0, 6};  // 11 elements, padded to 12
      Tensors t(dtype, sizes, false);
      OpBatch b = t.batch(ReduceOp::kAverage, 2.0, 0.5, 4);
      op.execute(b);
      ASSERT_EQ(op.calls.size(), 1u);
      const Call& c = op.calls[0];
      EXPECT_EQ(c.dtype, DataType::kFloat16);
      EXPECT_EQ(c.count, 12);
      const auto* h = reinterpret_cast<const uint16_t*>(c.bytes.data());
      size_t k = 0;
      for (size_t j = 0; j < sizes.size(); ++j)
        for (size_t i = 0; i < static_cast<size_t>(sizes[j]); ++i, ++k)
          ASSERT_EQ(h[k], float_to_half(static_cast<float>(value(dtype, j, i) * 2.0)));
      EXPECT_EQ(h[11], 0) << "padding";
      expect_results(t, sizes, 1.0, "average");
    }
  }
  // Other dtypes are never packed as 16 bits, and a single tensor takes the direct path.
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  op.pack_as_wire = true;
  op.packed_as = DataType::kFloat16;
  Tensors t(DataType::kInt32, {3}, false);
  OpBatch b = t.batch(ReduceOp::kSum, 1.0, 1.0, 2);
  op.execute(b);
  ASSERT_EQ(op.calls.size(), 1u);
  EXPECT_EQ(op.calls[0].in, t.in[0].data());
  // A compressed single tensor goes through the fusion buffer.
  Tensors f(DataType::kFloat32, {3}, false);
  OpBatch fb = f.batch(ReduceOp::kSum, 1.0, 1.0, 2);
  op.execute(fb);
  ASSERT_EQ(op.calls.size(), 2u);
  EXPECT_EQ(op.calls[1].dtype, DataType::kFloat16);
  expect_results(f, {3}, 2.0, "sum");
}

TEST(FusedAllreduce, TimelinePhasesAroundTheCopies) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  std::vector<std::string> phases;
  auto trace = [&](const char* activity, bool begin) {
    phases.push_back(std::string(begin ? "+" : "-") + activity);
  };
  Tensors one(DataType::kFloat32, {4}, false);
  OpBatch b1 = one.batch(ReduceOp::kSum, 1.0, 1.0, 1);
  b1.trace = trace;
  op.execute(b1);
  EXPECT_TRUE(phases.empty());
  Tensors two(DataType::kFloat32, {4, 4}, false);
  OpBatch b2 = two.batch(ReduceOp::kSum, 1.0, 1.0, 1);
  b2.trace = trace;
  op.execute(b2);
  EXPECT_EQ(phases,
            (std::vector<std::string>{"+MEMCPY_IN_FUSION_BUFFER", "-MEMCPY_IN_FUSION_BUFFER",
                                      "+MEMCPY_OUT_FUSION_BUFFER", "-MEMCPY_OUT_FUSION_BUFFER"}));
}

// The fusion-buffer copy counters (fusion_copy_counts()): a lone tensor, in place or not, scaled
// or not, adds nothing; a fused batch adds its packed and unpacked bytes; a compressed lone tensor
// (which needs the 16-bit buffer) adds its 16-bit bytes.
TEST(FusedAllreduce, CopyCountersSeeOnlyTheFusionBufferRoundTrip) {
  FusionBuffer buffer;
  FakeAllreduce op(buffer);
  auto run = [&](Tensors& t, double prescale, double postscale) {
    const FusionCopyCounts before = fusion_copy_counts();
    OpBatch b = t.batch(ReduceOp::kAverage, prescale, postscale, 2);
    op.execute(b);
    const FusionCopyCounts after = fusion_copy_counts();
    return FusionCopyCounts{after.packed_bytes - before.packed_bytes,
                            after.unpacked_bytes - before.unpacked_bytes,
                            after.batches - before.batches};
  };
  for (bool in_place : {false, true}) {
    for (double prescale : {1.0, 3.0}) {
      SCOPED_TRACE(std::string(in_place ? "in place" : "out of place") + ", prescale " +
                   std::to_string(prescale));
      Tensors t(DataType::kFloat32, {1001}, in_place);
      const FusionCopyCounts d = run(t, prescale, 0.5);
      EXPECT_EQ(d.packed_bytes, 0);
      EXPECT_EQ(d.unpacked_bytes, 0);
      EXPECT_EQ(d.batches, 0);
      expect_results(t, {1001}, prescale * 0.5, "average of 2 contributors");
    }
  }
  Tensors two(DataType::kFloat64, {5, 6}, false);
  const FusionCopyCounts fused = run(two, 1.0, 1.0);
  EXPECT_EQ(fused.packed_bytes, 11 * 8);
  EXPECT_EQ(fused.unpacked_bytes, 11 * 8);
  EXPECT_EQ(fused.batches, 1);
  expect_results(two, {5, 6}, 1.0, "fused average");

  op.pack_as_wire = true;
  op.packed_as = DataType::kFloat16;
  op.parts_of = 4;  // 7 fp16 values padded to 8
  Tensors compressed(DataType::kFloat32, {7}, true);
  const FusionCopyCounts c = run(compressed, 1.0, 1.0);
  EXPECT_EQ(c.packed_bytes, 8 * 2);
  EXPECT_EQ(c.unpacked_bytes, 7 * 2);
  EXPECT_EQ(c.batches, 1);
  expect_results(compressed, {7}, 1.0, "compressed average");
}

// A batch large enough to be copied in slices (HostMemory::kParallelBytes) by 1-3 helpers and
// the calling thread: the fusion buffer handed to reduce() and every output equal, bit for bit,
// what one thread makes; for every dtype, in and out of place, with scales and the average, and
// under 16-bit packing with padding. Slices cut through tensors (sizes of no round number of
// slices, empty tensors among them, a tensor of one element at a slice's edge).
TEST(FusedAllreduce, CopiesOnHelpersEqualOneThreadBitForBit) {
  const std::vector<int64_t> sizes = {0, 70001, 3, 0, 65536, 1, 150001, 0, 9, 33333};
  struct Case {
    const char* what;
    bool wire;
    DataType packed_as;
    int64_t parts;
  };
  const Case cases[] = {{"plain", false, DataType::kFloat32, 1},
                        {"fp16 wire, 3 parts", true, DataType::kFloat16, 3},
                        {"bf16 wire, 4 parts", true, DataType::kBFloat16, 4}};
  for (int helpers : {1, 2, 3}) {
    CopyWorkers workers(helpers);
    for (const Case& k : cases) {
      for (DataType dtype : kAllDtypes) {
        if (k.wire && dtype != DataType::kFloat32 && dtype != DataType::kFloat64) continue;
        for (bool in_place : {false, true}) {
          for (double prescale : {1.0, 2.0}) {
            SCOPED_TRACE(std::to_string(helpers) + " helpers, " + k.what + ", " +
                         dtype_name(dtype) + (in_place ? ", in place" : "") + ", prescale " +
                         std::to_string(prescale));
            auto run = [&](CopyWorkers* copies, Tensors& t) {
              FusionBuffer buffer;
              FakeAllreduce op(buffer, copies);
              op.pack_as_wire = k.wire;
              op.packed_as = k.packed_as;
              op.parts_of = k.parts;
              OpBatch b = t.batch(prescale == 1.0 ? ReduceOp::kSum : ReduceOp::kAverage, prescale,
                                  prescale == 1.0 ? 1.0 : 0.5, 3);
              op.execute(b);
              EXPECT_EQ(op.calls.size(), 1u);
              return op.calls.empty() ? std::vector<unsigned char>{} : op.calls[0].bytes;
            };
            Tensors one(dtype, sizes, in_place), many(dtype, sizes, in_place);
            const auto packed_one = run(nullptr, one);
            const auto packed_many = run(&workers, many);
            ASSERT_EQ(packed_one.size(), packed_many.size());
            ASSERT_GE(static_cast<int64_t>(packed_one.size()), HostMemory::kParallelBytes);
            ASSERT_TRUE(packed_one == packed_many) << "the packed buffers differ";
            for (size_t j = 0; j < sizes.size(); ++j) {
              const size_t bytes = static_cast<size_t>(sizes[j]) * dtype_size(dtype);
              ASSERT_EQ(std::memcmp(one.result(j), many.result(j), bytes), 0) << "tensor " << j;
              if (!in_place) {
                ASSERT_EQ(many.out[j][bytes], 0xab) << "past tensor " << j;
              }
            }
          }
        }
      }
    }
  }
}

// Below HostMemory::kParallelBytes a batch is copied on the calling thread alone.
TEST(FusedAllreduce, SmallBatchStaysOnTheCallingThread) {
  CopyWorkers workers(2);
  FusionBuffer buffer;
  FakeAllreduce op(buffer, &workers);
  Tensors t(DataType::kFloat32, {1000, 1000, 1000}, false);
  OpBatch b = t.batch(ReduceOp::kSum, 1.0, 1.0, 2);
  op.execute(b);
  expect_results(t, {1000, 1000, 1000}, 2.0, "small batch");
  EXPECT_EQ(workers.shared_runs(), 0);
}

TEST(CollectiveOpHelpers, RowBytes) {
  EXPECT_EQ(row_bytes(TensorRef(nullptr, DataType::kFloat32, {})), 4);
  EXPECT_EQ(row_bytes(TensorRef(nullptr, DataType::kFloat32, {10})), 4);
  EXPECT_EQ(row_bytes(TensorRef(nullptr, DataType::kInt64, {3, 5, 7})), 5 * 7 * 8);
  EXPECT_EQ(row_bytes(TensorRef(nullptr, DataType::kFloat16, {0, 3})), 6);
}

TEST(CollectiveOpHelpers, CheckDevice) {
  OpBatch b;
  OpEntry e;
  e.name = "grad";
  TensorRef cpu(nullptr, DataType::kFloat32, {1});
  TensorRef on1(nullptr, DataType::kFloat32, {1}, Device::cuda(1));
  EXPECT_NO_THROW(check_device(b, e, cpu, 0));
  EXPECT_NO_THROW(check_device(b, e, on1, 1));
  try {
    check_device(b, e, on1, 0);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& err) {
    EXPECT_EQ(std::string(err.what()),
              "allreduce of 'grad' failed: the tensor is on cuda:1 but this process uses cuda:0 "
              "(local rank modulo the visible devices). Allocate it on that device.");
  }
}

}  // namespace
}  // namespace hvd::ops
