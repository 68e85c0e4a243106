// HVD_COMPRESSION=fp16|bf16 on the MPI CPU all-reduce (ops/mpi/allreduce.cc; the hierarchical
// rings in ops/hierarchical/allreduce.cc when HVD_HIERARCHICAL_ALLREDUCE=1 on fake nodes):
//   - the conversions (double -> 16 bits rounded once, the casts in and out of the wire format);
//   - every reduce op on float32 and float64 tensors, one tensor and fused batches, in place and
//     out of place, with and without prescale/postscale, equal to the 16-bit-rounded expectation
//     each rank computes itself. The inputs are q * (1 + 2^-13) with q a small multiple of 1/8:
//     exact in float32, not in 16 bits, and rounding back to q there; so a compressed result is
//     exactly the reduction of the q (which is exact in 16 bits), while an uncompressed one is not;
//   - random values: the flat path's documented result (each rank's input rounded, combined in
//     double, rounded once after the division of kAverage) bit for bit, within the error bound of
//     the exact sum, and the same bits on every rank;
//   - a fused batch of mixed dtypes: integers and fp16/bf16 tensors pass unchanged;
//   - ranks that have joined contribute the identity (through the 16-bit cast too);
//   - the bytes on the wire (only with OMPI_MCA_btl=self,tcp, otherwise skipped): what this process
//     writes to its sockets (/proc/self/io wchar, which counts the TCP transport's writev calls)
//     during a 16 MiB float32 all-reduce is half of the uncompressed one with fp16 and bf16, a
//     quarter for float64, and unchanged for int32;
//   - a bad HVD_COMPRESSION value fails init() with a message naming the variable.
// Each test re-initialises hvd with its HVD_COMPRESSION (the test owns MPI, so init() after
// shutdown() works).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <bit>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "common/dtype_math.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

// --- helpers -------------------------------------------------------------------------------------

void reinit(const std::string& compression) {
  Watchdog w("hvd re-init with HVD_COMPRESSION=" + compression, 90);
  hvd::shutdown();
  setenv("HVD_COMPRESSION", compression.c_str(), 1);
  hvd::init();
}

DataType wire_of(const std::string& c) {
  return c == "fp16" ? DataType::kFloat16 : DataType::kBFloat16;
}

// The 16-bit value nearest to d (the library's conversion, tested on its own below), as a double.
double round16(DataType wire, double d) {
  return wire == DataType::kFloat16 ? hvd::half_to_float(hvd::double_to_half(d))
                                    : hvd::bfloat16_to_float(hvd::double_to_bfloat16(d));
}

// Whether the hierarchical rings run the float batches (HVD_HIERARCHICAL_ALLREDUCE=1, fake nodes).
bool hierarchical() {
  const char* h = std::getenv("HVD_HIERARCHICAL_ALLREDUCE");
  return h != nullptr && std::string(h) == "1" && hvd::cross_size() > 1 && hvd::local_size() > 1 &&
         hvd::is_homogeneous();
}

constexpr double kNudge =
    1.0 + 0x1p-13;  // exact in float; q * kNudge rounds back to q in fp16 and bf16

// q: multiples of 1/8 in [-1, 1] (sum, average, min, max) or +-1/2, 1, 2 (product): every
// reduction over up to 4 ranks, times 2, is exact in 16 bits.
double q_value(ReduceOp op, int r, int64_t i) {
  if (op == ReduceOp::kProduct) {
    const double m = (i + r) % 3 == 0 ? 0.5 : ((i + r) % 3 == 1 ? 1.0 : 2.0);
    return (i + 2 * r) % 3 == 0 ? -m : m;
  }
  return static_cast<double>((i * 5 + r * 3) % 17 - 8) / 8.0;
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
  }
  return 0;
}

