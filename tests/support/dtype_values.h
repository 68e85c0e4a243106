#pragma once

// Typed element access for the fused all-reduce tests (host:
// tests/collectives/test_fused_allreduce.cc; device: tests/gpu/test_fused_allreduce_device.cc, on
// host copies): every dtype read and written as double, and small values every dtype holds exactly.

#include <cstddef>
#include <cstdint>

#include "common/dtype_math.h"
#include "hvd/tensor.h"

namespace hvdtest {

using hvd::bfloat16_to_float;
using hvd::DataType;
using hvd::float_to_bfloat16;
using hvd::float_to_half;
using hvd::half_to_float;

inline constexpr DataType kAllDtypes[] = {
    DataType::kUInt8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};

inline double get(DataType t, const void* p, size_t i) {
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
      return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
  }
  return 0;
}

inline void put(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      return;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
      return;
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      return;
  }
}

// Small values every dtype holds exactly (uint8: non-negative).
inline double value(DataType t, size_t tensor, size_t i) {
  const double v = static_cast<double>((i * 7 + tensor * 3) % 11);
  return t == DataType::kUInt8 ? v : v - 5;
}

}  // namespace hvdtest
