// Soak: mixed collectives for a set time, every result checked exactly, resident memory sampled.
//
//   mpirun -np 3 build/tests/soak/soak --seconds 600 [--seed 1] [--warmup-seconds 60]
//          [--sample-seconds 5] [--max-growth-mb 32] [--max-elements 65536]
//
// How it works. Step k of the run is a list of operations drawn from a generator seeded with
// (seed, k), so every rank derives the same list: allreduce (any reduce op, power-of-two pre- and
// postscale), grouped allreduce, allgather (first dimension differs per rank), broadcast (random
// root), alltoall (random splits, zeros included) and reducescatter, over every dtype, with sizes
// from 0 to --max-elements (log-uniform) and names that are either fresh (a new name every step,
// which churns the response cache) or drawn from a fixed pool (same name, same shape: the cache's
// fast path). Each rank then shuffles its own submission order (seeded with its rank), submits
// everything asynchronously, waits in another order and checks every element of every result.
// A last allreduce per step ("soak.stop") lets rank 0's clock end the run on every rank at once.
//
// Exact checks. Copy-only collectives (allgather, broadcast, alltoall) move random bytes and are
// compared bytewise. Reductions use small integers (times 1/4, 1/2, 1 or 2 for floating types)
// chosen so that every partial sum, product, minimum or maximum is exactly representable in every
// dtype, fp16 and bf16 included; for kAverage the last rank's value balances the others so that
// the sum is divisible by the number of ranks. The expected value is computed independently, in
// double, and compared with ==.
//
// Memory. Every --sample-seconds each rank reads VmRSS from /proc/self/status. The run fails when
// any rank's last sample exceeds its first sample after the warm-up by more than --max-growth-mb.
//
// Output (rank 0): steps, operations per kind, bytes submitted, wrong values, and per rank the
// resident memory at start, after warm-up, at the end and at peak, with the slope after warm-up.
// Exit status: 0 clean; 1 a wrong value, a failed operation, or memory growth beyond the bound.
// Label bench (not part of the default test run): see docs/reliability.md.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace {

using hvd::DataType;
using hvd::ReduceOp;
using Clock = std::chrono::steady_clock;

// ---- options ------------------------------------------------------------------------------------

struct Options {
  double seconds = 600;
  uint64_t seed = 1;
  double warmup_seconds = -1;  // default: min(60, seconds / 5)
  double sample_seconds = 5;
  double max_growth_mb = 32;
  int64_t max_elements = 65536;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "soak: %s\nusage: soak [--seconds S] [--seed N] [--warmup-seconds S] [--sample-seconds S]"
      " [--max-growth-mb M] [--max-elements N]\n",
      why);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    char* end = nullptr;
    const char* v = argv[++i];
    double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x >= 0))
      usage(("bad value '" + std::string(v) + "' for " + a).c_str());
    if (a == "--seconds")
      o.seconds = x;
    else if (a == "--seed")
      o.seed = static_cast<uint64_t>(x);
    else if (a == "--warmup-seconds")
      o.warmup_seconds = x;
    else if (a == "--sample-seconds")
      o.sample_seconds = std::max(0.1, x);
    else if (a == "--max-growth-mb")
      o.max_growth_mb = x;
    else if (a == "--max-elements")
      o.max_elements = std::max<int64_t>(1, static_cast<int64_t>(x));
    else
      usage(("unknown option " + a).c_str());
  }
  if (o.warmup_seconds < 0) o.warmup_seconds = std::min(60.0, o.seconds / 5);
  return o;
}

// ---- deterministic randomness -------------------------------------------------------------------

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t mix(uint64_t a, uint64_t b) { return mix(a ^ mix(b)); }
uint64_t mix(uint64_t a, uint64_t b, uint64_t c) { return mix(mix(a, b), c); }
uint64_t mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d) { return mix(mix(a, b, c), d); }

// ---- dtypes: exact encodings of small values ----------------------------------------------------

constexpr std::array<DataType, 8> kDtypes = {
    DataType::kUInt8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};

bool is_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

