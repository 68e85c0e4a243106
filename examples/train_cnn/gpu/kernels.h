#pragma once

// The few kernels of the GPU model that cuDNN and cuBLAS do not provide (gpu/kernels.cu). Each is
// queued on `stream` and checked at launch (CNN_CUDA_CHECK(cudaGetLastError())). Every reduction
// runs in a fixed order (per-thread strided loop, then a shared-memory tree over a fixed block
// size, no atomics), so results are bitwise reproducible for a given batch.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace train_cnn::gpu {

// y[n, c, s] += bias[c] for a [batch, channels, spatial] tensor (dense layers: spatial = 1).
void bias_add(float* y, const float* bias, int batch, int channels, int spatial,
              cudaStream_t stream);

// bias_grad[c] += sum over n and s of dy[n, c, s].
void bias_grad(const float* dy, float* bias_grad, int batch, int channels, int spatial,
               cudaStream_t stream);

// What one softmax cross-entropy forward pass returns to the host.
struct LossStats {
  double loss_sum = 0.0;  // sum over the valid samples of -log softmax(z)[label]
  long long correct = 0;  // samples whose first arg-max logit equals the label
  int bad_sample = -1;    // first sample with a label outside [0, classes), -1 when none
  int bad_label = 0;      // its label
};

// From the logits z and log_probs = log softmax(z) (cuDNN, CUDNN_SOFTMAX_LOG) of a
// [batch, classes] block and int32 labels, writes *stats (device memory). One block.
void cross_entropy_stats(const float* logits, const float* log_probs, const int32_t* labels,
                         int batch, int classes, LossStats* stats, cudaStream_t stream);

// dlogits = (exp(log_probs) - onehot(label)) / batch, written in the CPU model's order of float
// operations (p * (1/N), then minus 1/N at the label). A row with an invalid label gets no
// one-hot term (the forward pass already reported it).
void cross_entropy_backward(const float* log_probs, const int32_t* labels, int batch, int classes,
                            float* dlogits, cudaStream_t stream);

// One SGD-with-momentum step over n floats, the rule of model/sgd_momentum.h:
//   g = grad + wd * p;  v = mu * v + g;  p -= lr * (nesterov ? g + mu * v : v)
// with each multiply and add rounded separately (no fused multiply-add), so it matches the CPU
// optimizer bit for bit.
void sgd_momentum_step(float* params, const float* grads, float* velocity, int64_t n, float lr,
                       float momentum, float weight_decay, bool nesterov, cudaStream_t stream);

// ---- Mixed precision (--precision fp16|bf16; the unscale is hvd::LossScaler::unscale) ----

// The 16-bit storage formats: IEEE binary16 (__half) and bfloat16 (__nv_bfloat16).
enum class HalfFormat { kFp16, kBf16 };

// out[i] = in[i] rounded to the nearest `format` value (ties to even, NaN stays NaN, fp16
// overflow +-Inf), as model::round_to_fp16 / round_to_bf16 do; out holds n 16-bit values of that
// format. The fp32 master copy `in` is only read.
void cast_float_to_half(const float* in, void* out, int64_t n, HalfFormat format,
                        cudaStream_t stream);
// out[i] = the exact float value of the 16-bit in[i].
void cast_half_to_float(const void* in, float* out, int64_t n, HalfFormat format,
                        cudaStream_t stream);
// x[i] = x[i] rounded to `format` and back, in place (the 16-bit storage emulated in fp32).
void round_to_half(float* x, int64_t n, HalfFormat format, cudaStream_t stream);

// bias_add and bias_grad for 16-bit tensors of `format` (the GPU model with --precision bf16|fp16):
// y[n, c, s] = round(y[n, c, s] + bias[c]), the sum in float and rounded once to the format;
// bias_grad[c] = round(bias_grad[c] + sum over n and s of dy[n, c, s]), the sum in float in the
// fixed order of bias_grad() and rounded once. y, bias, dy and bias_grad hold 16-bit values.
void bias_add_half(void* y, const void* bias, int batch, int channels, int spatial,
                   HalfFormat format, cudaStream_t stream);
void bias_grad_half(const void* dy, void* bias_grad, int batch, int channels, int spatial,
                    HalfFormat format, cudaStream_t stream);

// ReLU on n 16-bit values of `format`, CudnnRelu's stand-in where cuDNN refuses the 16-bit type
// (gpu/relu.h): y = x where x > 0 or x is NaN, else +0; dx = dy where y > 0, else +0. Values are
// only copied or zeroed (exact); in place (y == x, dx == dy) is allowed.
void relu_forward_half(const void* x, void* y, int64_t n, HalfFormat format, cudaStream_t stream);
void relu_backward_half(const void* y, const void* dy, void* dx, int64_t n, HalfFormat format,
                        cudaStream_t stream);

// x[i] *= factor, one rounded multiply (exact for a power-of-two factor without overflow or
// underflow): the loss gradient times the loss scale.
void scale_in_place(float* x, int64_t n, float factor, cudaStream_t stream);

}  // namespace train_cnn::gpu
