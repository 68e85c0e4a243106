#include "model/init.h"

#include <cmath>
#include <numbers>

namespace train_cnn::model {

double InitRng::uniform01() {
  return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

double InitRng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform01();  // (0, 1]: log is finite
  const double u2 = uniform01();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

void he_normal(std::span<float> w, int fan_in, InitRng& rng) {
  const double stddev = std::sqrt(2.0 / fan_in);
  for (float& v : w) v = static_cast<float>(stddev * rng.normal());
}

void glorot_uniform(std::span<float> w, int fan_in, int fan_out, InitRng& rng) {
  const double a = std::sqrt(6.0 / (fan_in + fan_out));
  for (float& v : w) v = static_cast<float>(a * (2.0 * rng.uniform01() - 1.0));
}

}  // namespace train_cnn::model
