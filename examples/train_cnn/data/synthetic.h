#pragma once

// A learnable stand-in for Fashion-MNIST, for --synthetic runs and tests without the data set.
// Like a Fashion-MNIST image, a sample is an object on a black background: each class has a fixed
// random shape (an ellipse near the centre, its radii and a brightness with a linear shading,
// drawn from pattern_seed); a sample draws its class's shape moved, resized and brightened by a
// relative `jitter`, and adds Gaussian noise of std `noise` inside the shape (clipped to [0, 1]).
// Labels are drawn uniformly. Two sets made with the same options but different sample_seed share
// the shapes, so one can serve as the test set of the other. With noise and jitter 0 every sample
// is its class's shape.
//
// Why shapes and not the random pixel prototypes of before: those (every pixel uniform in [0, 1],
// per class) are told apart only by fine-grained pixel patterns, and training on them with
// train_cnn's default schedule diverged to chance (loss 2.30): 1 rank within the first epoch of
// 8000 images, 2 ranks with the scaled rate. On the shapes the same flags learn as on Fashion-MNIST
// (1 and 2 ranks, 3 epochs of 4000 images per rank: ~0.90 test accuracy; tests/examples/
// train_cnn/test_train_cnn.sh, mode synthetic). Deterministic across platforms (model::InitRng).

#include <cstdint>

#include "data/dataset.h"

namespace train_cnn::data {

struct SyntheticOptions {
  int rows = 28;
  int cols = 28;
  int num_classes = 10;
  float noise = 0.3f;
  float jitter = 0.1f;  // per sample: the shape's centre, radii and brightness, relative
  uint64_t pattern_seed = 20240601;
};

Dataset make_synthetic(int64_t count, uint64_t sample_seed, const SyntheticOptions& options = {});

}  // namespace train_cnn::data
