#include "model/precision.h"

#include <bit>

#include "hvd/error.h"

namespace train_cnn::model {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
    if (name == precision_name(p)) return p;
  throw hvd::InvalidArgumentError("--precision is '" + name +
                                  "': it must be one of fp32, bf16, fp16.");
}

// Both roundings work on the bits: dropping the low mantissa bits with a carry of half an ulp
// (minus one unless the kept part is odd) rounds to nearest, ties to even, and a carry out of the
// mantissa moves to the next binade (or to Inf) as it should.
float round_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;  // NaN stays NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xFFFF0000u);
}

float round_to_fp16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  uint32_t a = u ^ sign;
  if (a >= 0x7F800000u) return x;                                         // Inf, NaN
  if (a >= 0x477FF000u) return std::bit_cast<float>(sign | 0x7F800000u);  // >= 65520: Inf
  if (a < 0x38800000u) {
    // Below 2^-14 the half grid is fixed at 2^-24: in [0.5, 1) float's ulp is 2^-24, so adding
    // and removing 0.5 rounds to that grid, to nearest even (the default rounding mode).
    const float r = (std::bit_cast<float>(a) + 0.5f) - 0.5f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(r));
  }
  a += 0xFFFu + ((a >> 13) & 1u);  // keep 10 of float's 23 mantissa bits
  return std::bit_cast<float>(sign | (a & 0xFFFFE000u));
}

void round_to_precision(Precision p, std::span<float> x) {
  switch (p) {
    case Precision::kFp32:
      return;
    case Precision::kBf16:
      for (float& v : x) v = round_to_bf16(v);
      return;
    case Precision::kFp16:
      for (float& v : x) v = round_to_fp16(v);
      return;
  }
}

}  // namespace train_cnn::model
