#pragma once

// Element-wise helpers shared by the CPU data path: IEEE fp16 and bfloat16 conversions with
// round-to-nearest-even (NaN stays NaN, overflow becomes Inf), reductions of two buffers, scaling,
// and the identity of each reduce op (what a joined rank contributes).
//
// Thread safety: pure functions.

#include <cstddef>
#include <cstdint>

#include "hvd/tensor.h"

namespace hvd::ops {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

// inout[i] = op(inout[i], in[i]) for n elements of dtype. kAverage reduces like kSum.
void reduce_buffers(DataType dtype, ReduceOp op, const void* in, void* inout, std::size_t n);

// data[i] *= factor for n elements (integers: rounded toward zero after multiplying in double;
// 16-bit floats: computed in float, rounded to nearest even). factor == 1 does nothing.
void scale_buffer(DataType dtype, void* data, std::size_t n, double factor);

// dst[i] = src[i] * factor (the copy and the scaling in one pass); src == dst allowed.
void scale_copy(DataType dtype, const void* src, void* dst, std::size_t n, double factor);

// Fills n elements with the identity of op: 0 for sum/average, 1 for product, the largest value
// for min (+Inf for floats), the lowest for max (-Inf for floats).
void fill_identity(DataType dtype, ReduceOp op, void* data, std::size_t n);

}  // namespace hvd::ops
