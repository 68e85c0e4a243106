#pragma once

// Helpers for the multi-rank collective tests (tests/collectives, tests/runtime, tests/errors).
// Public API only.
//
// - Buffer: an owning buffer of any hvd dtype, read and written element-wise as double. The tests
//   store only values that are exact in every dtype (small integers, halves), so the reference
//   arithmetic is plain double and fp16/bf16 are encoded here independently of common/dtype_math.
// - Every rank must take the same path through every collective, or the others hang. So failures
//   around collectives are EXPECT-style (never ASSERT), exceptions from enqueue/wait are caught and
//   recorded, and a Watchdog ends the process (and with it mpirun) with a message naming the step
//   when a collective does not complete in time, instead of letting ctest's timeout hit silently.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace hvdtest {

using hvd::DataType;
using hvd::ReduceOp;

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> v = {
      DataType::kUInt8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
      DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  return v;
}

inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> v = {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin,
                                          ReduceOp::kMax, ReduceOp::kProduct};
  return v;
}

// The element counts every collective is run with.
constexpr int64_t kBig = 1000003;
inline const std::vector<int64_t>& all_sizes() {
  static const std::vector<int64_t> v = {0, 1, 7, kBig};
  return v;
}

inline bool is_signed(DataType t) { return t != DataType::kUInt8; }
inline bool is_16bit_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// The test oracle's own dtype sizes and names, written out on purpose instead of taken from the
// library's table (common/dtype.h) or hvd::dtype_size/dtype_name: an error in that table must make
// these tests fail, not agree with it.
inline std::size_t elem_size(DataType t) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 1;
}

inline const char* type_str(DataType t) {
  switch (t) {
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "?";
}

inline const char* op_str(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

// fp16 / bf16 codecs for values that are exactly representable (an independent reference).
inline double half_bits_to_double(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::nan("") : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

inline uint16_t double_to_half_bits_exact(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | 0x7c00;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int biased = e - 1 + 15;
  if (biased >= 1) {
    const double mant = (std::ldexp(a, -(e - 1)) - 1.0) * 1024.0;
    return static_cast<uint16_t>(sign | (biased << 10) | static_cast<int>(mant));
  }
  return static_cast<uint16_t>(sign | static_cast<int>(std::ldexp(a, 24)));
}

inline double bf16_bits_to_double(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t double_to_bf16_bits_exact(double v) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16);
}

// Rank r's element i for `op`: small integers whose reduction over up to 4 ranks (and then x3 for
// the scaled cases) is exact in every dtype, fp16/bf16 and int8 included.
inline double reduce_contrib(ReduceOp op, DataType t, int r, int n, int64_t i) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<double>(i % 5 + r);  // sum <= 22
    case ReduceOp::kAverage:
      // Symmetric around 3 + i%5, so the sum is n * (3 + i%5) and the average exact.
      return static_cast<double>(3 + i % 5 + 2 * r - (n - 1));
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((i * 7 + r * 3) % 11 - (is_signed(t) ? 5 : 0));
    case ReduceOp::kProduct: {
      double v = static_cast<double>(1 + (i + r) % 2);  // |product| <= 16
      if (is_signed(t) && (i + 2 * r) % 3 == 0) v = -v;
      return v;
    }
  }
  return 0;
}

