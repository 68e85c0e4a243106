#include "data/dataset.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "hvd/error.h"

namespace train_cnn::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) {
    throw hvd::InvalidArgumentError("epoch_permutation: n must be >= 0, got " + std::to_string(n) +
                                    ".");
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ULL));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

void gather_batch(const Dataset& set, std::span<const int64_t> indices, std::span<float> images,
                  std::span<int32_t> labels) {
  const int64_t k = static_cast<int64_t>(indices.size());
  const int64_t size = set.image_size();
  if (static_cast<int64_t>(images.size()) != k * size || static_cast<int64_t>(labels.size()) != k) {
    throw hvd::InvalidArgumentError(
        "gather_batch: " + std::to_string(k) + " samples need " + std::to_string(k * size) +
        " image floats and " + std::to_string(k) + " labels, got " + std::to_string(images.size()) +
        " and " + std::to_string(labels.size()) + ".");
  }
  for (int64_t b = 0; b < k; ++b) {
    const int64_t i = indices[b];
    if (i < 0 || i >= set.count) {
      throw hvd::InvalidArgumentError("gather_batch: sample index " + std::to_string(i) +
                                      " is outside the set of " + std::to_string(set.count) +
                                      " samples.");
    }
    std::copy_n(set.images.begin() + i * size, size, images.begin() + b * size);
    labels[b] = set.labels[i];
  }
}

}  // namespace train_cnn::data