// The documented compressed result for element i of q * kNudge inputs. The reduction of the
// rounded inputs (prescale * q) is exact in 16 bits; only kAverage's division rounds:
//   flat path:          round16(S * (1 / c)) * postscale (the division before the one rounding);
//   hierarchical rings: S cast back with postscale / c folded into the cast (in the tensor's type).
// `ranks`: the contributors (a joined rank contributes the identity, and kAverage divides by their
// count).
double expected_over(ReduceOp op, DataType dtype, DataType wire, bool hier,
                     const std::vector<int>& ranks, int64_t i, double pre, double post) {
  double s = pre * q_value(op, ranks.at(0), i);
  for (size_t k = 1; k < ranks.size(); ++k) s = combine(op, s, pre * q_value(op, ranks[k], i));
  const int c = static_cast<int>(ranks.size());
  if (op != ReduceOp::kAverage) return s * post;
  if (!hier) return round16(wire, s * (1.0 / c)) * post;
  const double factor = post / c;
  return dtype == DataType::kFloat32 ? static_cast<double>(static_cast<float>(s * factor))
                                     : s * factor;
}

// The same with every rank 0..c-1 contributing.
double expected_compressed(ReduceOp op, DataType dtype, DataType wire, bool hier, int c, int64_t i,
                           double pre, double post) {
  // Called once per element: the rank list is reused, not allocated each time (under ASan's slow
  // unwinder, scripts/test --sanitize, an allocation per element made each test ~25x slower).
  thread_local std::vector<int> ranks;
  if (ranks.size() != static_cast<size_t>(c)) {
    ranks.resize(static_cast<size_t>(c));
    for (int r = 0; r < c; ++r) ranks[static_cast<size_t>(r)] = r;
  }
  return expected_over(op, dtype, wire, hier, ranks, i, pre, post);
}

// What this process has written to files and sockets so far (/proc/self/io wchar), -1 if unknown.
int64_t written_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return -1;
}

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// --- conversions (pure functions, every rank runs them) ------------------------------------------

// Checks that h is a nearest 16-bit value to x (ties to even), comparing in long double, which
// holds the differences exactly for the magnitudes used.
void expect_nearest(DataType wire, double x, uint16_t h) {
  auto value = [&](uint16_t b) -> long double {
    return wire == DataType::kFloat16 ? hvd::half_to_float(b) : hvd::bfloat16_to_float(b);
  };
  const uint16_t mag = h & 0x7fff, sign = h & 0x8000;
  const uint16_t max_finite = wire == DataType::kFloat16 ? 0x7bff : 0x7f7f;
  if (mag == max_finite + 1) {  // Inf: only from at least max + half a step (65520 for fp16)
    EXPECT_GE(std::fabs(x), wire == DataType::kFloat16 ? 65520.0 : 0x1.ffp127) << x;
    return;
  }
  ASSERT_LE(mag, max_finite) << x;
  const long double err = std::fabs(value(h) - static_cast<long double>(x));
  for (int step : {-1, 1}) {
    if ((step < 0 && mag == 0) || (step > 0 && mag == max_finite)) continue;
    const long double other =
        std::fabs(value(static_cast<uint16_t>(sign | (mag + step))) - static_cast<long double>(x));
    EXPECT_LE(err, other) << "not the nearest: " << x;
    if (err == other) {
      EXPECT_EQ(h & 1, 0) << "a tie must go to even: " << x;
    }
  }
}

TEST(CompressionConversions, DoubleRoundsOnceToNearestEven) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> exp16(-24, 15), expbf(-60, 60);
  std::uniform_int_distribution<uint64_t> mant(0, (uint64_t{1} << 52) - 1);
  for (int i = 0; i < 200000; ++i) {
    const double m = 1.0 + std::ldexp(static_cast<double>(mant(rng)), -52);
    const double sign = (i & 1) ? -1.0 : 1.0;
    const double xh = sign * std::ldexp(m, exp16(rng));
    expect_nearest(DataType::kFloat16, xh, hvd::double_to_half(xh));
    const double xb = sign * std::ldexp(m, expbf(rng));
    expect_nearest(DataType::kBFloat16, xb, hvd::double_to_bfloat16(xb));
    if (testing::Test::HasFailure()) return;
  }
  // Just above a tie: a cast through float would make it a tie and round it down to even.
  EXPECT_EQ(hvd::double_to_half(1.0 + 0x1p-11 + 0x1p-40), hvd::float_to_half(1.0f + 0x1p-10f));
  EXPECT_EQ(hvd::double_to_bfloat16(1.0 + 0x1p-8 + 0x1p-40),
            hvd::float_to_bfloat16(1.0f + 0x1p-7f));
  EXPECT_EQ(hvd::double_to_half(1.0 + 0x1p-11), hvd::float_to_half(1.0f));  // a real tie: even
  EXPECT_EQ(hvd::double_to_half(1e300), 0x7c00);
  EXPECT_EQ(hvd::double_to_half(-1e300), 0xfc00);
  EXPECT_EQ(hvd::double_to_half(65519.99), 0x7bff);
  EXPECT_EQ(hvd::double_to_half(65520.0), 0x7c00);
  EXPECT_EQ(hvd::double_to_bfloat16(1e300), 0x7f80);
  EXPECT_EQ(hvd::double_to_half(0x1p-26), 0);            // below half the smallest subnormal
  EXPECT_EQ(hvd::double_to_half(0x1p-25 + 0x1p-60), 1);  // just above it
  EXPECT_TRUE(std::isnan(hvd::half_to_float(hvd::double_to_half(std::nan("")))));
  EXPECT_TRUE(std::isnan(hvd::bfloat16_to_float(hvd::double_to_bfloat16(std::nan("")))));
}

