#pragma once

// A learnable stand-in for Fashion-MNIST, for --synthetic runs and tests without the data set.
// Each class has a fixed random prototype image (pixels uniform in [0, 1], drawn from
// pattern_seed); a sample is its class prototype plus Gaussian noise of std `noise`, clipped to
// [0, 1]; labels are drawn uniformly. Two sets made with the same options but different
// sample_seed share the prototypes, so one can serve as the test set of the other.
// Deterministic across platforms (model::InitRng, not std:: distributions).

#include <cstdint>

#include "data/dataset.h"

namespace train_cnn::data {

struct SyntheticOptions {
  int rows = 28;
  int cols = 28;
  int num_classes = 10;
  float noise = 0.3f;
  uint64_t pattern_seed = 20240601;
};

Dataset make_synthetic(int64_t count, uint64_t sample_seed, const SyntheticOptions& options = {});

}  // namespace train_cnn::data