// postscale * op over ranks of (prescale * contrib); kAverage divides by the rank count.
inline double reduce_expected(ReduceOp op, DataType t, int n, int64_t i, double prescale,
                              double postscale) {
  double acc = prescale * reduce_contrib(op, t, 0, n, i);
  for (int r = 1; r < n; ++r) {
    const double v = prescale * reduce_contrib(op, t, r, n, i);
    switch (op) {
      case ReduceOp::kAverage:
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc /= n;
  return acc * postscale;
}

// An owning buffer of `n` elements of `dtype`, with a shape (default 1-D).
class Buffer {
 public:
  Buffer() = default;
  Buffer(DataType t, int64_t n) : Buffer(t, std::vector<int64_t>{n}) {}
  Buffer(DataType t, std::vector<int64_t> shape) : t_(t), shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    n_ = n;
    // One spare byte so that data() is never null, even for zero elements.
    bytes_.assign(static_cast<std::size_t>(n) * elem_size(t) + 8, 0);
  }

  DataType dtype() const { return t_; }
  int64_t size() const { return n_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  hvd::TensorRef ref() { return hvd::TensorRef(data(), t_, shape_); }

  double get(int64_t i) const { return read(t_, bytes_.data(), i); }
  void set(int64_t i, double v) { write(t_, bytes_.data(), i, v); }
  void fill(const std::function<double(int64_t)>& f) {
    for (int64_t i = 0; i < n_; ++i) set(i, f(i));
  }

  static double read(DataType t, const void* base, int64_t i) {
    const unsigned char* p = static_cast<const unsigned char*>(base) + i * elem_size(t);
    switch (t) {
      case DataType::kUInt8:
        return *p;
      case DataType::kInt8:
        return static_cast<int8_t>(*p);
      case DataType::kInt32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kInt64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        return static_cast<double>(v);
      }
      case DataType::kFloat32: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kFloat64: {
        double v;
        std::memcpy(&v, p, 8);
        return v;
      }
      case DataType::kFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return half_bits_to_double(v);
      }
      case DataType::kBFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return bf16_bits_to_double(v);
      }
    }
    return 0;
  }

  static void write(DataType t, void* base, int64_t i, double v) {
    unsigned char* p = static_cast<unsigned char*>(base) + i * elem_size(t);
    switch (t) {
      case DataType::kUInt8:
        *p = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8: {
        int8_t x = static_cast<int8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      case DataType::kInt32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kInt64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::kFloat32: {
        float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kFloat16: {
        uint16_t x = double_to_half_bits_exact(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t x = double_to_bf16_bits_exact(v);
        std::memcpy(p, &x, 2);
        break;
      }
    }
  }

 private:
  DataType t_ = DataType::kFloat32;
  std::vector<int64_t> shape_;
  int64_t n_ = 0;
  std::vector<unsigned char> bytes_;
};

// Compares n elements of `dtype` at `data` with expect(i). Reports the first few wrong elements
// and the count, prefixed with `what` and the rank. Returns the number of wrong elements.
inline int64_t check_values(DataType t, const void* data, int64_t n,
                            const std::function<double(int64_t)>& expect, const std::string& what,
                            double tol = 0.0) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double got = Buffer::read(t, data, i);
    const double want = expect(i);
    const bool ok =
        tol == 0.0 ? got == want : std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
    if (!ok) {
      if (wrong < 3) {
        ADD_FAILURE() << what << " (" << type_str(t) << ", rank " << hvd::rank() << "): element "
                      << i << " is " << got << ", expected " << want;
      }
      ++wrong;
    }
  }
  if (wrong > 3) ADD_FAILURE() << what << ": " << wrong << " of " << n << " elements wrong";
  return wrong;
}

inline int64_t check_values(const Buffer& b, const std::function<double(int64_t)>& expect,
                            const std::string& what, double tol = 0.0) {
  return check_values(b.dtype(), b.data(), b.size(), expect, what, tol);
}

// Ends the process (and so the whole mpirun job) with a message if it is still alive after
// `seconds`: a collective that never completes is reported by name instead of hanging the suite.
class Watchdog {
 public:
  explicit Watchdog(std::string what, int seconds = 120) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr,
                     "[hvd test] HANG: '%s' did not complete within %d s; aborting the job\n",
                     what_.c_str(), seconds);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Runs an enqueue call; an exception becomes a test failure and an invalid handle, so that this
// rank goes on along the same path as the others.
inline hvd::Handle enqueue(const std::function<hvd::Handle()>& f, const std::string& what) {
  try {
    return f();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": enqueue threw on rank " << hvd::rank() << ": " << e.what();
    return hvd::Handle();
  }
}

// Waits for a handle that must succeed; returns false (after recording a failure) if it failed.
inline bool wait_ok(hvd::Handle& h, const std::string& what) {
  if (!h.valid()) return false;
  try {
    h.wait();
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wait() threw on rank " << hvd::rank() << ": " << e.what();
    return false;
  }
}

// Case-insensitive substring test for error messages.
inline bool contains_ci(const std::string& hay, const std::string& needle) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  return lower(hay).find(lower(needle)) != std::string::npos;
}

// A test fixture that initialises hvd (idempotent) in every test.
// For tests whose operations must still be in flight a moment after they were submitted (a name
// submitted twice): the runtime negotiates 50 us after the last submission (HVD_FUSION_WINDOW) and
// can finish an operation on one rank before the next line runs. While one of these exists, hvd
// runs restarted with 1 s of quiet (at most one 1 s cycle) before it negotiates; the destructor
// restarts it with the defaults. Collective (every rank creates one).
class SlowNegotiation {
 public:
  SlowNegotiation() { restart("1000000", "1000", "0"); }
  ~SlowNegotiation() { restart(nullptr, nullptr, nullptr); }

 private:
  // single_rank_inline "0": a job of one rank negotiates too (otherwise its operations run at
  // submission and a name is never in flight, runtime/runtime.cc).
  static void restart(const char* window_us, const char* cycle_ms, const char* single_rank_inline) {
    Watchdog w("hvd restart", 60);
    hvd::shutdown();
    set_or_unset("HVD_FUSION_WINDOW", window_us);
    set_or_unset("HVD_CYCLE_TIME", cycle_ms);
    set_or_unset("HVD_SINGLE_RANK_INLINE", single_rank_inline);
    hvd::init();
  }
  static void set_or_unset(const char* name, const char* value) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
};

class HvdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Watchdog w("hvd::init()", 60);
    hvd::init();
    rank_ = hvd::rank();
    size_ = hvd::size();
  }
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hvdtest
