#pragma once

// Seeded, portable parameter initialisation.
//
// std::normal_distribution and std::uniform_real_distribution are implementation-defined, so two
// standard libraries (or versions) may draw different weights from the same seed. InitRng derives
// everything from std::mt19937_64, whose output sequence the standard does fix:
//   uniform01(): (x >> 11) * 2^-53 from one 64-bit draw x, in [0, 1);
//   normal():    Box-Muller on two uniforms u1 = 1 - uniform01() in (0, 1] and u2 = uniform01():
//                r = sqrt(-2 ln u1); returns r*cos(2 pi u2), and on the next call r*sin(2 pi u2).
// (The only platform dependence left is libm's log/cos/sin in the last bit.)

#include <cstdint>
#include <random>
#include <span>

namespace train_cnn::model {

class InitRng {
 public:
  explicit InitRng(uint64_t seed) : engine_(seed) {}
  double uniform01();
  double normal();

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// He (Kaiming) normal: N(0, 2 / fan_in), for layers followed by ReLU.
void he_normal(std::span<float> w, int fan_in, InitRng& rng);
// Glorot (Xavier) uniform: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)), for the logits layer.
void glorot_uniform(std::span<float> w, int fan_in, int fan_out, InitRng& rng);

}  // namespace train_cnn::model
