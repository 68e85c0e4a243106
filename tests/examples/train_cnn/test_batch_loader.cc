// train_cnn's input pipeline (examples/train_cnn/data/batch_loader.h) on a synthetic set, without
// MPI: every prefetch depth and thread count (with and without a load delay) delivers, step by
// step, exactly the bytes gather_batch gives for the shard's rows; a step range inside the epoch
// starts at its first step; stopping early is clean; bad ranges are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "data/batch_loader.h"
#include "data/dataset.h"
#include "data/synthetic.h"
#include "hvd/error.h"

namespace td = train_cnn::data;

namespace {

// A shard as hvd::Strategy::shard makes it: steps x batch indices, here a fixed scramble.
hvd::Shard make_shard(int64_t set_size, int64_t steps, int64_t batch) {
  hvd::Shard s;
  s.steps = steps;
  s.batch_per_replica = batch;
  for (int64_t i = 0; i < steps * batch; ++i) s.indices.push_back((i * 7919 + 13) % set_size);
  return s;
}

bool same_bytes(std::span<const float> a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}

class BatchLoaderSame : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(BatchLoaderSame, DeliversTheShardsBatchesBitForBit) {
  const auto [prefetch, threads, delay_ms] = GetParam();
  const td::Dataset set = td::make_synthetic(301, 7);
  const hvd::Shard shard = make_shard(set.count, 9, 5);
  auto memory = td::make_host_batch_memory();
  for (const auto& [first, end] : {std::pair<int64_t, int64_t>{0, 9}, {4, 7}, {9, 9}}) {
    td::BatchLoader loader(set, shard, first, end,
                           {.prefetch = prefetch, .threads = threads, .delay_ms = delay_ms},
                           *memory);
    EXPECT_EQ(loader.batches(), end - first);
    for (int64_t step = first; step < end; ++step) {
      std::vector<float> want_images(static_cast<size_t>(5 * set.image_size()));
      std::vector<int32_t> want_labels(5);
      td::gather_batch(set, shard.batch(step), want_images, want_labels);
      const td::BatchView b = loader.next();
      ASSERT_EQ(b.size, 5);
      EXPECT_TRUE(same_bytes(b.images, want_images)) << "step " << step;
      EXPECT_EQ(std::vector<int32_t>(b.labels.begin(), b.labels.end()), want_labels)
          << "step " << step;
      EXPECT_EQ(b.device_images, nullptr);
    }
    EXPECT_THROW(loader.next(), hvd::InvalidArgumentError) << "past the last step";
  }
}

INSTANTIATE_TEST_SUITE_P(PrefetchThreadsDelay, BatchLoaderSame,
                         ::testing::Values(std::make_tuple(0, 1, 0), std::make_tuple(1, 1, 0),
                                           std::make_tuple(3, 1, 1), std::make_tuple(3, 2, 0),
                                           std::make_tuple(2, 3, 2)));

TEST(BatchLoader, StoppingEarlyIsClean) {
  const td::Dataset set = td::make_synthetic(200, 3);
  const hvd::Shard shard = make_shard(set.count, 40, 4);
  auto memory = td::make_host_batch_memory();
  for (int round = 0; round < 3; ++round) {
    td::BatchLoader loader(set, shard, 0, 40, {.prefetch = 4, .threads = 2, .delay_ms = 1},
                           *memory);
    loader.next();
    loader.next();
  }  // each loader is destroyed with batches in flight; the memory is reused by the next one
  SUCCEED();
}

TEST(BatchLoader, DelayCountsAsDataWaitWithoutPrefetch) {
  const td::Dataset set = td::make_synthetic(64, 3);
  const hvd::Shard shard = make_shard(set.count, 4, 8);
  auto memory = td::make_host_batch_memory();
  td::BatchLoader loader(set, shard, 0, 4, {.prefetch = 0, .delay_ms = 5}, *memory);
  for (int i = 0; i < 4; ++i) loader.next();
  EXPECT_GE(loader.wait_seconds(), 0.020) << "4 batches x 5 ms loaded by the training thread";
}

TEST(BatchLoader, BadRangesAndOptionsAreRefused) {
  const td::Dataset set = td::make_synthetic(64, 3);
  const hvd::Shard shard = make_shard(set.count, 4, 8);
  auto memory = td::make_host_batch_memory();
  try {
    td::BatchLoader loader(set, shard, 2, 5, {}, *memory);
    FAIL() << "a range past the epoch was accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(), "BatchLoader: steps [2, 5) are not within the epoch's 4 steps.");
  }
  EXPECT_THROW(td::BatchLoader(set, shard, 3, 2, {}, *memory), hvd::InvalidArgumentError);
  EXPECT_THROW(td::BatchLoader(set, shard, 0, 4, {.prefetch = -1}, *memory),
               hvd::InvalidArgumentError);
  EXPECT_THROW(td::BatchLoader(set, shard, 0, 4, {.delay_ms = -2}, *memory),
               hvd::InvalidArgumentError);
}

}  // namespace
