#include "data/batch_loader.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hvd/error.h"

namespace train_cnn::data {
namespace {

// Checks the step range and allocates the buffers; returns the number of batches. Runs before the
// queue starts its loaders (it initialises the queue's count).
int64_t prepare(const Dataset& set, const hvd::Shard& shard, int64_t first_step, int64_t end_step,
                const LoaderOptions& options, BatchMemory& memory) {
  if (first_step < 0 || end_step < first_step || end_step > shard.steps)
    throw hvd::InvalidArgumentError("BatchLoader: steps [" + std::to_string(first_step) + ", " +
                                    std::to_string(end_step) + ") are not within the epoch's " +
                                    std::to_string(shard.steps) + " steps.");
  if (options.delay_ms < 0)
    throw hvd::InvalidArgumentError("BatchLoader: delay_ms is " + std::to_string(options.delay_ms) +
                                    ": it must be 0 or more.");
  const int slots = hvd::PrefetchQueue::slots_for({options.prefetch, options.threads});
  memory.allocate(slots, shard.batch_per_replica, set.image_size());
  return end_step - first_step;
}

}  // namespace

std::unique_ptr<BatchMemory> make_host_batch_memory() {
  class HostBatchMemory final : public BatchMemory {
   public:
    void allocate(int slots, int64_t batch, int64_t image_size) override {
      images_.resize(static_cast<size_t>(slots));
      labels_.resize(static_cast<size_t>(slots));
      for (auto& v : images_) v.resize(static_cast<size_t>(batch * image_size));
      for (auto& v : labels_) v.resize(static_cast<size_t>(batch));
      image_size_ = image_size;
    }
    std::span<float> host_images(int slot) override { return images_.at(slot); }
    std::span<int32_t> host_labels(int slot) override { return labels_.at(slot); }
    BatchView view(int slot, int64_t samples) override {
      BatchView v;
      v.size = samples;
      v.images = std::span<const float>(images_.at(slot)).first(samples * image_size_);
      v.labels = std::span<const int32_t>(labels_.at(slot)).first(samples);
      v.slot = slot;
      return v;
    }
    const char* description() const override { return "host memory"; }

   private:
    std::vector<std::vector<float>> images_;
    std::vector<std::vector<int32_t>> labels_;
    int64_t image_size_ = 0;
  };
  return std::make_unique<HostBatchMemory>();
}

BatchLoader::BatchLoader(const Dataset& set, const hvd::Shard& shard, int64_t first_step,
                         int64_t end_step, const LoaderOptions& options, BatchMemory& memory)
    : set_(set),
      shard_(shard),
      first_step_(first_step),
      options_(options),
      memory_(memory),
      queue_(prepare(set, shard, first_step, end_step, options, memory),
             [this](int64_t k, int slot) { fill(k, slot); }, {options.prefetch, options.threads}) {}

BatchLoader::~BatchLoader() {
  // The step's work on the batch it holds has been queued: give the buffer back (on a GPU this
  // orders a later refill after the compute that reads it).
  if (held_ >= 0) memory_.release(held_);
}

void BatchLoader::fill(int64_t k, int slot) {
  const std::vector<int64_t> rows = shard_.batch(first_step_ + k);
  if (options_.delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.delay_ms));
  memory_.before_fill(slot);
  const int64_t n = static_cast<int64_t>(rows.size());
  gather_batch(set_, rows, memory_.host_images(slot).first(n * set_.image_size()),
               memory_.host_labels(slot).first(n));
  memory_.after_fill(slot, n);
}

BatchView BatchLoader::next() {
  if (held_ >= 0) memory_.release(held_);
  held_ = -1;
  const int slot = queue_.next();
  if (slot < 0)
    throw hvd::InvalidArgumentError("BatchLoader::next: all " + std::to_string(queue_.count()) +
                                    " batches were taken already.");
  held_ = slot;
  return memory_.view(slot, shard_.batch_per_replica);
}

}  // namespace train_cnn::data
