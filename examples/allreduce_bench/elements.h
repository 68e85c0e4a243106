#pragma once

// The data of allreduce_bench: what each rank puts in, what the reduction must give back, and the
// count of values that differ. Inputs are small integers chosen so that every dtype represents the
// inputs and the exact result, in any order of reduction, for up to 21 ranks:
//   sum, avg: base(j) + delta(r, j), with base(j) = j % 5 + 1 and deltas of +1 on rank j % n and
//             -1 on rank (j + 1) % n that cancel: sum = n * base(j), avg = base(j) exactly.
//   prod:     2 on ranks r < 12 with (j + r) even, else 1: products up to 2^6.
//   min, max: (7 j + 3 r) % 11, minus 5 for signed and floating types (values -5..5).
// j is the element's index across the K tensors of an iteration (tensor k, element i:
// j = k * count + i), so that tensors differ. Expected values are computed here independently of
// the reduction, by folding the inputs of every rank in double.
// Exact comparison everywhere except avg on floating types (the division may round): relative
// tolerance 1e-5 (float), 1e-12 (double), 2e-3 (half), 1.6e-2 (bfloat16).
//
// Thread safety: pure functions.

#include <cstdint>

#include <hvd/tensor.h>

namespace allreduce_bench {

// IEEE binary16 and bfloat16 <-> float, round to nearest even (NaN stays NaN).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

// Element i of a buffer of dtype, as a double, and back (values are converted, not clamped).
double load(hvd::DataType dtype, const void* data, int64_t i);
void store(hvd::DataType dtype, void* data, int64_t i, double v);

// What `rank` of `nranks` contributes at global element index j.
double input_value(hvd::ReduceOp op, hvd::DataType dtype, int rank, int nranks, int64_t j);
// The exact reduction of input_value over ranks 0..nranks-1.
double expected_value(hvd::ReduceOp op, hvd::DataType dtype, int nranks, int64_t j);

// data[i] = input_value(..., first + i) for i < count.
void fill_input(hvd::ReduceOp op, hvd::DataType dtype, int rank, int nranks, int64_t first,
                void* data, int64_t count);
// How many of data[0..count) differ from expected_value(..., first + i) (NaN is always wrong).
int64_t count_wrong(hvd::ReduceOp op, hvd::DataType dtype, int nranks, int64_t first,
                    const void* data, int64_t count);

// data[i] /= n, rounded as the dtype's own division would (the raw-MPI baseline's avg: MPI_SUM,
// then this). Integer division truncates; the inputs above make it exact.
void divide(hvd::DataType dtype, void* data, int64_t count, int n);

}  // namespace allreduce_bench
