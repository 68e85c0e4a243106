#pragma once

// train_cnn's input pipeline: the batches of one epoch's shard, prepared by loader threads ahead
// of the training step (hvd::PrefetchQueue, hvd/prefetch.h) into a BatchMemory (batch_memory.h).
//
// Batch k of the loader is the step first_step + k of the epoch: the rows shard.batch(step) of the
// training set (this rank's slice of the global batch, in the strategy's per-epoch shuffle from
// the shared seed), gathered into [batch, C, H, W] images (already decoded and normalised to
// [0, 1] when the set was loaded) and [batch] labels, after delay_ms of sleep, which stands in for
// a slow reader or decoder (--data-delay-ms) so that the overlap shows. The batches and their
// order depend only on the shard and the step range, never on prefetch or threads: a run with
// --prefetch 0 and one with --prefetch 3 train on the same bytes and end with the same weights.
//
// prefetch 0 loads each batch on the training thread inside next(), as train_cnn did before it had
// a pipeline. wait_seconds() is the time next() held the step up: all of the loading with
// prefetch 0, only what the loaders could not hide otherwise.
//
// The set, the memory and the loader's own copy of the shard must outlive the loader; destroying
// it mid-epoch (--max-steps, an exception) stops its threads cleanly. Training thread only.

#include <cstdint>

#include "data/batch_memory.h"
#include "data/dataset.h"
#include "hvd/prefetch.h"
#include "hvd/strategy.h"

namespace train_cnn::data {

struct LoaderOptions {
  int prefetch = 2;  // batches prepared ahead of the step; 0: on the training thread, when needed
  int threads = 1;   // loader threads (with prefetch > 0)
  int delay_ms = 0;  // extra time to load each batch
};

class BatchLoader {
 public:
  // The batches of steps [first_step, end_step) of the epoch whose shard is `shard`. Allocates
  // prefetch + 1 batch buffers in memory and starts the loaders.
  BatchLoader(const Dataset& set, const hvd::Shard& shard, int64_t first_step, int64_t end_step,
              const LoaderOptions& options, BatchMemory& memory);
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;
  ~BatchLoader();

  // The next step's batch, valid until the next call (the previous one's buffer is given back).
  // Throws what loading it threw, and hvd::InvalidArgumentError past end_step.
  BatchView next();
  int64_t batches() const { return queue_.count(); }
  double wait_seconds() const { return queue_.wait_seconds(); }

 private:
  void fill(int64_t k, int slot);

  const Dataset& set_;
  hvd::Shard shard_;
  int64_t first_step_;
  LoaderOptions options_;
  BatchMemory& memory_;
  int held_ = -1;             // the slot of the batch the step holds
  hvd::PrefetchQueue queue_;  // last: its loaders stop before the members above go
};

}  // namespace train_cnn::data
