#pragma once

// Reduced-precision storage emulated on the CPU (--precision bf16|fp16).
//
// The CPU model computes in float32 (OpenBLAS); with a 16-bit precision it rounds what a
// mixed-precision GPU model would store in 16 bits: the input, the weights it computes with (a
// rounded copy of the float32 master weights, which the optimizer updates), the outputs of every
// convolution and dense layer, and every gradient of the backward pass (activation gradients and
// weight gradients). Rounding is to nearest, ties to even, as a conversion to IEEE binary16 or
// bfloat16 and back does: fp16 values beyond its range become +-Inf (what the loss scaler's check
// catches), below 2^-14 they lose bits and below 2^-25 they flush to zero; bf16 keeps float32's
// range with 8 significant bits. ReLU and max-pooling only copy or zero values, so their outputs
// stay representable. The loss (softmax cross-entropy) is computed in float32 and its gradient is
// multiplied by the loss scale before it is rounded, as in mixed-precision training on a GPU.
//
// Thread safety: pure functions.

#include <cstdint>
#include <span>
#include <string>

namespace train_cnn::model {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32", "bf16", "fp16".
const char* precision_name(Precision p);
// The inverse of precision_name(); throws hvd::InvalidArgumentError naming the value otherwise.
Precision parse_precision(const std::string& name);

// The nearest bfloat16 / IEEE half value of x (ties to even; NaN stays NaN; fp16 overflow: +-Inf),
// as a float.
float round_to_bf16(float x);
float round_to_fp16(float x);

// Rounds every element of x to p's 16-bit format; kFp32 leaves x as it is.
void round_to_precision(Precision p, std::span<float> x);

// What a layer set needs to emulate a precision: the format, and the scale the loss gradient is
// multiplied by (1 without loss scaling). Owned by the model; the layers keep a pointer.
struct Numerics {
  Precision precision = Precision::kFp32;
  float loss_scale = 1.0f;

  bool reduced() const { return precision != Precision::kFp32; }
  void round(std::span<float> x) const { round_to_precision(precision, x); }
};

}  // namespace train_cnn::model