TEST(CompressionConversions, EveryFinite16BitValueRoundTrips) {
  for (DataType wire : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<uint16_t> all, back(65536);
    for (uint32_t b = 0; b < 65536; ++b) all.push_back(static_cast<uint16_t>(b));
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
      std::vector<double> wide(65536);  // room for either dtype
      hvd::decompress_copy(wire, dtype, all.data(), wide.data(), all.size(), 1.0);
      hvd::compress_copy(dtype, wire, wide.data(), back.data(), all.size(), 1.0);
      for (uint32_t b = 0; b < 65536; ++b) {
        const bool nan = wire == DataType::kFloat16 ? (b & 0x7c00) == 0x7c00 && (b & 0x3ff)
                                                    : (b & 0x7f80) == 0x7f80 && (b & 0x7f);
        if (nan) continue;
        ASSERT_EQ(back[b], all[b]) << type_str(wire) << " via " << type_str(dtype) << ": " << b;
      }
    }
  }
}

TEST(CompressionConversions, FactorsAreFoldedIntoTheCasts) {
  const std::vector<float> in = {1.0f, -3.0f, 0.1f, 65504.0f, 1e-3f};
  std::vector<uint16_t> h(in.size());
  hvd::compress_copy(DataType::kFloat32, DataType::kFloat16, in.data(), h.data(), in.size(), 2.0);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(h[i], hvd::double_to_half(2.0 * in[i])) << i;
  EXPECT_EQ(h[3], 0x7c00);  // 131008 overflows to Inf
  std::vector<float> out(in.size());
  hvd::decompress_copy(DataType::kFloat16, DataType::kFloat32, h.data(), out.data(), h.size(),
                       1.0 / 3);
  for (size_t i = 0; i < in.size(); ++i)
    EXPECT_EQ(out[i], static_cast<float>(static_cast<double>(hvd::half_to_float(h[i])) * (1.0 / 3)))
        << i;
  // reduce_blocks_16: three blocks of two, average of 3 (factor 1/3), in double, rounded once.
  const std::vector<uint16_t> blocks = {hvd::float_to_half(1.0f), hvd::float_to_half(2048.0f),
                                        hvd::float_to_half(1.0f), hvd::float_to_half(1.0f),
                                        hvd::float_to_half(1.0f), hvd::float_to_half(1.0f)};
  std::vector<uint16_t> r(2);
  hvd::reduce_blocks_16(DataType::kFloat16, ReduceOp::kAverage, blocks.data(), 3, 2, 2, 1.0 / 3,
                        r.data());
  EXPECT_EQ(r[0], hvd::float_to_half(1.0f));
  // (2048 + 1 + 1) / 3 = 683.33 -> 683.5 in fp16 (step 0.5); summing in fp16 would lose both 1s
  // (2048 + 1 rounds to 2048) and give 682.5.
  EXPECT_EQ(r[1], hvd::double_to_half(2050.0 / 3));
  EXPECT_EQ(hvd::half_to_float(r[1]), 683.5f);
  EXPECT_THROW(
      hvd::compress_copy(DataType::kInt32, DataType::kFloat16, in.data(), h.data(), 1, 1.0),
      std::invalid_argument);
}

