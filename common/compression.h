#pragma once

// HVD_COMPRESSION: the wire format of all-reduced floating-point data. float32 and float64 tensors
// travel as fp16 or bf16 (ops/mpi/allreduce.cc says how); other dtypes never change. Used by the
// MPI all-reduce ops (flat, hierarchical, and the host-staged path of CUDA tensors) and parsed from
// the configuration; no MPI, no CUDA.

#include <string>

#include "hvd/tensor.h"

namespace hvd {

enum class Compression { kNone, kFp16, kBf16 };
// "none" | "fp16" | "bf16" (the config's spellings, case-insensitive); throws InvalidArgumentError.
Compression parse_compression(const std::string& value);
const char* compression_name(Compression c);
// The dtype a batch of `dtype` travels as: kFloat16/kBFloat16 for float32/float64 under fp16/bf16,
// else `dtype` itself.
inline DataType wire_dtype(Compression c, DataType dtype) {
  if (c == Compression::kNone || (dtype != DataType::kFloat32 && dtype != DataType::kFloat64))
    return dtype;
  return c == Compression::kFp16 ? DataType::kFloat16 : DataType::kBFloat16;
}

}  // namespace hvd
