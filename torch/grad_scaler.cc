// hvd::torch::GradScaler (include/hvd/torch.h, "Mixed precision"): torch ops for the scaling and
// the checks, on the gradients' own device; hvd::LossScaler for the schedule; one all-reduce of a
// flag over the optimizer's process set for the agreement.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "hvd/torch.h"

namespace hvd::torch {
namespace {

LossScalerOptions schedule_options(const GradScalerOptions& o) {
  LossScalerOptions s;
  s.dynamic = true;
  s.initial_scale = o.initial_scale;
  s.growth_factor = o.growth_factor;
  s.backoff_factor = o.backoff_factor;
  s.growth_interval = o.growth_interval;
  s.min_scale = o.min_scale;
  s.max_scale = o.max_scale;
  s.name = o.name;
  return s;
}

// The schedule, its option checks' messages naming GradScalerOptions.
LossScaler make_schedule(const GradScalerOptions& o) {
  try {
    return LossScaler(schedule_options(o));
  } catch (const InvalidArgumentError& e) {
    std::string what = e.what();
    const std::string from = "LossScalerOptions::", to = "GradScalerOptions::";
    for (size_t at = what.find(from); at != std::string::npos; at = what.find(from, at))
      what.replace(at, from.size(), to);
    throw InvalidArgumentError(what);
  }
}

// A double as text that reads back to the same bits.
std::string exact_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const std::string& state_value(const std::map<std::string, std::string>& state,
                               const std::string& key) {
  const auto it = state.find(key);
  if (it != state.end()) return it->second;
  std::string keys;
  for (const auto& [k, v] : state) keys += (keys.empty() ? "" : ", ") + k;
  throw InvalidArgumentError("GradScaler::load_state_dict: no '" + key +
                             "' in the state (keys: " + (keys.empty() ? "none" : keys) +
                             "); save it with GradScaler::state_dict(), e.g. as a checkpoint's "
                             "metadata, under the same GradScalerOptions::name.");
}

double parse_number(const std::string& key, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end != text.c_str() + text.size())
    throw InvalidArgumentError("GradScaler::load_state_dict: '" + key + "' is '" + text +
                               "', not a number; it must be what GradScaler::state_dict() wrote.");
  return v;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)),
      schedule_(make_schedule(options_)),
      flag_(at::zeros({1}, at::TensorOptions().dtype(at::kInt))) {}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * schedule_.scale();
}

void GradScaler::unscale_(DistributedOptimizer& optimizer) {
  if (!options_.enabled) return;
  if (stage_ == Stage::kUnscaled)
    throw InvalidArgumentError(
        "GradScaler::unscale_() was already called since the last update(): unscale once per "
        "step, then step() and update().");
  if (stage_ == Stage::kStepped)
    throw InvalidArgumentError(
        "GradScaler::unscale_() after step(): call update() first; unscale_() belongs between "
        "backward() and step().");
  optimizer.synchronize();
  const double inverse = 1.0 / schedule_.scale();
  at::NoGradGuard no_grad;
  // One "any non-finite" flag per gradient, combined per device: one read back per device.
  std::map<std::string, std::vector<at::Tensor>> flags;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const at::Tensor& g = p.grad();
      if (!g.defined()) continue;
      if (!at::isFloatingType(g.scalar_type()))
        throw InvalidArgumentError("GradScaler::unscale_: a gradient has dtype " +
                                   std::string(c10::toString(g.scalar_type())) +
                                   "; gradients must be floating point.");
      g.mul_(inverse);
      flags[g.device().str()].push_back(g.isfinite().logical_not().any());
    }
  }
  local_overflow_ = false;
  for (auto& [device, list] : flags)
    local_overflow_ = local_overflow_ || at::stack(list).any().item<bool>();
  stage_ = Stage::kUnscaled;
}

bool GradScaler::step(DistributedOptimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (stage_ == Stage::kStepped)
    throw InvalidArgumentError(
        "GradScaler::step() twice without update(): call update() after each step().");
  if (stage_ == Stage::kReady) unscale_(optimizer);
  flag_.fill_(local_overflow_ ? 1 : 0);
  allreduce_(flag_, options_.name + ".overflow", ReduceOp::kSum, 1.0, 1.0,
             optimizer.distributed_options().process_set);
  last_ = LossScaleStep{};
  last_.overflow_ranks = flag_.item<int>();
  last_.skipped = last_.overflow_ranks > 0;
  last_.scale = schedule_.scale();
  last_.next_scale = last_.scale;
  stage_ = Stage::kStepped;
  if (last_.skipped) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (stage_ != Stage::kStepped)
    throw InvalidArgumentError(
        "GradScaler::update() without a step() since the last update(): call step(optimizer) "
        "first.");
  schedule_.advance(last_.skipped);
  last_.next_scale = schedule_.scale();
  stage_ = Stage::kReady;
}

std::map<std::string, std::string> GradScaler::state_dict() const {
  return {{options_.name + ".scale", exact_text(schedule_.scale())},
          {options_.name + ".good_steps", std::to_string(schedule_.good_steps())}};
}

void GradScaler::load_state_dict(const std::map<std::string, std::string>& state) {
  const std::string scale_key = options_.name + ".scale", steps_key = options_.name + ".good_steps";
  const double scale = parse_number(scale_key, state_value(state, scale_key));
  const double steps = parse_number(steps_key, state_value(state, steps_key));
  if (steps != static_cast<double>(static_cast<int64_t>(steps)))
    throw InvalidArgumentError("GradScaler::load_state_dict: '" + steps_key + "' is '" +
                               state_value(state, steps_key) + "', not a whole number.");
  try {
    schedule_.restore(scale, static_cast<int64_t>(steps));
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(std::string("GradScaler::load_state_dict: ") + e.what());
  }
  stage_ = Stage::kReady;
}

}  // namespace hvd::torch
