// Dynamic loss scaling (hvd/loss_scaler.h): the local unscale-and-check, the schedule, and the
// all-reduce that makes every rank skip the same steps.
#include "hvd/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/dtype_math.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "training/device.h"

namespace hvd {
namespace {

std::string value(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void check_options(const LossScalerOptions& o) {
  auto bad = [](const std::string& field, double v, const std::string& accepted) {
    throw InvalidArgumentError("LossScalerOptions::" + field + " is " + value(v) + ": " + accepted +
                               ".");
  };
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(o.min_scale)) bad("min_scale", o.min_scale, "it must be finite and positive");
  if (!positive(o.max_scale) || o.max_scale < o.min_scale)
    bad("max_scale", o.max_scale,
        "it must be finite and at least min_scale (" + value(o.min_scale) + ")");
  if (!positive(o.initial_scale) || o.initial_scale < o.min_scale || o.initial_scale > o.max_scale)
    bad("initial_scale", o.initial_scale,
        "it must be finite and within [min_scale, max_scale] = [" + value(o.min_scale) + ", " +
            value(o.max_scale) + "]");
  if (!std::isfinite(o.growth_factor) || o.growth_factor < 1)
    bad("growth_factor", o.growth_factor, "it must be finite and at least 1");
  if (!(o.backoff_factor > 0 && o.backoff_factor <= 1))
    bad("backoff_factor", o.backoff_factor, "it must be in (0, 1]");
  if (o.growth_interval < 1)
    bad("growth_interval", static_cast<double>(o.growth_interval), "it must be at least 1 step");
  if (o.name.empty())
    throw InvalidArgumentError(
        "LossScalerOptions::name is empty: it names the overflow flag's "
        "all-reduce, give it a non-empty name.");
}

// x[i] *= factor over n elements of T; true when a result is Inf or NaN.
template <class T>
bool scale_and_check(T* x, size_t n, T factor) {
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    x[i] *= factor;
    bad |= !std::isfinite(x[i]);
  }
  return bad;
}

// The same for 16-bit floats stored as uint16_t, computed in float and rounded back.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
bool scale_and_check_16(uint16_t* x, size_t n, float factor) {
  bool bad = false;
  for (size_t i = 0; i < n; ++i) {
    const float v = ToFloat(x[i]) * factor;
    x[i] = FromFloat(v);
    bad |= !std::isfinite(ToFloat(x[i]));
  }
  return bad;
}

}  // namespace

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.initial_scale), flag_(1, 0) {
  check_options(options_);
}

struct LossScaler::DeviceState {
  training::OverflowCheck check;
};

bool LossScaler::unscale(const std::vector<TensorRef>& grads) const {
  // Every gradient is checked before any is changed.
  bool on_device = false;
  for (size_t t = 0; t < grads.size(); ++t) {
    const TensorRef& g = grads[t];
    const std::string what = "LossScaler::unscale: gradient " + std::to_string(t);
    switch (g.dtype()) {
      case DataType::kFloat32:
      case DataType::kFloat64:
      case DataType::kFloat16:
      case DataType::kBFloat16:
        break;
      default:
        throw InvalidArgumentError(what + " has dtype " + dtype_name(g.dtype()) +
                                   "; gradients must be float32, float64, float16 or bfloat16.");
    }
    training::require_device(g, what);
    on_device |= g.device().kind != Device::kCPU;
  }
  if (on_device && !device_) device_ = std::make_shared<DeviceState>();

  const double inverse = 1.0 / scale_;
  bool overflow = false;
  for (const TensorRef& g : grads) {
    if (g.device().kind != Device::kCPU) {
      device_->check.unscale(g, inverse);  // queued on g's stream
      continue;
    }
    const size_t n = static_cast<size_t>(g.num_elements());
    switch (g.dtype()) {
      case DataType::kFloat32:
        overflow |= scale_and_check(static_cast<float*>(g.data()), n, static_cast<float>(inverse));
        break;
      case DataType::kFloat64:
        overflow |= scale_and_check(static_cast<double*>(g.data()), n, inverse);
        break;
      case DataType::kFloat16:
        overflow |= scale_and_check_16<half_to_float, float_to_half>(
            static_cast<uint16_t*>(g.data()), n, static_cast<float>(inverse));
        break;
      default:  // kBFloat16 (checked above)
        overflow |= scale_and_check_16<bfloat16_to_float, float_to_bfloat16>(
            static_cast<uint16_t*>(g.data()), n, static_cast<float>(inverse));
        break;
    }
  }
  if (on_device) overflow |= device_->check.overflowed();  // waits for the gradients' streams
  return overflow;
}

LossScaleStep LossScaler::update(bool local_overflow) {
  // A sum rather than a max: the same decision (any rank), and the count says how many.
  flag_[0] = local_overflow ? 1 : 0;
  hvd::allreduce(flag_, options_.name + ".overflow", ReduceOp::kSum);
  LossScaleStep step;
  step.overflow_ranks = flag_[0];
  step.skipped = flag_[0] > 0;
  step.scale = scale_;
  advance(step.skipped);
  step.next_scale = scale_;
  return step;
}

void LossScaler::advance(bool overflow) {
  if (overflow) {
    ++skipped_steps_;
    good_steps_ = 0;
    if (options_.dynamic) scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    return;
  }
  if (!options_.dynamic) return;
  if (++good_steps_ >= options_.growth_interval) {
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
    good_steps_ = 0;
  }
}

void LossScaler::restore(double scale, int64_t good_steps) {
  if (!(std::isfinite(scale) && scale >= options_.min_scale && scale <= options_.max_scale))
    throw InvalidArgumentError("LossScaler::restore: scale " + value(scale) +
                               " is outside [min_scale, max_scale] = [" +
                               value(options_.min_scale) + ", " + value(options_.max_scale) + "].");
  if (good_steps < 0 || good_steps >= options_.growth_interval)
    throw InvalidArgumentError("LossScaler::restore: good_steps " + std::to_string(good_steps) +
                               " is outside [0, growth_interval) = [0, " +
                               std::to_string(options_.growth_interval) + ").");
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace hvd
