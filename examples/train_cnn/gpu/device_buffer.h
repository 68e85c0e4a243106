#pragma once

// Owning RAII handles for the GPU model: device arrays, pinned host arrays, and the cuDNN
// descriptors. Each wraps exactly one create/destroy pair; creation is checked (throws
// hvd::Error), destruction errors are ignored (a destructor cannot report them, and by then the
// first failing call has already thrown).
//
// DeviceArray::resize discards the contents and frees the old allocation with cudaFree, which
// waits for the device; callers resize only between steps (the model grows its buffers when a
// larger batch arrives), never while work that reads the old buffer could still be queued
// without a following synchronisation.

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <utility>

#include "gpu/check.h"

namespace train_cnn::gpu {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) { resize(n); }
  ~DeviceArray() { release(); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // n elements, contents unspecified; n == 0 frees.
  void resize(size_t n) {
    if (n == size_) return;
    release();
    if (n == 0) return;
    void* p = nullptr;
    CNN_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    data_ = static_cast<T*>(p);
    size_ = n;
  }
  // Grows to at least n elements (contents unspecified after growing); never shrinks.
  void reserve(size_t n) {
    if (n > size_) resize(n);
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory: asynchronous copies to and from it overlap with the host.
template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray() { release(); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  void reserve(size_t n) {
    if (n <= size_) return;
    release();
    void* p = nullptr;
    CNN_CUDA_CHECK(cudaMallocHost(&p, n * sizeof(T)));
    data_ = static_cast<T*>(p);
    size_ = n;
  }
  T* data() { return data_; }
  size_t size() const { return size_; }

 private:
  void release() {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

// One cuDNN descriptor type: Handle<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
// cudnnDestroyTensorDescriptor>.
template <class D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { CNN_CUDNN_CHECK(Create(&d_)); }
  ~CudnnDescriptor() {
    if (d_ != nullptr) Destroy(d_);
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  D get() const { return d_; }

 private:
  D d_ = nullptr;
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                         cudnnDestroyTensorDescriptor>;
using FilterDescriptor = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                         cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                    cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                          cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor =
    CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                    cudnnDestroyActivationDescriptor>;

// NCHW [n, c, h, w] of float32, or of the 16-bit type of a mixed-precision model (gpu/data_type.h).
inline void set_nchw(const TensorDescriptor& d, int n, int c, int h, int w,
                     cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  CNN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, type, n, c, h, w));
}

}  // namespace train_cnn::gpu
