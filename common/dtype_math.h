#pragma once

// Element-wise helpers shared by the CPU data path: IEEE fp16 and bfloat16 conversions with
// round-to-nearest-even (NaN stays NaN, overflow becomes Inf), reductions of two buffers, scaling,
// the identity of each reduce op (what a joined rank contributes), and the casts and reduction of
// HVD_COMPRESSION (float32/float64 <-> fp16/bf16).
//
// Thread safety: pure functions.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hvd/tensor.h"

namespace hvd {

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

// --- HVD_COMPRESSION: float32/float64 data travelling as 16-bit floats -------------------------
// `wire` is DataType::kFloat16 or DataType::kBFloat16; `dtype` is kFloat32 or kFloat64 (anything
// else throws std::invalid_argument: the callers never compress other dtypes).

// The 16-bit value nearest to d, ties to even (NaN stays NaN, overflow becomes Inf). Rounded once:
// d goes to float with round-to-odd first, which is exact for a later rounding to at most 22 bits,
// so double -> fp16/bf16 never suffers the double rounding of a plain (float) cast.
uint16_t double_to_half(double d);
uint16_t double_to_bfloat16(double d);

// dst[i] = wire(src[i] * factor), rounded once to the 16-bit format. factor == 1: the plain cast;
// otherwise the product is formed in double (exact for a float32 element times a float factor)
// and then rounded once.
void compress_copy(DataType dtype, DataType wire, const void* src, uint16_t* dst, std::size_t n,
                   double factor);

// dst[i] = float(src[i]) * factor in `dtype`, with scale_copy's rounding (float32: in float when
// the factor is exact in float, else in double then rounded once; float64: in double).
void decompress_copy(DataType wire, DataType dtype, const uint16_t* src, void* dst, std::size_t n,
                     double factor);

// The reduction step of the compressed all-reduce: for i < n,
//   out[i] = wire(factor * op(blocks[0*stride + i], ..., blocks[(k-1)*stride + i]))
// with the operands widened to double and combined in the order 0, 1, ..., k-1 and the result
// rounded once to the 16-bit format (sums of up to 2^13 fp16 values are exact in double, so for
// fp16 the only roundings are this one and the inputs' cast). kAverage reduces like kSum (the
// caller passes 1/contributors in `factor`). `out` may be one of the blocks (element i of out is
// written after element i of every block has been read).
void reduce_blocks_16(DataType wire, ReduceOp op, const uint16_t* blocks, std::size_t k,
                      std::size_t stride, std::size_t n, double factor, uint16_t* out);

// --- HVD_DETERMINISTIC: a reduction whose order does not depend on where an element sits -------
// Whether reduce_blocks_ordered() takes `dtype` and `op`: a floating-point dtype (float32,
// float64, float16, bfloat16) and kSum, kAverage or kProduct, the reductions whose result depends
// on the order of the operands (integers wrap, min and max pick: any order gives the same bits).
bool ordered_reduction(DataType dtype, ReduceOp op);
// For i < n: out[i] = op(blocks[0*stride + i], ..., blocks[(k-1)*stride + i]) in `dtype`, with the
// operands widened to double, combined in the order 0, 1, ..., k-1, and the result rounded once to
// `dtype` (kAverage reduces like kSum: the caller divides). The same k values give the same bits
// wherever they sit in the blocks. `out` may be one of the blocks. Strides and n count elements.
void reduce_blocks_ordered(DataType dtype, ReduceOp op, const void* blocks, std::size_t k,
                           std::size_t stride, std::size_t n, void* out);

// On x86-64 CPUs with AVX2 and F16C the three functions above run vectorised (the same results bit
// for bit, except the payload of a NaN made from two NaNs). Tests set this to false to compare
// with the portable code.
std::atomic<bool>& simd_enabled();

// Fills n elements with the identity of op: 0 for sum/average, 1 for product, the largest value
// for min (+Inf for floats), the lowest for max (-Inf for floats).
void fill_identity(DataType dtype, ReduceOp op, void* data, std::size_t n);

}  // namespace hvd