// The vectorised conversions (x86-64 with AVX2/F16C) against the portable ones, bit for bit, on
// random bit patterns (NaNs with payloads, infinities, subnormals, ties) and every 16-bit value.
TEST(CompressionConversions, VectorisedEqualsPortableBitForBit) {
  std::mt19937_64 rng(11);
  constexpr size_t n = 100003;  // not a multiple of 8: the tail goes through the portable code
  std::vector<float> f(n);
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = static_cast<uint32_t>(rng());
    if (i % 4 == 1)
      b = (b & 0x80000000u) | (static_cast<uint32_t>(rng() % 40 + 100) << 23) | (b & 0x7fffffu);
    if (i % 4 == 2) b = (b & 0xffffe000u) | 0x1000u;  // fp16 ties (for normal fp16 magnitudes)
    if (i % 4 == 3) b = (b & 0xffff0000u) | 0x8000u;  // bf16 ties
    f[i] = std::bit_cast<float>(b);
    uint64_t c = rng();
    if (i % 2) c = (c & 0x800fffffffffffffull) | (static_cast<uint64_t>(rng() % 80 + 980) << 52);
    d[i] = std::bit_cast<double>(c);
  }
  std::vector<uint16_t> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<uint16_t>(b);
  // `nan16`: out holds 16-bit values of `wire`, and two NaNs count as equal (the payload of a sum
  // of two NaNs depends on the operand order, which the compiler may swap in the portable code).
  auto both = [&](const std::function<void(std::vector<uint16_t>&)>& run, const std::string& what,
                  DataType nan16 = DataType::kInt8) {
    std::vector<uint16_t> fast, slow;
    hvd::simd_enabled() = true;
    run(fast);
    hvd::simd_enabled() = false;
    run(slow);
    hvd::simd_enabled() = true;
    auto is_nan = [&](uint16_t b) {
      return nan16 == DataType::kFloat16
                 ? (b & 0x7c00) == 0x7c00 && (b & 0x3ff)
                 : nan16 == DataType::kBFloat16 && (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    };
    size_t diff = 0;
    for (size_t i = 0; i < fast.size(); ++i)
      diff += fast[i] != slow[i] && !(is_nan(fast[i]) && is_nan(slow[i]));
    EXPECT_EQ(diff, 0u) << what;
  };
  for (DataType wire : {DataType::kFloat16, DataType::kBFloat16}) {
    for (double factor : {1.0, 2.0, 1.0 / 3}) {
      const std::string tag = std::string(type_str(wire)) + " factor " + std::to_string(factor);
      both(
          [&](std::vector<uint16_t>& out) {
            out.resize(n);
            hvd::compress_copy(DataType::kFloat32, wire, f.data(), out.data(), n, factor);
          },
          "compress float32 " + tag);
      both(
          [&](std::vector<uint16_t>& out) {
            out.resize(n);
            hvd::compress_copy(DataType::kFloat64, wire, d.data(), out.data(), n, factor);
          },
          "compress float64 " + tag);
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
        both(
            [&](std::vector<uint16_t>& out) {
              std::vector<double> wide(all.size());
              hvd::decompress_copy(wire, dtype, all.data(), wide.data(), all.size(), factor);
              out.resize(all.size() * 4);
              std::memcpy(out.data(), wide.data(),
                          all.size() * (dtype == DataType::kFloat32 ? 4 : 8));
            },
            std::string("decompress to ") + type_str(dtype) + " " + tag);
      }
      for (ReduceOp op : all_ops()) {
        for (size_t k : {1, 2, 3, 4}) {
          both(
              [&](std::vector<uint16_t>& out) {
                const size_t m = n / k;
                std::vector<uint16_t> blocks(m * k);
                std::mt19937 r2(5);
                for (auto& b : blocks) b = static_cast<uint16_t>(r2());
                out.resize(m);
                hvd::reduce_blocks_16(wire, op, blocks.data(), k, m, m, factor, out.data());
              },
              std::string("reduce_blocks_16 ") + op_str(op) + " k " + std::to_string(k) + " " + tag,
              wire);
        }
      }
    }
  }
}

// --- all-reduce ----------------------------------------------------------------------------------

class Compression : public HvdTest, public testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    reinit(GetParam());
    HvdTest::SetUp();
    wire_ = wire_of(GetParam());
    hier_ = hierarchical();
  }
  DataType wire_ = DataType::kFloat16;
  bool hier_ = false;
};

