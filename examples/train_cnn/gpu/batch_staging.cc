#include "gpu/batch_staging.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gpu/check.h"
#include "gpu/device_buffer.h"

namespace train_cnn::gpu {
namespace {

// One slot: the pinned host batch, its device copy and the two events of batch_staging.h.
struct StagedSlot {
  PinnedArray<float> host_images;
  PinnedArray<int32_t> host_labels;
  DeviceArray<float> images;
  DeviceArray<int32_t> labels;
  cudaEvent_t copied = nullptr;    // recorded on the copy stream after the copy
  cudaEvent_t consumed = nullptr;  // recorded on the compute stream when the step gave it back

  StagedSlot() {
    CNN_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    CNN_CUDA_CHECK(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
  }
  ~StagedSlot() {
    // Nothing may still read or write the buffers when they are freed.
    cudaEventSynchronize(copied);
    cudaEventSynchronize(consumed);
    cudaEventDestroy(copied);
    cudaEventDestroy(consumed);
  }
  StagedSlot(const StagedSlot&) = delete;
  StagedSlot& operator=(const StagedSlot&) = delete;
};

class StagedBatchMemory final : public data::BatchMemory {
 public:
  StagedBatchMemory(int device, cudaStream_t compute) : device_(device), compute_(compute) {
    CNN_CUDA_CHECK(cudaSetDevice(device_));
    // Non-blocking: not serialised with the legacy default stream (nor with the compute stream).
    CNN_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  }
  ~StagedBatchMemory() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(copy_);
    slots_.clear();
    cudaStreamDestroy(copy_);
  }

  void allocate(int slots, int64_t batch, int64_t image_size) override {
    CNN_CUDA_CHECK(cudaSetDevice(device_));
    if (static_cast<int>(slots_.size()) == slots && batch_ == batch && image_size_ == image_size)
      return;  // the next epoch's loader: same buffers
    CNN_CUDA_CHECK(cudaStreamSynchronize(copy_));
    CNN_CUDA_CHECK(cudaStreamSynchronize(compute_));
    slots_.clear();
    batch_ = batch;
    image_size_ = image_size;
    for (int s = 0; s < slots; ++s) {
      auto slot = std::make_unique<StagedSlot>();
      slot->host_images.reserve(static_cast<size_t>(batch * image_size));
      slot->host_labels.reserve(static_cast<size_t>(batch));
      slot->images.resize(static_cast<size_t>(batch * image_size));
      slot->labels.resize(static_cast<size_t>(batch));
      slots_.push_back(std::move(slot));
    }
  }
  std::span<float> host_images(int slot) override {
    return {at(slot).host_images.data(), static_cast<size_t>(batch_ * image_size_)};
  }
  std::span<int32_t> host_labels(int slot) override {
    return {at(slot).host_labels.data(), static_cast<size_t>(batch_)};
  }
  void before_fill(int slot) override {
    CNN_CUDA_CHECK(cudaSetDevice(device_));  // a loader thread
    CNN_CUDA_CHECK(cudaEventSynchronize(at(slot).copied));
  }
  void after_fill(int slot, int64_t samples) override {
    StagedSlot& s = at(slot);
    CNN_CUDA_CHECK(cudaStreamWaitEvent(copy_, s.consumed, 0));
    CNN_CUDA_CHECK(cudaMemcpyAsync(s.images.data(), s.host_images.data(),
                                   sizeof(float) * samples * image_size_, cudaMemcpyHostToDevice,
                                   copy_));
    CNN_CUDA_CHECK(cudaMemcpyAsync(s.labels.data(), s.host_labels.data(), sizeof(int32_t) * samples,
                                   cudaMemcpyHostToDevice, copy_));
    CNN_CUDA_CHECK(cudaEventRecord(s.copied, copy_));
  }
  data::BatchView view(int slot, int64_t samples) override {
    StagedSlot& s = at(slot);
    data::BatchView v;
    v.size = samples;
    v.images = {s.host_images.data(), static_cast<size_t>(samples * image_size_)};
    v.labels = {s.host_labels.data(), static_cast<size_t>(samples)};
    v.device_images = s.images.data();
    v.device_labels = s.labels.data();
    v.ready = static_cast<void*>(s.copied);
    v.slot = slot;
    return v;
  }
  void release(int slot) override {
    CNN_CUDA_CHECK(cudaSetDevice(device_));
    CNN_CUDA_CHECK(cudaEventRecord(at(slot).consumed, compute_));
  }
  const char* description() const override {
    return "pinned host buffers, device copies on their own stream";
  }

 private:
  StagedSlot& at(int slot) { return *slots_.at(static_cast<size_t>(slot)); }

  int device_;
  cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  std::vector<std::unique_ptr<StagedSlot>> slots_;
  int64_t batch_ = 0, image_size_ = 0;
};

}  // namespace

std::unique_ptr<data::BatchMemory> make_staged_batch_memory(int device, cudaStream_t compute) {
  return std::make_unique<StagedBatchMemory>(device, compute);
}

}  // namespace train_cnn::gpu
