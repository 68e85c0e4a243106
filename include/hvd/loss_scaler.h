#pragma once

// Loss scaling for mixed-precision training: fp32 master weights, a model that computes and stores
// activations and gradients in fp16 or bf16, and a loss multiplied by a scale before the backward
// pass so that small gradients do not flush to zero in 16 bits (Micikevicius et al., 2018).
//
// A data-parallel step with a LossScaler (the model starts its backward pass from loss x
// scaler.scale(), in its 16-bit arithmetic):
//
//   hvd::MirroredStrategy strategy;
//   hvd::LossScaler scaler({.initial_scale = 65536});
//   std::vector<int64_t> rows = {0, 1, 2};                // this replica's batch
//   strategy.begin_step();
//   model.backward(rows, [&](int i) { strategy.gradient_ready(names[i], grads[i]); });
//   strategy.synchronize_gradients();                     // averaged, still scaled
//   if (scaler.unscale_and_update(grads))                 // grads /= scale; Inf/NaN anywhere?
//     optimizer.step(strategy.learning_rate(global_step)); // no: every rank skips this step
//
// unscale() multiplies the gradients by 1/scale and reports whether any element is Inf or NaN on
// this rank; update() combines that flag across ranks (an all-reduce sum of the flags, so a
// rank-local overflow skips the step everywhere and the replicas never diverge) and then moves
// the scale identically on every rank: after an overflow it backs off (x backoff_factor, not
// below min_scale) and the step is skipped; after growth_interval overflow-free steps in a row it
// grows (x growth_factor, not above max_scale). A static scaler (dynamic = false) keeps its scale
// and still skips overflowing steps. With the default factors (powers of two) the scaling and
// unscaling are exact. To all-reduce the gradients themselves in 16 bits, set
// StrategyOptions::gradient_dtype (hvd/strategy.h); an fp16 sum that overflows reaches every rank
// as Inf and is caught here.
//
// Collective: update() and unscale_and_update() are called by every rank at the same step, in the
// same order as the rank's other collectives with the same name; advance() is local (the schedule
// alone, for tests and for programs that combine the flag themselves).
// Thread safety: one LossScaler per training thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hvd/tensor.h"

namespace hvd {

struct LossScalerOptions {
  bool dynamic = true;             // false: the scale stays initial_scale
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;      // after growth_interval good steps in a row
  double backoff_factor = 0.5;     // after an overflow
  int64_t growth_interval = 2000;  // overflow-free steps before the scale grows
  double min_scale = 1.0;
  double max_scale = 16777216.0;     // 2^24
  std::string name = "loss_scaler";  // names the flag's all-reduce ("<name>.overflow")
};

// What update() decided for one step; the same on every rank.
struct LossScaleStep {
  bool skipped = false;    // some rank saw Inf/NaN: the optimizer must not step
  int overflow_ranks = 0;  // ranks that reported an overflow
  double scale = 0;        // the scale this step used
  double next_scale = 0;   // the scale of the next step
};

class LossScaler {
 public:
  // Throws hvd::InvalidArgumentError for options out of range (a scale that is not finite and
  // positive, min_scale > max_scale, growth_factor < 1, backoff_factor outside (0, 1],
  // growth_interval < 1), naming the field and the value.
  explicit LossScaler(const LossScalerOptions& options = {});

  const LossScalerOptions& options() const { return options_; }
  // The scale of the current step: multiply the loss (or its gradient) by it before backward.
  double scale() const { return scale_; }

  // Local: multiplies every element of grads by 1/scale() in place and returns true when any
  // element is Inf or NaN. Tensors of float32, float64, float16 or bfloat16 (16-bit results
  // rounded to nearest even), on the CPU or on a CUDA device: a CUDA gradient is unscaled and
  // checked on its device, on its TensorRef stream, and unscale() waits for those streams (the flag
  // must reach the host; no gradient is copied). Anything else (another dtype, a device this
  // process cannot reach) is an hvd::InvalidArgumentError naming the tensor, before any is changed.
  bool unscale(const std::vector<TensorRef>& grads) const;

  // Collective: combines every rank's local_overflow (an all-reduce), advances the schedule the
  // same way on every rank and returns what it decided.
  LossScaleStep update(bool local_overflow);

  // Collective: unscale(grads) then update(); true when the optimizer should step.
  bool unscale_and_update(const std::vector<TensorRef>& grads) {
    return !update(unscale(grads)).skipped;
  }

  // Local: the schedule alone, as update() applies it once every rank's flag is known.
  void advance(bool overflow);

  int64_t good_steps() const { return good_steps_; }  // overflow-free steps since the last change
  int64_t skipped_steps() const { return skipped_steps_; }  // since construction (or restore)

  // The schedule's state, for checkpoints: restore(scale(), good_steps()) continues exactly.
  void restore(double scale, int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
  int64_t skipped_steps_ = 0;
  std::vector<int32_t> flag_;  // the all-reduced overflow flag
  // The device half of unscale() (training/device.h: a flag in device memory per device), made at
  // the first CUDA gradient. A copy of the scaler shares it: one scaler per training thread.
  struct DeviceState;
  mutable std::shared_ptr<DeviceState> device_;
};

}  // namespace hvd
