#pragma once

// Where train_cnn's input batches live between the loader and the model (data/batch_loader.h).
//
// A BatchMemory holds `slots` batch buffers, reused in a ring by the prefetch queue. On the CPU
// (make_host_batch_memory) they are host vectors and the model reads them in place. On a GPU
// (gpu/batch_staging.h) they are pinned host buffers, each with a device copy that the loader
// thread starts on a copy stream of its own as soon as the batch is gathered; the model's stream
// waits for it with an event, so the copy of batch k+1 overlaps the compute of batch k.
//
// Who calls what, on which thread (slot s = one buffer):
//   allocate(slots, batch, image_size)  the training thread, before any loader runs
//   before_fill(s)                      a loader thread, before writing the host buffers of s
//                                       (GPU: waits until their previous copy has left them)
//   host_images(s), host_labels(s)      a loader thread fills them ([batch, C, H, W], [batch])
//   after_fill(s, n)                    a loader thread, after: starts the copy of n samples
//   view(s, n)                          the training thread, when the step takes the batch
//   release(s)                          the training thread, once everything that reads s has
//                                       been queued (GPU: the compute stream passes an event
//                                       before the next copy into s may start)
// Different slots may be in different loader threads at once; one slot is in one thread at a time.

#include <cstdint>
#include <memory>
#include <span>

namespace train_cnn::data {

// One batch as the model takes it.
struct BatchView {
  int64_t size = 0;                 // samples
  std::span<const float> images;    // host, [size, C, H, W]
  std::span<const int32_t> labels;  // host, [size]
  // GPU staging only: the device copy, complete once the compute stream has waited on ready
  // (a cudaEvent_t); null on the host.
  const float* device_images = nullptr;
  const int32_t* device_labels = nullptr;
  void* ready = nullptr;
  int slot = -1;  // which buffer (for BatchMemory::release)
};

class BatchMemory {
 public:
  virtual ~BatchMemory() = default;
  virtual void allocate(int slots, int64_t batch, int64_t image_size) = 0;
  virtual std::span<float> host_images(int slot) = 0;
  virtual std::span<int32_t> host_labels(int slot) = 0;
  virtual void before_fill(int /*slot*/) {}
  virtual void after_fill(int /*slot*/, int64_t /*samples*/) {}
  virtual BatchView view(int slot, int64_t samples) = 0;
  virtual void release(int /*slot*/) {}
  // For the startup line: "host", "pinned host + device copy stream".
  virtual const char* description() const = 0;
};

// Host vectors: what the CPU model reads, and what a GPU model copies itself (no prefetch).
std::unique_ptr<BatchMemory> make_host_batch_memory();

}  // namespace train_cnn::data
