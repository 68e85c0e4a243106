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
// mantissa moves to the next binade (or to Inf) as it should. Written as selects rather than
// branches, so that the loops of round_to_precision() vectorise.
float round_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const uint32_t nan = 0u - static_cast<uint32_t>((u & 0x7FFFFFFFu) > 0x7F800000u);
  return std::bit_cast<float>((u & nan) | (rounded & ~nan));  // NaN stays NaN
}

float round_to_fp16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u ^ sign;
  // Normal halves: keep 10 of float's 23 mantissa bits.
  const uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & 0xFFFFE000u;
  // Below 2^-14 the half grid is fixed at 2^-24: in [0.5, 1) float's ulp is 2^-24, so adding and
  // removing 0.5 rounds to that grid, to nearest even (the default rounding mode).
  const uint32_t subnormal = std::bit_cast<uint32_t>((std::bit_cast<float>(a) + 0.5f) - 0.5f);
  // Selects as masks (all ones or zero): no branch in the loop.
  auto pick = [](bool c, uint32_t yes, uint32_t no) {
    const uint32_t m = 0u - static_cast<uint32_t>(c);
    return (yes & m) | (no & ~m);
  };
  uint32_t r = pick(a < 0x38800000u, subnormal, normal);
  r = pick(a >= 0x477FF000u, 0x7F800000u, r);  // from 65520 on: Inf
  r = pick(a > 0x7F800000u, a, r);             // NaN stays NaN
  return std::bit_cast<float>(sign | r);
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