struct Case {
  std::string name;
  DataType dtype;
  int64_t n;
  bool in_place;
  Buffer in, out;
  hvd::Handle handle;
};

// Every op x float dtype x size, in place and out of place, enqueued at once (the big ones fuse).
void run_exact(ReduceOp op, DataType wire, bool hier, double pre, double post,
               const std::string& tag) {
  const int rank = hvd::rank(), size = hvd::size();
  std::vector<Case> cases;
  int k = 0;
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    for (int64_t n : all_sizes()) {
      for (bool in_place : {true, false}) {
        Case c;
        c.name = "cmp." + tag + "." + op_str(op) + "." + type_str(t) + "." + std::to_string(n) +
                 "." + std::to_string(k++);
        c.dtype = t;
        c.n = n;
        c.in_place = in_place;
        c.in = Buffer(t, n);
        c.in.fill([&](int64_t i) { return q_value(op, rank, i) * kNudge; });
        if (!in_place) {
          c.out = Buffer(t, n);
          c.out.fill([](int64_t) { return 99; });
        }
        cases.push_back(std::move(c));
      }
    }
  }
  {
    Watchdog w("compressed allreduce " + tag + "." + op_str(op));
    for (Case& c : cases) {
      hvd::TensorRef in = c.in.ref();
      hvd::TensorRef out = c.in_place ? in : c.out.ref();
      c.handle =
          enqueue([&] { return hvd::allreduce_async(in, out, c.name, op, pre, post); }, c.name);
    }
    for (Case& c : cases) wait_ok(c.handle, c.name);
  }
  for (Case& c : cases) {
    if (!c.handle.valid()) continue;
    const Buffer& result = c.in_place ? c.in : c.out;
    check_values(
        result,
        [&](int64_t i) { return expected_compressed(op, c.dtype, wire, hier, size, i, pre, post); },
        c.name);
    if (!c.in_place) {
      check_values(
          c.in, [&](int64_t i) { return q_value(op, rank, i) * kNudge; },  // exact in float
          c.name + " input must be unchanged");
    }
  }
}

TEST_P(Compression, SumEveryFloatDtypeSizeInAndOutOfPlace) {
  run_exact(ReduceOp::kSum, wire_, hier_, 1, 1, "plain");
}
TEST_P(Compression, AverageEveryFloatDtypeSizeInAndOutOfPlace) {
  run_exact(ReduceOp::kAverage, wire_, hier_, 1, 1, "plain");
}
TEST_P(Compression, MinMaxProduct) {
  run_exact(ReduceOp::kMin, wire_, hier_, 1, 1, "plain");
  run_exact(ReduceOp::kMax, wire_, hier_, 1, 1, "plain");
  run_exact(ReduceOp::kProduct, wire_, hier_, 1, 1, "plain");
}
TEST_P(Compression, PrescaleAndPostscale) {
  for (ReduceOp op : all_ops()) run_exact(op, wire_, hier_, 2.0, 1.5, "scaled");
}

// Without compression the same inputs give q * kNudge sums, which these checks would reject: the
// exact tests above can tell a compressed result from an uncompressed one.
TEST_P(Compression, UncompressedResultWouldDiffer) {
  const int size = hvd::size();
  int64_t differ = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    float plain = 0;
    for (int r = 0; r < size; ++r)
      plain += static_cast<float>(q_value(ReduceOp::kSum, r, i) * kNudge);
    const double compressed =
        expected_compressed(ReduceOp::kSum, DataType::kFloat32, wire_, hier_, size, i, 1, 1);
    if (static_cast<double>(plain) != compressed) ++differ;
  }
  EXPECT_GT(differ, 800);
}

