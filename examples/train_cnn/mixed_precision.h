#pragma once

// Mixed precision in train_cnn (--precision bf16|fp16): the model's emulated 16-bit storage
// (model/precision.h) and hvd's loss scaler (hvd/loss_scaler.h), as the trainer uses them.
//
// Each step: before_backward() gives the network the current loss scale; after the strategy has
// averaged the gradients, after_gradients() unscales them, checks them for Inf/NaN, agrees with
// every rank (one small all-reduce) and says whether the optimizer steps. A step that overflowed
// on any rank is skipped on every rank and the dynamic scale halves, so the replicas stay
// identical. With --precision fp32 there is no scaler: before_backward() and after_gradients() do
// nothing and communicate nothing (the trainer runs exactly as without mixed precision).
//
// Test hook: TRAIN_CNN_TEST_OVERFLOW=RANK:STEP[,RANK:STEP...] makes rank RANK report an overflow
// at (1-based) optimizer step STEP as if its unscaled gradients held an Inf, after the all-reduce
// of the gradients (so only the agreement can spread it); with the hook set every rank prints a
// line for each skipped step ("train_cnn: rank R: step S skipped ..."), so a test can check them
// all.
//
// Collective: after_gradients() on every rank at every step; not thread-safe.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "flags.h"
#include "hvd/loss_scaler.h"
#include "model/precision.h"
#include "network.h"
#include "progress.h"

namespace train_cnn {

class MixedPrecision {
 public:
  // From the flags (validated by parse_flags); reads the test hook. Throws
  // hvd::InvalidArgumentError for a malformed TRAIN_CNN_TEST_OVERFLOW.
  MixedPrecision(const Flags& flags, int rank);

  bool enabled() const { return scaler_.has_value(); }  // a 16-bit --precision: loss scaling
  // Anything to announce: a 16-bit --precision or --gradient-allreduce.
  bool active() const { return enabled() || gradient_allreduce_ != "fp32"; }
  model::Precision precision() const { return precision_; }
  // e.g. "precision bf16, loss scale dynamic from 65536 (x2 after 2000 steps without overflow,
  // x0.5 after an overflow, whose step every rank skips); gradients all-reduced in bf16".
  std::string describe() const;

  // Sets the network's loss scale for the coming backward pass.
  void before_backward(Network& net);
  // Collective: unscales the gradients, agrees on an overflow, moves the scale. Returns true when
  // the optimizer should step. step: the 1-based optimizer step (messages, the test hook).
  // Rank 0 reports a skipped step through progress.
  bool after_gradients(Network& net, int64_t step, Progress& progress);

  double scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }

  // Checkpoint metadata: the scale and its good-step count (nothing with fp32); restore() reads
  // them back when present (a checkpoint of an fp32 run starts the scaler afresh).
  void save(std::map<std::string, std::string>& metadata) const;
  void restore(const std::map<std::string, std::string>& metadata);

 private:
  model::Precision precision_ = model::Precision::kFp32;
  std::optional<hvd::LossScaler> scaler_;
  int rank_ = 0;
  std::set<std::pair<int, int64_t>> injected_;  // (rank, step) of TRAIN_CNN_TEST_OVERFLOW
  bool hook_ = false;                           // TRAIN_CNN_TEST_OVERFLOW is set
  std::string gradient_allreduce_;              // --gradient-allreduce
};

}  // namespace train_cnn
