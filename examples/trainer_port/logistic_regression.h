#pragma once

// The model and the data of the trainer_port example: binary logistic regression trained with
// minibatch SGD on a synthetic, seeded data set. trainer_single.cc and trainer_distributed.cc both
// include this file, so that the two trainers differ only in the few lines that make one of them
// distributed.
//
// Everything here is deterministic for a given seed on every process and platform (a splitmix64
// generator and explicit Box-Muller, no std::*_distribution whose output is
// implementation-defined): every rank of a distributed run builds the same data set and the same
// permutation of it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainer_port {

// splitmix64: a tiny, well-mixed 64-bit generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next_u64() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

// num_samples rows of num_features standard-normal features (row-major in x) and 0/1 labels:
// y = 1 where x . w_true + b_true + noise > 0, with w_true, b_true and the noise drawn from the
// seed.
struct Dataset {
  int64_t num_samples = 0;
  int64_t num_features = 0;
  std::vector<float> x;
  std::vector<float> y;
};

inline Dataset make_dataset(uint64_t seed, int64_t num_samples, int64_t num_features) {
  Rng rng(seed * 2 + 1);
  std::vector<double> w_true(num_features);
  for (double& w : w_true) w = rng.normal();
  const double b_true = 0.5 * rng.normal();
  Dataset d{num_samples, num_features, std::vector<float>(num_samples * num_features),
            std::vector<float>(num_samples)};
  for (int64_t i = 0; i < num_samples; ++i) {
    double z = b_true + 0.5 * rng.normal();  // label noise
    for (int64_t j = 0; j < num_features; ++j) {
      const float v = static_cast<float>(rng.normal());
      d.x[i * num_features + j] = v;
      z += w_true[j] * v;
    }
    d.y[i] = z > 0 ? 1.0f : 0.0f;
  }
  return d;
}

// The model's parameters: num_features weights, then the bias. Small random initial values.
inline std::vector<float> init_params(uint64_t seed, int64_t num_features) {
  Rng rng(seed * 2 + 2);
  std::vector<float> params(num_features + 1);
  for (float& p : params) p = static_cast<float>(0.01 * rng.normal());
  return params;
}

// 0 .. n-1 in an order drawn from the seed (Fisher-Yates).
inline std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(seed * 2 + 3);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.next_u64() % (i + 1)]);
  return order;
}

// The mean over `rows` of the gradient of the logistic loss with respect to params, followed by
// the mean loss itself: num_features + 2 values [dL/dw..., dL/db, L]. Sums are taken in double.
// Keeping the loss in the same vector lets one averaging step carry both.
inline std::vector<float> batch_gradient(const Dataset& data, const std::vector<float>& params,
                                         std::span<const int64_t> rows) {
  const int64_t nf = data.num_features;
  std::vector<double> sum(nf + 2, 0.0);
  for (int64_t row : rows) {
    const float* x = &data.x[row * nf];
    double z = params[nf];
    for (int64_t j = 0; j < nf; ++j) z += static_cast<double>(params[j]) * x[j];
    const double p = 1.0 / (1.0 + std::exp(-z));
    const double err = p - data.y[row];
    for (int64_t j = 0; j < nf; ++j) sum[j] += err * x[j];
    sum[nf] += err;
    // log(1 + e^z) - y z, computed without overflow.
    sum[nf + 1] += std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))) - data.y[row] * z;
  }
  std::vector<float> mean(nf + 2);
  for (int64_t j = 0; j < nf + 2; ++j) mean[j] = static_cast<float>(sum[j] / rows.size());
  return mean;
}

// params -= lr * gradient (the gradient's trailing loss entry is ignored).
inline void sgd_step(std::vector<float>& params, const std::vector<float>& gradient, float lr) {
  for (size_t j = 0; j < params.size(); ++j) params[j] -= lr * gradient[j];
}

// One value per line, with enough digits to read back the exact float.
inline void write_params(const std::string& path, const std::vector<float>& params) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr)
    throw std::runtime_error("cannot open --weights-out '" + path + "' for writing");
  for (float p : params) std::fprintf(f, "%.9g\n", p);
  if (std::fclose(f) != 0) throw std::runtime_error("cannot write --weights-out '" + path + "'");
}

}  // namespace trainer_port