// Rank r runs r + 1 steps of compressed all-reduces, then joins: at step s ranks s..size-1
// contribute, the joined ones the identity of the op (cast to 16 bits like any input: 0, 1, +-Inf),
// and kAverage divides by the contributors.
TEST_P(Compression, JoinedRanksContributeTheIdentity) {
  const int rank = hvd::rank(), size = hvd::size();
  constexpr int64_t kLen = 1001;
  for (int s = 0; s <= rank; ++s) {
    std::vector<int> contributors;
    for (int r = s; r < size; ++r) contributors.push_back(r);
    std::vector<Case> cases;
    for (ReduceOp op : all_ops()) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
        Case c;
        c.name =
            std::string("cmp.join.") + op_str(op) + "." + type_str(t) + ".step" + std::to_string(s);
        c.dtype = t;
        c.n = kLen;
        c.in_place = true;
        c.in = Buffer(t, kLen);
        c.in.fill([&](int64_t i) { return q_value(op, rank, i) * kNudge; });
        cases.push_back(std::move(c));
      }
    }
    {
      Watchdog w("compressed allreduce with joined ranks, step " + std::to_string(s));
      size_t k = 0;
      for (ReduceOp op : all_ops()) {
        for (int j = 0; j < 2; ++j, ++k) {
          Case& c = cases[k];
          hvd::TensorRef t = c.in.ref();
          c.handle = enqueue([&] { return hvd::allreduce_async(t, t, c.name, op); }, c.name);
        }
      }
      for (Case& c : cases) wait_ok(c.handle, c.name);
    }
    size_t k = 0;
    for (ReduceOp op : all_ops()) {
      for (int j = 0; j < 2; ++j, ++k) {
        Case& c = cases[k];
        if (!c.handle.valid()) continue;
        check_values(
            c.in,
            [&](int64_t i) {
              return expected_over(op, c.dtype, wire_, hier_, contributors, i, 1, 1);
            },
            c.name);
      }
    }
  }
  int last = -1;
  {
    Watchdog w("join()");
    last = hvd::join();
  }
  EXPECT_EQ(last, size - 1);
}

// Random float32 values in [-1, 1]: every rank regenerates every rank's input (seeded by rank).
std::vector<float> random_input(int r, int64_t n) {
  std::mt19937 rng(1000 + static_cast<unsigned>(r));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST_P(Compression, RandomValuesRoundOnceWithinTheBoundAndAgreeOnEveryRank) {
  const int rank = hvd::rank(), size = hvd::size();
  constexpr int64_t n = 300007;
  const double u = wire_ == DataType::kFloat16 ? 0x1p-11 : 0x1p-8;  // unit roundoff
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < size; ++r) inputs.push_back(random_input(r, n));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    std::vector<float> data = inputs[static_cast<size_t>(rank)];
    const std::string name = std::string("cmp.random.") + op_str(op);
    {
      Watchdog w(name);
      hvd::TensorRef t = hvd::as_tensor(std::span<float>(data));
      hvd::Handle h = enqueue([&] { return hvd::allreduce_async(t, t, name, op); }, name);
      wait_ok(h, name);
    }
    const double div = op == ReduceOp::kAverage ? 1.0 / size : 1.0;
    int64_t off_rule = 0, off_bound = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double rounded_sum = 0, exact = 0, magnitude = 0;
      for (int r = 0; r < size; ++r) {
        const float x = inputs[static_cast<size_t>(r)][static_cast<size_t>(i)];
        rounded_sum += round16(wire_, x);
        exact += x;
        magnitude += std::fabs(x);
      }
      const double got = data[static_cast<size_t>(i)];
      // Flat path: each input rounded, combined exactly in double, rounded once after the division.
      if (!hier_ && got != round16(wire_, rounded_sum * div)) ++off_rule;
      // Error bound: input roundings, the final rounding (rings: one per step), subnormal slack.
      const double bound = (hier_ ? size + 1 : 2) * u * magnitude * div + (size + 1) * 0x1p-25;
      const double err = std::fabs(got - exact * div);
      worst = std::max(worst, err / (magnitude * div + 1e-30));
      if (err > bound) ++off_bound;
    }
    EXPECT_EQ(off_rule, 0) << name << ": elements not equal to the documented rounding";
    EXPECT_EQ(off_bound, 0) << name << ": elements beyond the error bound";
    if (rank == 0)
      std::printf("[ info ] %s %s: worst error %.3g x sum|x| (unit roundoff %.3g)\n",
                  GetParam().c_str(), name.c_str(), worst, u);
    // The same bits on every rank.
    const std::vector<int64_t> mine = {
        static_cast<int64_t>(fnv1a(data.data(), data.size() * sizeof(float)))};
    std::vector<int64_t> all;
    {
      Watchdog w(name + " checksum");
      all = hvd::allgather(mine, name + ".checksum");
    }
    ASSERT_EQ(all.size(), static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
      EXPECT_EQ(all[static_cast<size_t>(r)], mine[0]) << "rank " << r << " differs";
  }
}

