#include "mixed_precision.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <vector>

#include "hvd/error.h"

namespace train_cnn {
namespace {

constexpr const char* kTestHook = "TRAIN_CNN_TEST_OVERFLOW";

// Exact (a checkpoint restores it bitwise), and short for powers of two: 65536, 0.5.
std::string number(double v) {
  std::ostringstream os;
  os.precision(std::numeric_limits<double>::max_digits10);
  os << v;
  return os.str();
}

// TRAIN_CNN_TEST_OVERFLOW: RANK:STEP pairs separated by commas.
std::set<std::pair<int, int64_t>> parse_hook(const std::string& text) {
  std::set<std::pair<int, int64_t>> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int rank = -1;
    long long step = -1;
    char colon = 0;
    std::istringstream one(item);
    if (!(one >> rank >> colon >> step) || colon != ':' || !one.eof() || rank < 0 || step < 1)
      throw hvd::InvalidArgumentError(std::string(kTestHook) + " is '" + text + "': '" + item +
                                      "' is not RANK:STEP (a rank >= 0 and a 1-based step); "
                                      "give pairs such as 1:3,0:7, or unset it.");
    out.insert({rank, step});
  }
  return out;
}

}  // namespace

MixedPrecision::MixedPrecision(const Flags& flags, int rank)
    : precision_(model::parse_precision(flags.precision)),
      rank_(rank),
      gradient_allreduce_(flags.gradient_allreduce) {
  if (const char* hook = std::getenv(kTestHook); hook != nullptr && *hook != '\0') {
    injected_ = parse_hook(hook);
    hook_ = true;
  }
  if (precision_ == model::Precision::kFp32) {
    if (hook_)
      throw hvd::InvalidArgumentError(std::string(kTestHook) +
                                      " is set but --precision is fp32: the overflow test hook "
                                      "needs --precision bf16 or fp16.");
    return;
  }
  hvd::LossScalerOptions o;
  o.name = "train_cnn.loss_scale";
  if (flags.static_loss_scale > 0) {
    o.dynamic = false;
    o.initial_scale = flags.static_loss_scale;
    o.min_scale = std::min(o.min_scale, flags.static_loss_scale);
    o.max_scale = std::max(o.max_scale, flags.static_loss_scale);
  } else {
    o.initial_scale = flags.loss_scale_init;
    o.growth_interval = flags.loss_scale_window;
  }
  scaler_.emplace(o);
}

std::string MixedPrecision::describe() const {
  std::string s = std::string("precision ") + model::precision_name(precision_);
  if (scaler_) {
    const hvd::LossScalerOptions& o = scaler_->options();
    if (o.dynamic)
      s += ", loss scale dynamic from " + number(o.initial_scale) + " (x" +
           number(o.growth_factor) + " after " + std::to_string(o.growth_interval) +
           " steps without overflow, x" + number(o.backoff_factor) +
           " after an overflow, whose step every rank skips)";
    else
      s += ", loss scale fixed at " + number(o.initial_scale) +
           " (a step that overflows is skipped by every rank)";
  }
  return s + "; gradients all-reduced in " + gradient_allreduce_;
}

void MixedPrecision::before_backward(Network& net) {
  if (scaler_) net.set_loss_scale(static_cast<float>(scaler_->scale()));
}

bool MixedPrecision::after_gradients(Network& net, int64_t step, Progress& progress) {
  if (!scaler_) return true;
  bool overflow = net.unscale_gradients(*scaler_);  // host tensors, or on the GPU
  overflow |= injected_.count({rank_, step}) > 0;
  const hvd::LossScaleStep d = scaler_->update(overflow);
  if (!d.skipped) return true;
  const std::string what =
      "step " + std::to_string(step) + " skipped: Inf/NaN in the gradients of " +
      std::to_string(d.overflow_ranks) + (d.overflow_ranks == 1 ? " rank" : " ranks") +
      "; loss scale " + number(d.scale) + " -> " + number(d.next_scale);
  progress.line(what);
  if (hook_) {
    std::printf("train_cnn: rank %d: %s\n", rank_, what.c_str());
    std::fflush(stdout);
  }
  return false;
}

void MixedPrecision::save(std::map<std::string, std::string>& metadata) const {
  if (!scaler_) return;  // fp32: the metadata of a run without mixed precision
  metadata["precision"] = model::precision_name(precision_);
  metadata["loss_scale"] = number(scaler_->scale());
  metadata["loss_scale_good_steps"] = std::to_string(scaler_->good_steps());
}

void MixedPrecision::restore(const std::map<std::string, std::string>& metadata) {
  if (!scaler_) return;
  auto scale = metadata.find("loss_scale");
  auto good = metadata.find("loss_scale_good_steps");
  if (scale == metadata.end() || good == metadata.end()) return;
  try {
    scaler_->restore(std::stod(scale->second), std::stoll(good->second));
  } catch (const std::exception&) {
    // A fixed scale, or another --loss-scale-window, than the run that saved it: start afresh.
  }
}

}  // namespace train_cnn
