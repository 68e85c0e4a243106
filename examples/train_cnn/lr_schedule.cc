#include "lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace train_cnn {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

LrSchedule::LrSchedule(const LrScheduleOptions& options, double replicas, int64_t steps_per_epoch,
                       int64_t total_steps)
    : options_(options),
      replicas_(std::max(1.0, replicas)),
      steps_per_epoch_(std::max<int64_t>(1, steps_per_epoch)) {
  linear_ = options_.scaling ? options_.lr * replicas_ : options_.lr;
  peak_ = linear_;
  start_ = options_.lr;
  const double cap = std::max(options_.max_lr, options_.lr);  // never below --lr itself
  if (options_.scaling && options_.max_lr > 0 && linear_ > cap) {
    // The linear schedule scaled down as a whole: as if --lr were cap / replicas.
    peak_ = cap;
    start_ = cap / replicas_;
  }
  if (options_.warmup_steps >= 0) {
    warmup_steps_ = options_.warmup_steps;
  } else if (peak_ <= start_) {
    warmup_steps_ = 0;  // nothing to ramp up to
  } else {
    const auto epoch = static_cast<int64_t>(std::llround(kAutoWarmupEpochs * steps_per_epoch_));
    warmup_steps_ = std::max(epoch, kAutoWarmupMinSteps);
    warmup_steps_ = std::min(warmup_steps_, std::max<int64_t>(1, total_steps / 2));
  }
}

std::string LrSchedule::epochs(int64_t steps) const {
  char buf[48];
  const double e = static_cast<double>(steps) / static_cast<double>(steps_per_epoch_);
  std::snprintf(buf, sizeof buf, "%.3g %s", e, e == 1.0 ? "epoch" : "epochs");
  return buf;
}

double LrSchedule::at(int64_t step, int epoch) const {
  double rate = peak_;
  if (step < warmup_steps_)
    rate =
        start_ + (peak_ - start_) * static_cast<double>(step) / static_cast<double>(warmup_steps_);
  return rate * std::pow(options_.decay, epoch);
}

std::string LrSchedule::describe() const {
  std::ostringstream os;
  os << "lr " << num(options_.lr);
  if (options_.scaling) {
    os << " x " << num(replicas_) << (replicas_ == 1 ? " replica" : " replicas") << " = "
       << num(linear_);
    if (capped())
      os << ", capped at " << num(peak_) << " (--max-lr; as if --lr " << num(start_) << ")";
  } else {
    os << " (no scaling)";
  }
  if (warmup_steps_ > 0 && peak_ != start_) {
    os << ", warm-up " << num(start_) << " -> " << num(peak_) << " over " << warmup_steps_
       << " steps (" << epochs(warmup_steps_) << " of " << steps_per_epoch_ << " steps; "
       << (warmup_automatic() ? "automatic" : "--warmup-steps") << ")";
  } else {
    os << ", no warm-up";
    if (!warmup_automatic() && warmup_steps_ > 0)
      os << " (nothing to ramp: the rate is not scaled up)";
  }
  os << ", decay x" << num(options_.decay) << " per epoch (epoch k: x" << num(options_.decay)
     << "^(k-1)" << (warmup_steps_ > 0 && peak_ != start_ ? ", the warm-up included)" : ")");
  return os.str();
}

}  // namespace train_cnn
