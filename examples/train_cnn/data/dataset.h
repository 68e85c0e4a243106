#pragma once

// An in-memory image classification set: images float32 [count, channels, rows, cols] (NCHW,
// batch-major, pixels scaled to [0, 1]) and labels int32 [count]. Plus the two helpers a trainer
// needs to feed it: a seeded per-epoch permutation and a gather of samples into a batch buffer.

#include <cstdint>
#include <span>
#include <vector>

namespace train_cnn::data {

struct Dataset {
  int64_t count = 0;
  int channels = 1;
  int rows = 0;
  int cols = 0;
  int num_classes = 10;
  std::vector<float> images;
  std::vector<int32_t> labels;

  int64_t image_size() const { return int64_t{channels} * rows * cols; }
  std::span<const float> image(int64_t i) const {
    return std::span<const float>(images).subspan(i * image_size(), image_size());
  }
};

// A permutation of 0..n-1 that depends only on (seed, epoch): Fisher-Yates driven by
// std::mt19937_64 seeded with seed ^ (epoch * 0x9E3779B97F4A7C15), the index for position i drawn
// as floor(x * (i + 1) / 2^64) from one 64-bit draw x. Unlike std::shuffle (whose algorithm is
// unspecified) every standard library gives the same order, so all ranks agree on it.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// Copies samples indices[0..k) into images [k, C, H, W] and labels [k]. Throws
// hvd::InvalidArgumentError for an index outside the set or a buffer of the wrong size.
void gather_batch(const Dataset& set, std::span<const int64_t> indices, std::span<float> images,
                  std::span<int32_t> labels);

}  // namespace train_cnn::data
