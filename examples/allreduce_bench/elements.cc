// Element values and checks of allreduce_bench. The half and bfloat16 conversions repeat those of
// hvd's common/dtype_math.cc on purpose: the bench uses the public API only, and checks hvd's
// results against an independent implementation.
#include "elements.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace allreduce_bench {
namespace {

using hvd::DataType;
using hvd::ReduceOp;

uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

float float_of(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

template <class T>
T at(const void* data, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void put(void* data, int64_t i, T v) {
  std::memcpy(static_cast<char*>(data) + i * sizeof(T), &v, sizeof(T));
}

bool is_floating(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

double avg_tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 1e-5;
    case DataType::kFloat64:
      return 1e-12;
    case DataType::kFloat16:
      return 2e-3;
    case DataType::kBFloat16:
      return 1.6e-2;
    default:
      return 0;
  }
}

template <class T>
void divide_typed(void* data, int64_t count, int n) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
}

template <float (*Dec)(uint16_t), uint16_t (*Enc)(float)>
void divide_16(void* data, int64_t count, int n) {
  uint16_t* p = static_cast<uint16_t*>(data);
  const float fn = static_cast<float>(n);
  for (int64_t i = 0; i < count; ++i) p[i] = Enc(Dec(p[i]) / fn);
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -v : v;
  }
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  return float_of(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t float_to_half(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to Inf
  if (a < 0x38800000u) {                       // below 2^-14: subnormal half
    // a * 2^24 is exact; nearbyint rounds to nearest even in the default rounding mode.
    return sign | static_cast<uint16_t>(std::nearbyint(float_of(a) * 16777216.0f));
  }
  uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffff) >> 13));
  const uint32_t rest = a & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carries into the exponent correctly
  return sign | static_cast<uint16_t>(h);
}

float bfloat16_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bfloat16(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

double load(DataType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DataType::kUInt8:
      return at<uint8_t>(data, i);
    case DataType::kInt8:
      return at<int8_t>(data, i);
    case DataType::kInt32:
      return at<int32_t>(data, i);
    case DataType::kInt64:
      return static_cast<double>(at<int64_t>(data, i));
    case DataType::kFloat16:
      return half_to_float(at<uint16_t>(data, i));
    case DataType::kBFloat16:
      return bfloat16_to_float(at<uint16_t>(data, i));
    case DataType::kFloat32:
      return at<float>(data, i);
    case DataType::kFloat64:
      return at<double>(data, i);
  }
  return 0;
}

void store(DataType dtype, void* data, int64_t i, double v) {
  switch (dtype) {
    case DataType::kUInt8:
      put(data, i, static_cast<uint8_t>(v));
      break;
    case DataType::kInt8:
      put(data, i, static_cast<int8_t>(v));
      break;
    case DataType::kInt32:
      put(data, i, static_cast<int32_t>(v));
      break;
    case DataType::kInt64:
      put(data, i, static_cast<int64_t>(v));
      break;
    case DataType::kFloat16:
      put(data, i, float_to_half(static_cast<float>(v)));
      break;
    case DataType::kBFloat16:
      put(data, i, float_to_bfloat16(static_cast<float>(v)));
      break;
    case DataType::kFloat32:
      put(data, i, static_cast<float>(v));
      break;
    case DataType::kFloat64:
      put(data, i, v);
      break;
  }
}

double input_value(ReduceOp op, DataType dtype, int rank, int nranks, int64_t j) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: {
      double v = static_cast<double>(j % 5 + 1);
      if (nranks >= 2) {
        if (rank == j % nranks) v += 1;
        if (rank == (j + 1) % nranks) v -= 1;
      }
      return v;
    }
    case ReduceOp::kProduct:
      return (rank < 12 && (j + rank) % 2 == 0) ? 2.0 : 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax: {
      const double v = static_cast<double>((7 * j + 3 * static_cast<int64_t>(rank)) % 11);
      return dtype == DataType::kUInt8 ? v : v - 5;
    }
  }
  return 0;
}

double expected_value(ReduceOp op, DataType dtype, int nranks, int64_t j) {
  double acc = input_value(op, dtype, 0, nranks, j);
  for (int r = 1; r < nranks; ++r) {
    const double v = input_value(op, dtype, r, nranks, j);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  return op == ReduceOp::kAverage ? acc / nranks : acc;
}

void fill_input(ReduceOp op, DataType dtype, int rank, int nranks, int64_t first, void* data,
                int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    store(dtype, data, i, input_value(op, dtype, rank, nranks, first + i));
}

int64_t count_wrong(ReduceOp op, DataType dtype, int nranks, int64_t first, const void* data,
                    int64_t count) {
  const double tol = (op == ReduceOp::kAverage && is_floating(dtype)) ? avg_tolerance(dtype) : 0;
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double got = load(dtype, data, i);
    const double want = expected_value(op, dtype, nranks, first + i);
    if (std::isnan(got) || std::abs(got - want) > tol * std::abs(want)) ++wrong;
  }
  return wrong;
}

void divide(DataType dtype, void* data, int64_t count, int n) {
  switch (dtype) {
    case DataType::kUInt8:
      divide_typed<uint8_t>(data, count, n);
      break;
    case DataType::kInt8:
      divide_typed<int8_t>(data, count, n);
      break;
    case DataType::kInt32:
      divide_typed<int32_t>(data, count, n);
      break;
    case DataType::kInt64:
      divide_typed<int64_t>(data, count, n);
      break;
    case DataType::kFloat16:
      divide_16<half_to_float, float_to_half>(data, count, n);
      break;
    case DataType::kBFloat16:
      divide_16<bfloat16_to_float, float_to_bfloat16>(data, count, n);
      break;
    case DataType::kFloat32:
      divide_typed<float>(data, count, n);
      break;
    case DataType::kFloat64:
      divide_typed<double>(data, count, n);
      break;
  }
}

}  // namespace allreduce_bench
