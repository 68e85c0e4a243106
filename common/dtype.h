#pragma once

// The one table of hvd's element types (hvd::DataType): per dtype its size, its name in messages
// ("float32"), its safetensors code ("F32") and the C++ type that stores one element. Everything
// in the library that needs one of these reads it from here: hvd::dtype_size and hvd::dtype_name
// (common/tensor.cc), the element-wise math (common/dtype_math.cc) and the checkpoint format
// (training/safetensors.cc). Adding a dtype: a row here, an enumerator in include/hvd/tensor.h
// (same place; a static_assert below checks the order), then the switch statements the compiler
// flags (-Wswitch) in the math, MPI and NCCL code.
//
// Thread safety: constant data and pure functions.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "hvd/tensor.h"

// X(enumerator, storage type, bytes, name, safetensors code), in the order of hvd::DataType.
// 16-bit floats are stored as uint16_t (their bits).
#define HVD_DTYPES(X)                           \
  X(kUInt8, uint8_t, 1, "uint8", "U8")          \
  X(kInt8, int8_t, 1, "int8", "I8")             \
  X(kInt32, int32_t, 4, "int32", "I32")         \
  X(kInt64, int64_t, 8, "int64", "I64")         \
  X(kFloat16, uint16_t, 2, "float16", "F16")    \
  X(kBFloat16, uint16_t, 2, "bfloat16", "BF16") \
  X(kFloat32, float, 4, "float32", "F32")       \
  X(kFloat64, double, 8, "float64", "F64")

namespace hvd::dtypes {

struct Info {
  DataType dtype;
  std::size_t size;         // bytes per element
  const char* name;         // hvd's name: "float32"
  const char* safetensors;  // the safetensors dtype code: "F32"
};

#define HVD_DTYPE_ROW(e, type, bytes, name, code) Info{DataType::e, bytes, name, code},
inline constexpr Info kTable[] = {HVD_DTYPES(HVD_DTYPE_ROW)};
#undef HVD_DTYPE_ROW
inline constexpr std::size_t kCount = std::size(kTable);

// The rows are indexed by the enumerator's value, and each row's size is its storage type's.
constexpr bool table_is_consistent() {
  for (std::size_t i = 0; i < kCount; ++i)
    if (static_cast<std::size_t>(kTable[i].dtype) != i) return false;
#define HVD_DTYPE_SIZE_OK(e, type, bytes, name, code) \
  if (sizeof(type) != bytes) return false;
  HVD_DTYPES(HVD_DTYPE_SIZE_OK)
#undef HVD_DTYPE_SIZE_OK
  return true;
}
static_assert(table_is_consistent(), "HVD_DTYPES must list hvd::DataType in enumerator order");
static_assert(static_cast<std::size_t>(DataType::kFloat64) + 1 == kCount,
              "HVD_DTYPES must have one row per hvd::DataType enumerator");

// The row of dtype, or nullptr for a value outside the enumeration.
constexpr const Info* find(DataType dtype) {
  const auto i = static_cast<std::size_t>(dtype);
  return i < kCount ? &kTable[i] : nullptr;
}

[[noreturn]] void throw_unknown(DataType dtype);
// Bytes per element. Throws hvd::InvalidArgumentError("unknown DataType N") for a value outside
// the enumeration. Inline: the data plane asks it per batch (scripts/trace-path).
inline std::size_t size(DataType dtype) {
  if (const Info* info = find(dtype)) return info->size;
  throw_unknown(dtype);
}
// hvd's name ("float32"); "unknown" for a value outside the enumeration.
const char* name(DataType dtype);
// The dtype of a safetensors code ("F32"), exactly as spelled; std::nullopt for any other name
// (safetensors' BOOL, U16, F8_E4M3... included).
std::optional<DataType> from_safetensors(std::string_view code);

}  // namespace hvd::dtypes