// One batch of every dtype at once: the planner fuses per dtype; the float ones are compressed,
// integers (values fp16 cannot hold) and fp16/bf16 tensors are reduced exactly as without.
TEST_P(Compression, FusedBatchOfMixedDtypesLeavesIntegersAnd16BitAlone) {
  const int rank = hvd::rank(), size = hvd::size();
  struct Item {
    DataType t;
    int64_t n;
    double base;  // integers: base + rank, so the sum is size * base + size (size - 1) / 2
  };
  const std::vector<Item> items = {{DataType::kFloat32, 1000, 0},
                                   {DataType::kFloat32, 7, 0},
                                   {DataType::kFloat32, 50000, 0},
                                   {DataType::kFloat64, 3000, 0},
                                   {DataType::kFloat64, 1, 0},
                                   {DataType::kInt32, 5000, 100001},
                                   {DataType::kInt64, 5000, 1099511627776.0 + 3},
                                   {DataType::kUInt8, 100, 10},
                                   {DataType::kInt8, 100, -20},
                                   {DataType::kFloat16, 2000, 0},
                                   {DataType::kBFloat16, 2000, 0},
                                   {DataType::kFloat32, 20000, 0}};
  std::vector<Case> cases;
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    Case c;
    c.name = "cmp.mixed." + std::to_string(k) + "." + type_str(it.t);
    c.dtype = it.t;
    c.n = it.n;
    c.in_place = k % 2 == 0;
    c.in = Buffer(it.t, it.n);
    const bool is_float = it.t == DataType::kFloat32 || it.t == DataType::kFloat64;
    if (is_float) {
      c.in.fill([&](int64_t i) { return q_value(ReduceOp::kSum, rank, i) * kNudge; });
    } else if (is_16bit_float(it.t)) {
      c.in.fill([&](int64_t i) { return q_value(ReduceOp::kSum, rank, i); });  // exact in 16 bits
    } else {
      c.in.fill([&](int64_t i) { return it.base + rank + static_cast<double>(i % 3); });
    }
    if (!c.in_place) c.out = Buffer(it.t, it.n);
    cases.push_back(std::move(c));
  }
  {
    Watchdog w("compressed mixed batch");
    for (Case& c : cases) {
      hvd::TensorRef in = c.in.ref();
      hvd::TensorRef out = c.in_place ? in : c.out.ref();
      c.handle =
          enqueue([&] { return hvd::allreduce_async(in, out, c.name, ReduceOp::kSum); }, c.name);
    }
    for (Case& c : cases) wait_ok(c.handle, c.name);
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    Case& c = cases[k];
    if (!c.handle.valid()) continue;
    const Buffer& result = c.in_place ? c.in : c.out;
    const Item& it = items[k];
    if (c.dtype == DataType::kFloat32 || c.dtype == DataType::kFloat64) {
      check_values(
          result,
          [&](int64_t i) {
            return expected_compressed(ReduceOp::kSum, c.dtype, wire_, hier_, size, i, 1, 1);
          },
          c.name);
    } else if (is_16bit_float(c.dtype)) {
      check_values(
          result,
          [&](int64_t i) {
            double s = 0;
            for (int r = 0; r < size; ++r) s += q_value(ReduceOp::kSum, r, i);
            return s;
          },
          c.name);
    } else {
      check_values(
          result,
          [&](int64_t i) {
            const double s =
                size * (it.base + static_cast<double>(i % 3)) + size * (size - 1) / 2.0;
            if (c.dtype == DataType::kUInt8) return static_cast<double>(static_cast<uint8_t>(s));
            if (c.dtype == DataType::kInt8) return static_cast<double>(static_cast<int8_t>(s));
            return s;
          },
          c.name);
    }
  }
}

