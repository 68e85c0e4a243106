#include "model/gemm.h"

#include <cblas.h>

#include <string>

#include "hvd/error.h"

namespace train_cnn::model {

void gemm(Trans trans_a, Trans trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C untouched only for beta == 1; make the k == 0 case explicit.
    for (long i = 0; i < static_cast<long>(m) * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const bool ta = trans_a == Trans::kYes;
  const bool tb = trans_b == Trans::kYes;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

void set_blas_threads(int threads) {
  if (threads < 1) {
    throw hvd::InvalidArgumentError("BLAS thread count must be >= 1, got " +
                                    std::to_string(threads) + ".");
  }
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace train_cnn::model
