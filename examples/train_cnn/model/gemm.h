#pragma once

// The one place that talks to BLAS: a row-major single-precision GEMM and the BLAS thread count.
//
// Determinism: OpenBLAS splits a GEMM across its threads in a way that depends on the thread
// count, which changes the summation order. The model therefore runs OpenBLAS on one thread by
// default (ModelOptions::blas_threads = 1, applied by Model's constructor): with a fixed thread
// count and the same CPU, the same input gives bitwise the same output. Data parallelism comes from
// running one process per core (mpirun -np N), not from BLAS threads.

namespace train_cnn::model {

enum class Trans { kNo, kYes };

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n], all row-major and densely packed:
// A is [m,k] (or [k,m] when transposed), B is [k,n] (or [n,k] when transposed).
void gemm(Trans trans_a, Trans trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c);

// Sets the number of threads OpenBLAS uses in this process (>= 1). Not thread-safe with GEMMs in
// flight; call it before training.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace train_cnn::model