// Bytes this process writes to its sockets during an all-reduce (TCP transport only).
TEST_P(Compression, WireBytesAreHalved) {
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (hvd::size() == 1 || btl == nullptr || std::string(btl).find("tcp") == std::string::npos ||
      std::string(btl).find("vader") != std::string::npos ||
      std::string(btl).find("sm") != std::string::npos)
    GTEST_SKIP()
        << "needs 2+ ranks and OMPI_MCA_btl=self,tcp (bytes are counted on the TCP sockets)";
  if (written_bytes() < 0) GTEST_SKIP() << "/proc/self/io is not readable here";
  constexpr int64_t n = int64_t{1} << 22;  // 16 MiB of float32
  const int size = hvd::size();
  // Bytes written by all ranks together during one all-reduce of dtype t under `compression`
  // (per rank: the median of 3, after one to warm up; summed over ranks, as MPI's algorithm for a
  // rank count that is not a power of two may load some ranks more than others).
  auto measure = [&](const std::string& compression, DataType t) {
    reinit(compression);
    Buffer b(t, n);
    b.fill([](int64_t i) { return static_cast<double>(i % 7); });
    std::vector<int64_t> samples;
    const std::string name = std::string("cmp.bytes.") + type_str(t);
    for (int rep = 0; rep < 4; ++rep) {
      Watchdog w(name);
      hvd::barrier();
      const int64_t before = written_bytes();
      hvd::TensorRef ref = b.ref();
      hvd::Handle h =
          enqueue([&] { return hvd::allreduce_async(ref, ref, name, ReduceOp::kSum); }, name);
      wait_ok(h, name);
      if (rep > 0) samples.push_back(written_bytes() - before);  // the first one warms up
    }
    std::sort(samples.begin(), samples.end());
    std::vector<int64_t> total = {samples[1]};
    Watchdog w(name + " total");
    hvd::allreduce(total, name + ".total", ReduceOp::kSum);
    return static_cast<double>(total[0]);
  };
  const double f32_none = measure("none", DataType::kFloat32),
               f64_none = measure("none", DataType::kFloat64),
               i32_none = measure("none", DataType::kInt32);
  const double f32 = measure(GetParam(), DataType::kFloat32),
               f64 = measure(GetParam(), DataType::kFloat64),
               i32 = measure(GetParam(), DataType::kInt32);
  if (hvd::rank() == 0)
    std::printf(
        "[ info ] %d ranks, bytes written by all ranks per all-reduce of %lld elements: float32 "
        "%.0f -> %.0f "
        "(%.3f), float64 %.0f -> %.0f (%.3f), int32 %.0f -> %.0f (%.3f) with %s\n",
        size, static_cast<long long>(n), f32_none, f32, f32 / f32_none, f64_none, f64,
        f64 / f64_none, i32_none, i32, i32 / i32_none, GetParam().c_str());
  // Any all-reduce algorithm moves at least 2 (p-1)/p of the buffer per rank (a ring moves exactly
  // that; Open MPI's choice for 3 ranks moves more).
  EXPECT_GE(f32_none, 2.0 * (size - 1) * n * 4 * 0.99);
  // The compressed path moves exactly 2 (p-1)/p of the 16-bit buffer per rank, plus headers:
  // half of the least an uncompressed all-reduce of float32 can move, a quarter for float64.
  EXPECT_NEAR(f32, 2.0 * (size - 1) * n * 2, 0.02 * (size - 1) * n * 2);
  EXPECT_NEAR(f64, f32, 0.01 * f32);
  EXPECT_LE(f32 / f32_none, 0.51);
  EXPECT_LE(f64 / f64_none, 0.26);
  EXPECT_NEAR(i32 / i32_none, 1.0, 0.05);  // integers are not compressed
}

INSTANTIATE_TEST_SUITE_P(Wire, Compression,
                         testing::Values(std::string("fp16"), std::string("bf16")),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(CompressionConfig, BadValueFailsInitNamingTheVariable) {
  {
    Watchdog w("hvd::shutdown()", 60);
    hvd::shutdown();
  }
  setenv("HVD_COMPRESSION", "fp8", 1);
  try {
    hvd::init();
    ADD_FAILURE() << "init() accepted HVD_COMPRESSION=fp8";
  } catch (const hvd::Error& e) {
    EXPECT_TRUE(contains_ci(e.what(), "HVD_COMPRESSION")) << e.what();
    EXPECT_TRUE(contains_ci(e.what(), "bf16")) << e.what();
  }
  reinit("none");
}

}  // namespace
}  // namespace hvdtest