uint16_t to_half(double x) {  // x is exactly representable by construction
  if (x == 0) return std::signbit(x) ? 0x8000 : 0;
  uint16_t sign = x < 0 ? 0x8000 : 0;
  int e = 0;
  double m = std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  double frac = (m * 2 - 1) * 1024;
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | static_cast<uint16_t>(frac));
}

double from_half(uint16_t h) {
  int exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v = exp == 0    ? std::ldexp(frac, -24)
             : exp == 31 ? (frac ? NAN : INFINITY)
                         : std::ldexp(1024 + frac, exp - 25);
  return (h & 0x8000) ? -v : v;
}

uint16_t to_bf16(double x) {
  float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

double from_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void store(DataType t, void* p, int64_t i, double x) {
  switch (t) {
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(x);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(x);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(x);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(x);
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = to_half(x);
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = to_bf16(x);
      break;
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(x);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = x;
      break;
  }
}

double load(DataType t, const void* p, int64_t i) {
  switch (t) {
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kFloat16:
      return from_half(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return from_bf16(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
  }
  return NAN;
}

// Bytes that depend only on (seed, a, b, index): what a copy-only collective must deliver intact.
void fill_pattern(std::vector<std::byte>& buf, uint64_t seed, uint64_t a, uint64_t b) {
  for (size_t i = 0; i < buf.size(); i += 8) {
    uint64_t w = mix(seed, a, b, i);
    std::memcpy(buf.data() + i, &w, std::min<size_t>(8, buf.size() - i));
  }
}

// ---- the schedule -------------------------------------------------------------------------------

enum class Kind { kAllreduce, kGrouped, kAllgather, kBroadcast, kAlltoall, kReducescatter };
constexpr int kKinds = 6;
const char* kind_name(Kind k) {
  static const char* names[] = {"allreduce", "grouped_allreduce", "allgather",
                                "broadcast", "alltoall",          "reducescatter"};
  return names[static_cast<int>(k)];
}

struct OpSpec {
  Kind kind = Kind::kAllreduce;
  std::string name;
  uint64_t value_seed = 0;  // changes every step, even for a pool name
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1, postscale = 1;
  bool in_place = true;
  std::vector<int64_t> counts;               // allreduce: {n}; grouped: per member; broadcast: {n}
  std::vector<DataType> member_dtypes;       // grouped
  int root = 0;                              // broadcast
  int64_t cols = 1;                          // allgather, alltoall, reducescatter: row width
  std::vector<int64_t> rows;                 // allgather: per rank; reducescatter: {R}
  std::vector<std::vector<int64_t>> splits;  // alltoall: [source][destination] rows
};

struct Generator {
  std::mt19937_64 rng;
  explicit Generator(uint64_t s) : rng(s) {}
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  // 0 now and then, otherwise log-uniform in [1, max].
  int64_t size(int64_t max) {
    if (chance(0.05)) return 0;
    double l = std::uniform_real_distribution<double>(0, std::log(static_cast<double>(max)))(rng);
    return std::clamp<int64_t>(static_cast<int64_t>(std::exp(l)), 1, max);
  }
};

ReduceOp pick_op(Generator& g) {
  static const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                 ReduceOp::kProduct};
  return ops[g.uniform(0, 4)];
}

// The shape and kind of an operation (everything but its name and values).
OpSpec draw_op(Generator& g, int size, int64_t max_elements) {
  OpSpec s;
  s.kind = static_cast<Kind>(g.uniform(0, kKinds - 1));
  s.dtype = kDtypes[g.uniform(0, 7)];
  s.op = pick_op(g);
  s.in_place = g.chance(0.5);
  const int64_t max_rows = std::max<int64_t>(1, max_elements / 64);
  switch (s.kind) {
    case Kind::kAllreduce:
      s.counts = {g.size(max_elements)};
      if (s.op != ReduceOp::kProduct) {
        // Powers of two keep every value exact; integers are scaled by 1 or 2 only (they truncate).
        static const double float_scales[] = {0.25, 0.5, 1, 1, 2};
        static const double int_scales[] = {1, 1, 2};
        // Beyond 4 ranks, integer sums of 8-bit types would overflow with a scale of 2: 1 only.
        const double int_limit = size > 4 ? 1 : 2;
        s.prescale = is_float(s.dtype) ? float_scales[g.uniform(0, 4)]
                                       : std::min(int_limit, int_scales[g.uniform(0, 2)]);
        s.postscale = is_float(s.dtype) ? float_scales[g.uniform(0, 4)]
                                        : std::min(int_limit, int_scales[g.uniform(0, 2)]);
      }
      break;
    case Kind::kGrouped:
      for (int64_t m = g.uniform(1, 4); m > 0; --m) {
        s.counts.push_back(g.size(max_elements / 4 + 1));
        s.member_dtypes.push_back(g.chance(0.7) ? s.dtype : kDtypes[g.uniform(0, 7)]);
      }
      break;
    case Kind::kAllgather:
      s.cols = g.uniform(1, 64);
      for (int r = 0; r < size; ++r) s.rows.push_back(g.chance(0.1) ? 0 : g.uniform(1, max_rows));
      break;
    case Kind::kBroadcast:
      s.counts = {g.size(max_elements)};
      s.root = static_cast<int>(g.uniform(0, size - 1));
      break;
    case Kind::kAlltoall:
      s.cols = g.uniform(1, 64);
      s.splits.assign(size, std::vector<int64_t>(size));
      for (auto& row : s.splits)
        for (auto& x : row)
          x = g.chance(0.15) ? 0 : g.uniform(1, std::max<int64_t>(1, max_rows / size));
      break;
    case Kind::kReducescatter:
      s.cols = g.uniform(1, 64);
      s.rows = {g.chance(0.05) ? g.uniform(0, size) : g.uniform(0, max_rows)};
      break;
  }
  return s;
}

constexpr int kPoolSize = 48;

std::vector<OpSpec> plan_step(uint64_t seed, uint64_t step, int size, int64_t max_elements) {
  Generator g(mix(seed, step));
  std::vector<OpSpec> ops;
  std::vector<bool> pool_used(kPoolSize, false);
  const int n = static_cast<int>(g.uniform(1, 10));
  for (int i = 0; i < n; ++i) {
    int pool = static_cast<int>(g.uniform(0, kPoolSize - 1));
    OpSpec s;
    if (g.chance(0.5) && !pool_used[pool]) {
      pool_used[pool] = true;
      Generator pg(mix(seed, 0xb001, pool));  // same shape every step
      s = draw_op(pg, size, max_elements);
      s.name = "pool." + std::to_string(pool);
    } else {
      s = draw_op(g, size, max_elements);
      s.name = "s" + std::to_string(step) + "." + std::to_string(i) + "." + kind_name(s.kind);
      if (g.chance(0.05)) s.name += "/" + std::string(static_cast<size_t>(g.uniform(1, 200)), 'x');
    }
    s.value_seed = mix(seed, step, i, 0x7a1);
    ops.push_back(std::move(s));
  }
  return ops;
}

// ---- values for reductions ----------------------------------------------------------------------

// The value rank r contributes at element i (before the prescale). Small integers, chosen per op so
// that every intermediate result is exact in every dtype (see the top of this file).
double reduce_value(uint64_t seed, ReduceOp op, DataType t, int size, int r, int64_t i) {
  const bool is_unsigned = t == DataType::kUInt8;
  auto draw = [&](int rank, int64_t lo, int64_t hi) {
    return static_cast<double>(
        lo + static_cast<int64_t>(mix(seed, rank, i) % static_cast<uint64_t>(hi - lo + 1)));
  };
  switch (op) {
    case ReduceOp::kSum:
      return is_unsigned ? draw(r, 0, 15) : draw(r, -7, 7);
    case ReduceOp::kProduct: {
      // At most 6 ranks contribute factors of 2 (2^7 overflows int8, 2^8 uint8); the rest +-1.
      if (r >= 6) return is_unsigned ? 1.0 : (mix(seed, r, i) % 2 ? -1.0 : 1.0);
      static const double s[] = {-2, -1, 1, 2}, u[] = {1, 2};
      return is_unsigned ? u[mix(seed, r, i) % 2] : s[mix(seed, r, i) % 4];
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return is_unsigned ? draw(r, 0, 60) : draw(r, -30, 30);  // x4 fits int8
    case ReduceOp::kAverage: {
      // Ranks 0..size-2 draw freely; the last makes the sum size * target.
      auto own = [&](int rank) { return is_unsigned ? draw(rank, 0, 5) : draw(rank, -5, 5); };
      if (r < size - 1) return own(r);
      double target = is_unsigned ? draw(-1, 5, 8) : draw(-1, -3, 3);
      double others = 0;
      for (int q = 0; q < size - 1; ++q) others += own(q);
      return size * target - others;
    }
  }
  return 0;
}

double expected_reduce(uint64_t seed, ReduceOp op, DataType t, int size, int64_t i, double pre,
                       double post) {
  double acc = 0;
  for (int r = 0; r < size; ++r) {
    double x = pre * reduce_value(seed, op, t, size, r, i);
    if (r == 0)
      acc = x;
    else if (op == ReduceOp::kMin)
      acc = std::min(acc, x);
    else if (op == ReduceOp::kMax)
      acc = std::max(acc, x);
    else if (op == ReduceOp::kProduct)
      acc *= x;
    else
      acc += x;
  }
  if (op == ReduceOp::kAverage) acc /= size;
  return acc * post;
}

// ---- one operation in flight --------------------------------------------------------------------

struct Live {
  OpSpec spec;
  std::vector<std::vector<std::byte>> in, out;  // per member (one member except grouped)
  hvd::Handle handle;
  int64_t bytes = 0;
};

struct Totals {
  int64_t steps = 0, ops[kKinds] = {}, bytes = 0, wrong = 0;
};

int g_rank = 0, g_size = 1;

void fill_reduce(std::vector<std::byte>& buf, const OpSpec& s, DataType t, uint64_t seed,
                 int64_t n) {
  buf.assign(static_cast<size_t>(n) * hvd::dtype_size(t), std::byte{0});
  for (int64_t i = 0; i < n; ++i)
    store(t, buf.data(), i, reduce_value(seed, s.op, t, g_size, g_rank, i));
}

void submit(Live& l) {
  const OpSpec& s = l.spec;
  const size_t es = hvd::dtype_size(s.dtype);
  switch (s.kind) {
    case Kind::kAllreduce: {
      l.in.resize(1);
      fill_reduce(l.in[0], s, s.dtype, s.value_seed, s.counts[0]);
      hvd::TensorRef in(l.in[0].data(), s.dtype, {s.counts[0]});
      hvd::TensorRef out = in;
      if (!s.in_place) {
        l.out.assign(1, std::vector<std::byte>(l.in[0].size(), std::byte{0x5a}));
        out = hvd::TensorRef(l.out[0].data(), s.dtype, {s.counts[0]});
      }
      l.bytes = static_cast<int64_t>(l.in[0].size());
      l.handle = hvd::allreduce_async(in, out, s.name, s.op, s.prescale, s.postscale);
      break;
    }
    case Kind::kGrouped: {
      std::vector<hvd::TensorRef> in, out;
      l.in.resize(s.counts.size());
      l.out.resize(s.counts.size());
      for (size_t m = 0; m < s.counts.size(); ++m) {
        DataType t = s.member_dtypes[m];
        fill_reduce(l.in[m], s, t, mix(s.value_seed, m), s.counts[m]);
        in.emplace_back(l.in[m].data(), t, std::vector<int64_t>{s.counts[m]});
        if (s.in_place) {
          out.push_back(in.back());
        } else {
          l.out[m].assign(l.in[m].size(), std::byte{0x5a});
          out.emplace_back(l.out[m].data(), t, std::vector<int64_t>{s.counts[m]});
        }
        l.bytes += static_cast<int64_t>(l.in[m].size());
      }
      l.handle = hvd::grouped_allreduce_async(in, out, s.name, s.op);
      break;
    }
    case Kind::kAllgather: {
      l.in.assign(1, std::vector<std::byte>(static_cast<size_t>(s.rows[g_rank] * s.cols) * es));
      fill_pattern(l.in[0], s.value_seed, g_rank, 0);
      l.bytes = static_cast<int64_t>(l.in[0].size());
      l.handle = hvd::allgather_async(
          hvd::TensorRef(l.in[0].data(), s.dtype, {s.rows[g_rank], s.cols}), s.name);
      break;
    }
    case Kind::kBroadcast: {
      l.in.assign(1, std::vector<std::byte>(static_cast<size_t>(s.counts[0]) * es));
      fill_pattern(l.in[0], s.value_seed, g_rank, 0);  // the root's bytes are the expected ones
      l.bytes = static_cast<int64_t>(l.in[0].size());
      l.handle = hvd::broadcast_async(hvd::TensorRef(l.in[0].data(), s.dtype, {s.counts[0]}),
                                      s.root, s.name);
      break;
    }
    case Kind::kAlltoall: {
      int64_t rows = 0;
      for (int d = 0; d < g_size; ++d) rows += s.splits[g_rank][d];
      l.in.assign(1, {});
      for (int d = 0; d < g_size; ++d) {
        std::vector<std::byte> part(static_cast<size_t>(s.splits[g_rank][d] * s.cols) * es);
        fill_pattern(part, s.value_seed, g_rank, d);
        l.in[0].insert(l.in[0].end(), part.begin(), part.end());
      }
      l.bytes = static_cast<int64_t>(l.in[0].size());
      l.handle = hvd::alltoall_async(hvd::TensorRef(l.in[0].data(), s.dtype, {rows, s.cols}),
                                     s.splits[g_rank], s.name);
      break;
    }
    case Kind::kReducescatter: {
      l.in.resize(1);
      fill_reduce(l.in[0], s, s.dtype, s.value_seed, s.rows[0] * s.cols);
      l.bytes = static_cast<int64_t>(l.in[0].size());
      l.handle = hvd::reducescatter_async(
          hvd::TensorRef(l.in[0].data(), s.dtype, {s.rows[0], s.cols}), s.name, s.op);
      break;
    }
  }
}

// Counts wrong elements (or bytes, for copies); prints the first few.
int64_t verify(Live& l, int64_t& printed) {
  const OpSpec& s = l.spec;
  const size_t es = hvd::dtype_size(s.dtype);
  int64_t wrong = 0;
  auto report = [&](const std::string& what) {
    ++wrong;
    if (printed++ < 10)
      std::fprintf(stderr, "soak: rank %d: %s '%s' (%s): %s\n", g_rank, kind_name(s.kind),
                   s.name.c_str(), hvd::dtype_name(s.dtype), what.c_str());
  };
  auto check_reduce = [&](const void* data, DataType t, uint64_t seed, int64_t first, int64_t n,
                          double pre, double post) {
    for (int64_t i = 0; i < n; ++i) {
      double want = expected_reduce(seed, s.op, t, g_size, first + i, pre, post);
      double got = load(t, data, i);
      if (!(got == want))
        report("element " + std::to_string(first + i) + " is " + std::to_string(got) +
               ", expected " + std::to_string(want) + " (" + hvd::reduce_op_name(s.op) + " of " +
               hvd::dtype_name(t) + ")");
    }
  };
  auto check_bytes = [&](const std::byte* got, const std::vector<std::byte>& want,
                         const std::string& where) {
    if (!want.empty() && std::memcmp(got, want.data(), want.size()) != 0)
      report("bytes differ " + where);
  };
  switch (s.kind) {
    case Kind::kAllreduce: {
      const auto& out = s.in_place ? l.in[0] : l.out[0];
      check_reduce(out.data(), s.dtype, s.value_seed, 0, s.counts[0], s.prescale, s.postscale);
      break;
    }
    case Kind::kGrouped:
      for (size_t m = 0; m < s.counts.size(); ++m)
        check_reduce((s.in_place ? l.in[m] : l.out[m]).data(), s.member_dtypes[m],
                     mix(s.value_seed, m), 0, s.counts[m], 1, 1);
      break;
    case Kind::kAllgather: {
      hvd::Tensor& out = l.handle.output();
      int64_t total = 0;
      for (int64_t r : s.rows) total += r;
      if (out.shape().empty() || out.shape()[0] != total || out.dtype() != s.dtype ||
          out.size_bytes() != static_cast<size_t>(total * s.cols) * es) {
        report("output shape " + hvd::shape_string(out.shape()) + ", expected first dimension " +
               std::to_string(total));
        break;
      }
      const std::byte* p = static_cast<const std::byte*>(out.data());
      for (int r = 0; r < g_size; ++r) {
        std::vector<std::byte> want(static_cast<size_t>(s.rows[r] * s.cols) * es);
        fill_pattern(want, s.value_seed, r, 0);
        check_bytes(p, want, "in the block of rank " + std::to_string(r));
        p += want.size();
      }
      break;
    }
    case Kind::kBroadcast: {
      std::vector<std::byte> want(l.in[0].size());
      fill_pattern(want, s.value_seed, s.root, 0);
      check_bytes(l.in[0].data(), want, "from root " + std::to_string(s.root));
      break;
    }
    case Kind::kAlltoall: {
      hvd::Tensor& out = l.handle.output();
      int64_t total = 0;
      for (int src = 0; src < g_size; ++src) total += s.splits[src][g_rank];
      if (out.size_bytes() != static_cast<size_t>(total * s.cols) * es) {
        report("received " + std::to_string(out.size_bytes()) + " bytes, expected " +
               std::to_string(total * s.cols * static_cast<int64_t>(es)));
        break;
      }
      const auto& got_splits = l.handle.received_splits();
      const std::byte* p = static_cast<const std::byte*>(out.data());
      for (int src = 0; src < g_size; ++src) {
        if (static_cast<int>(got_splits.size()) != g_size ||
            got_splits[src] != s.splits[src][g_rank])
          report("received_splits() is wrong for source " + std::to_string(src));
        std::vector<std::byte> want(static_cast<size_t>(s.splits[src][g_rank] * s.cols) * es);
        fill_pattern(want, s.value_seed, src, g_rank);
        check_bytes(p, want, "in the rows from rank " + std::to_string(src));
        p += want.size();
      }
      break;
    }
    case Kind::kReducescatter: {
      const int64_t rows = s.rows[0], base = rows / g_size, extra = rows % g_size;
      const int64_t mine = base + (g_rank < extra ? 1 : 0);
      const int64_t first = g_rank * base + std::min<int64_t>(g_rank, extra);
      hvd::Tensor& out = l.handle.output();
      if (out.size_bytes() != static_cast<size_t>(mine * s.cols) * es) {
        report("output " + hvd::shape_string(out.shape()) + ", expected " + std::to_string(mine) +
               " rows");
        break;
      }
      check_reduce(out.data(), s.dtype, s.value_seed, first * s.cols, mine * s.cols, 1, 1);
      break;
    }
  }
  return wrong;
}

// ---- memory -------------------------------------------------------------------------------------

double rss_mib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

struct Sample {
  double t, mib;
};

// Least-squares slope of the samples after the warm-up, in MiB per minute.
double slope_per_minute(const std::vector<Sample>& v, double warmup) {
  double n = 0, st = 0, sm = 0, stt = 0, stm = 0;
  for (const auto& s : v) {
    if (s.t < warmup) continue;
    n += 1, st += s.t, sm += s.mib, stt += s.t * s.t, stm += s.t * s.mib;
  }
  double den = n * stt - st * st;
  return n < 2 || den == 0 ? 0 : 60 * (n * stm - st * sm) / den;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  hvd::init();
  g_rank = hvd::rank();
  g_size = hvd::size();

  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<Sample> samples{{0, rss_mib()}};
  double next_sample = opt.sample_seconds;
  Totals tot;
  int64_t printed = 0;
  int32_t stop = 0;

  for (uint64_t step = 0; !stop; ++step) {
    std::vector<Live> live;
    for (auto& s : plan_step(opt.seed, step, g_size, opt.max_elements))
      live.push_back(Live{std::move(s), {}, {}, {}, 0});
    std::vector<size_t> order(live.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 own(mix(opt.seed, step, static_cast<uint64_t>(g_rank) + 1));
    std::shuffle(order.begin(), order.end(), own);
    try {
      for (size_t i : order) {
        submit(live[i]);
        if (own() % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(own() % 2000));
      }
      std::shuffle(order.begin(), order.end(), own);
      for (size_t i : order) {
        live[i].handle.wait();
        tot.wrong += verify(live[i], printed);
        tot.ops[static_cast<int>(live[i].spec.kind)] += 1;
        tot.bytes += live[i].bytes;
      }
      stop = elapsed() >= opt.seconds ? 1 : 0;
      std::vector<int32_t> flag{stop};
      hvd::allreduce(flag, "soak.stop", ReduceOp::kMax);
      stop = flag[0];
    } catch (const hvd::Error& e) {
      std::fprintf(stderr, "soak: rank %d: step %llu failed: %s\n", g_rank,
                   static_cast<unsigned long long>(step), e.what());
      std::fflush(stderr);
      std::_Exit(1);
    }
    tot.steps = static_cast<int64_t>(step) + 1;
    if (elapsed() >= next_sample) {
      samples.push_back({elapsed(), rss_mib()});
      next_sample += opt.sample_seconds;
    }
  }
  samples.push_back({elapsed(), rss_mib()});

  // Per rank: start, after warm-up, end, peak, slope. Gathered to every rank.
  double warm = samples.back().mib;
  for (const auto& s : samples)
    if (s.t >= opt.warmup_seconds) {
      warm = s.mib;
      break;
    }
  double peak = 0;
  for (const auto& s : samples) peak = std::max(peak, s.mib);
  std::vector<double> mine{samples.front().mib,
                           warm,
                           samples.back().mib,
                           peak,
                           slope_per_minute(samples, opt.warmup_seconds),
                           static_cast<double>(samples.size())};
  std::vector<double> all = hvd::allgather(mine, "soak.memory");
  std::vector<int64_t> sums{tot.wrong,  tot.bytes,  tot.ops[0], tot.ops[1],
                            tot.ops[2], tot.ops[3], tot.ops[4], tot.ops[5]};
  hvd::allreduce(sums, "soak.totals", ReduceOp::kSum);

  bool grew = false;
  for (int r = 0; r < g_size; ++r) grew |= all[r * 6 + 2] - all[r * 6 + 1] > opt.max_growth_mb;
  const int64_t ops = sums[2] + sums[3] + sums[4] + sums[5] + sums[6] + sums[7];
  if (g_rank == 0) {
    std::printf(
        "soak: %d ranks, %.0f s, seed %llu: %lld steps, %lld operations (ops counted on every "
        "rank)\n",
        g_size, elapsed(), static_cast<unsigned long long>(opt.seed),
        static_cast<long long>(tot.steps), static_cast<long long>(ops));
    std::printf(
        "soak:   allreduce %lld, grouped_allreduce %lld, allgather %lld, broadcast %lld, alltoall "
        "%lld, "
        "reducescatter %lld\n",
        static_cast<long long>(sums[2]), static_cast<long long>(sums[3]),
        static_cast<long long>(sums[4]), static_cast<long long>(sums[5]),
        static_cast<long long>(sums[6]), static_cast<long long>(sums[7]));
    std::printf("soak: bytes submitted %.3f GiB (all ranks), wrong values %lld\n",
                static_cast<double>(sums[1]) / (1 << 30), static_cast<long long>(sums[0]));
    for (int r = 0; r < g_size; ++r) {
      const double* m = &all[r * 6];
      std::printf(
          "soak: rank %d resident MiB: start %.1f, after %.0f s warm-up %.1f, end %.1f, peak %.1f; "
          "slope after warm-up %+.3f MiB/min over %.0f samples\n",
          r, m[0], opt.warmup_seconds, m[1], m[2], m[3], m[4], m[5]);
    }
    const bool ok = sums[0] == 0 && !grew;
    std::printf("soak: %s%s%s\n", ok ? "PASS" : "FAIL", sums[0] ? " (wrong values)" : "",
                grew ? " (resident memory grew beyond --max-growth-mb after the warm-up)" : "");
    std::fflush(stdout);
  }
  hvd::shutdown();
  return sums[0] == 0 && !grew ? 0 : 1;
}
