#pragma once

// Element-wise dtype math on a CUDA device, shared by the data path (ops/: the pre- and post-scale
// of collectives, the fp16 wire format) and the training layer (training/: gradient accumulation,
// the 16-bit gradient wire dtype, loss-scale unscaling). The device half of common/dtype_math.h,
// with its rounding:
//   fp16/bf16 computed in float and rounded to nearest even; float in float when the factor is
//   exact in float (in double otherwise); integers in double, truncated toward zero with
//   saturation.
// Built only with the GPU stack (HVD_HAVE_CUDA; target hvd_device_math). Every function queues its
// work on `stream` (null: the legacy default stream) of the current device and returns without
// waiting; a launch that fails throws hvd::Error naming the call (check_cuda), an execution error
// shows at the stream's next synchronisation. Pointers are device memory of the current device;
// n may be 0 (nothing is queued).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hvd/tensor.h"

namespace hvd::device_math {

// Throws hvd::Error "<call> failed: <CUDA's name and text for rc>" unless rc is cudaSuccess.
void check_cuda(cudaError_t rc, const char* call);

// dst[i] = src[i] * factor for every hvd dtype; src == dst allowed; factor 1 copies (or, in place,
// does nothing).
void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor,
           cudaStream_t stream);

// dst[i] = To(src[i] * factor) between float32 and a 16-bit float (float16 or bfloat16), either
// way; `from` == `to` is scale(). Any other pair throws hvd::InvalidArgumentError.
void cast(DataType from, DataType to, const void* src, void* dst, int64_t n, double factor,
          cudaStream_t stream);

// dst[i] += src[i] (gradient accumulation) for every hvd dtype: 16-bit floats in float, rounded
// back; integers wrap as on the CPU (common/dtype_math.h, reduce_buffers kSum).
void accumulate(DataType dtype, const void* src, void* dst, int64_t n, cudaStream_t stream);

// x[i] *= factor in place, and *flag = 1 when any result is Inf or NaN (flag is not cleared: zero
// it first). Float dtypes only (float16, bfloat16, float32, float64); others throw
// hvd::InvalidArgumentError.
void scale_and_check(DataType dtype, void* x, int64_t n, double factor, int32_t* flag,
                     cudaStream_t stream);

}  // namespace hvd::device_math
