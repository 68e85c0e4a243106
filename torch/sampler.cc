// hvd::torch::DistributedSampler: this rank's shard of a dataset, reshuffled per epoch from a seed
// shared by every rank.
#include <ATen/ATen.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "internal.h"

namespace hvd::torch {

// ---- DistributedSampler -------------------------------------------------------------------------

DistributedSampler::DistributedSampler(std::size_t size)
    : DistributedSampler(size, hvd::size(), hvd::rank()) {}

DistributedSampler::DistributedSampler(std::size_t size, int num_replicas, int rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : size_(size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas)
    throw InvalidArgumentError("hvd::torch::DistributedSampler: rank " + std::to_string(rank) +
                               " of " + std::to_string(num_replicas) +
                               " replicas: pass num_replicas >= 1 and 0 <= rank < num_replicas.");
}

std::size_t DistributedSampler::local_size() const {
  const auto n = static_cast<std::size_t>(num_replicas_);
  return drop_last_ ? size_ / n : (size_ + n - 1) / n;
}

void DistributedSampler::populate() {
  std::vector<std::size_t> perm(size_);
  for (std::size_t i = 0; i < size_; ++i) perm[i] = i;
  if (shuffle_ && size_ > 1) {
    // Fisher-Yates from a 64-bit Mersenne twister seeded with (seed, epoch); unbiased bounded draws
    // by rejection, so that the order is the same on every platform and standard library.
    std::mt19937_64 rng(seed_ ^ (0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(epoch_) + 1)));
    for (std::size_t i = size_ - 1; i > 0; --i) {
      const uint64_t bound = static_cast<uint64_t>(i) + 1;
      const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
      uint64_t r;
      do r = rng();
      while (r >= limit);
      std::swap(perm[i], perm[static_cast<std::size_t>(r % bound)]);
    }
  }
  const auto n = static_cast<std::size_t>(num_replicas_);
  const std::size_t local = local_size();
  indices_.clear();
  indices_.reserve(local);
  for (std::size_t j = 0; j < local; ++j) {
    const std::size_t pos = static_cast<std::size_t>(rank_) + n * j;  // < local * n
    if (size_ == 0) break;
    indices_.push_back(perm[pos % size_]);  // positions past the end wrap to the start (padding)
  }
  position_ = 0;
}

void DistributedSampler::reset(c10::optional<std::size_t> new_size) {
  if (new_size) size_ = *new_size;
  epoch_ = next_epoch_++;
  populate();
}

c10::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (position_ >= indices_.size()) return c10::nullopt;
  const std::size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<std::size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                                 indices_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

void DistributedSampler::save(::torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", at::tensor(static_cast<int64_t>(epoch_)), /*is_buffer=*/true);
  archive.write("next_epoch", at::tensor(static_cast<int64_t>(next_epoch_)), true);
  archive.write("position", at::tensor(static_cast<int64_t>(position_)), true);
}

void DistributedSampler::load(::torch::serialize::InputArchive& archive) {
  at::Tensor epoch = at::empty({}, at::kLong), next_epoch = at::empty({}, at::kLong),
             position = at::empty({}, at::kLong);
  archive.read("epoch", epoch, true);
  archive.read("next_epoch", next_epoch, true);
  archive.read("position", position, true);
  epoch_ = static_cast<std::size_t>(epoch.item<int64_t>());
  next_epoch_ = static_cast<std::size_t>(next_epoch.item<int64_t>());
  populate();
  position_ = std::min(indices_.size(), static_cast<std::size_t>(position.item<int64_t>()));
}

}  // namespace hvd::torch
