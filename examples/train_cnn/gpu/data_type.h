#pragma once

// The storage type of the GPU model's activations, compute weights and gradients, per
// model::Precision (--precision): fp32 stores float; bf16 and fp16 store 16-bit values and compute
// in float (mixed precision on tensor cores, Micikevicius et al. 2018).
//
// What each library is told, and why those combinations are valid:
//   cuDNN tensors and filters  CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16 or CUDNN_DATA_HALF
//   cuDNN convolution compute  CUDNN_DATA_FLOAT in every case: with 16-bit x, w, y this is the
//                              legacy API's PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG (16-bit
//                              storage, float accumulation), the configurations tensor cores run;
//                              TRUE_HALF_CONFIG (half compute) is never used
//   cuDNN alpha / beta         float (cuDNN's scaling factors are float for FLOAT, HALF and
//                              BFLOAT16 data; double only for DOUBLE)
//   cuBLAS GemmEx A, B, C      CUDA_R_16BF or CUDA_R_16F, compute CUBLAS_COMPUTE_32F, so alpha and
//                              beta are float as well
// Thread safety: pure functions.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>

#include "gpu/kernels.h"
#include "model/precision.h"

namespace train_cnn::gpu {

// Bytes of one stored value: 4 for fp32, 2 for bf16 and fp16.
inline size_t value_bytes(model::Precision p) { return p == model::Precision::kFp32 ? 4 : 2; }

inline cudnnDataType_t cudnn_data_type(model::Precision p) {
  switch (p) {
    case model::Precision::kBf16:
      return CUDNN_DATA_BFLOAT16;
    case model::Precision::kFp16:
      return CUDNN_DATA_HALF;
    case model::Precision::kFp32:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

inline cudaDataType_t cuda_data_type(model::Precision p) {
  switch (p) {
    case model::Precision::kBf16:
      return CUDA_R_16BF;
    case model::Precision::kFp16:
      return CUDA_R_16F;
    case model::Precision::kFp32:
      break;
  }
  return CUDA_R_32F;
}

// The cast kernels' format of a 16-bit precision (kFp32 has none: callers check reduced first).
inline HalfFormat half_format(model::Precision p) {
  return p == model::Precision::kBf16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
}

// Address of element i of a device array of p's storage type.
inline void* element(void* base, int64_t i, model::Precision p) {
  return static_cast<unsigned char*>(base) + static_cast<size_t>(i) * value_bytes(p);
}

}  // namespace train_cnn::gpu
