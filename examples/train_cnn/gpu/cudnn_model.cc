#include "gpu/cudnn_model.h"

#include <algorithm>
#include <string>

#include "gpu/kernels.h"
#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {
namespace {

model::ModelOptions host_options(model::ModelOptions o) {
  o.blas_threads = 0;  // the host model only draws the initial weights: leave OpenBLAS alone
  o.precision = model::Precision::kFp32;  // nor does it need a rounded copy of them
  return o;
}

// What the layers of a bf16 / fp16 model bind to (model::CnnGraph::bind reads value and gradient).
struct BoundParameter {
  void* value;
  void* gradient;
};

}  // namespace

// host_model_ is constructed first: it validates the options with the CPU model's messages before
// any layer (or CUDA) sees them.
CudnnModel::CudnnModel(const model::ModelOptions& options, const GpuOptions& gpu)
    : options_(options),
      host_model_(std::make_unique<model::Model>(host_options(options))),
      context_(gpu),
      numerics_{.precision = options.precision},
      graph_(CudnnLayers{context_, &numerics_}, options) {
  num_parameters_ = host_model_->num_parameters();
  params_.resize(static_cast<size_t>(num_parameters_));
  grads_.resize(static_cast<size_t>(num_parameters_));
  for (const model::ParameterTensor& p : host_model_->parameters()) {
    parameters_.push_back({p.name, p.shape, params_.data() + p.offset, grads_.data() + p.offset,
                           p.offset, static_cast<int64_t>(p.value.size())});
  }
  if (!numerics_.reduced()) {
    graph_.bind(parameters_);
  } else {
    // The layers read the 16-bit compute copy and accumulate into the 16-bit gradients; backward()
    // widens those into grads_. Every tensor's offset is that of the flat layout, so with the
    // default shapes each 16-bit slice starts on a 16-byte boundary (tensor-core friendly).
    compute_params_.resize(static_cast<size_t>(num_parameters_));
    compute_grads_.resize(static_cast<size_t>(num_parameters_));
    std::vector<BoundParameter> bound;
    for (const GpuParameterTensor& p : parameters_)
      bound.push_back({compute_params_.data() + p.offset, compute_grads_.data() + p.offset});
    graph_.bind(bound);
    context_.set_fp32_reductions();
  }
  CNN_CUDA_CHECK(cudaEventCreateWithFlags(&staged_copied_, cudaEventDisableTiming));
  // Defined contents before initialize(): zeros, as the CPU model.
  CNN_CUDA_CHECK(
      cudaMemsetAsync(params_.data(), 0, sizeof(float) * num_parameters_, context_.stream()));
  zero_gradients();
}

CudnnModel::~CudnnModel() {
  if (staged_copied_ != nullptr) {
    cudaEventSynchronize(staged_copied_);
    cudaEventDestroy(staged_copied_);
  }
}

void CudnnModel::initialize(uint64_t seed) {
  host_model_->initialize(seed);
  copy_parameters_from_host(host_model_->flat_parameters());
}

void CudnnModel::zero_gradients() {
  context_.activate();
  CNN_CUDA_CHECK(
      cudaMemsetAsync(grads_.data(), 0, sizeof(float) * num_parameters_, context_.stream()));
  if (numerics_.reduced()) {
    // All-zero bits are +0 in bf16 and fp16 too.
    CNN_CUDA_CHECK(cudaMemsetAsync(compute_grads_.data(), 0, sizeof(uint16_t) * num_parameters_,
                                   context_.stream()));
  }
}

const void* CudnnModel::prepare_reduced_forward(const float* images, int batch) {
  const HalfFormat format = half_format(numerics_.precision);
  cast_float_to_half(params_.data(), compute_params_.data(), num_parameters_, format,
                     context_.stream());
  void* input = graph_.input(batch);
  cast_float_to_half(images, input, int64_t{batch} * input_size(), format, context_.stream());
  return input;
}

void CudnnModel::reserve_activations(int batch) {
  if (graph_.fits(batch)) return;
  context_.synchronize();  // work queued earlier may still use the old buffers
  graph_.reserve(batch);
  labels_.resize(static_cast<size_t>(batch));
  if (numerics_.reduced()) input32_.resize(static_cast<size_t>(batch) * input_size());
}

model::LossResult CudnnModel::forward(std::span<const float> images,
                                      std::span<const int32_t> labels, int batch) {
  enqueue_forward(images, labels, batch);
  return last_loss();
}

void CudnnModel::enqueue_forward(std::span<const float> images, std::span<const int32_t> labels,
                                 int batch) {
  model::check_forward_input("CudnnModel::forward", static_cast<int64_t>(images.size()), batch,
                             input_size());
  model::check_buffer_size("CudnnModel::forward", "labels", static_cast<int64_t>(labels.size()),
                           batch);
  for (int n = 0; n < batch; ++n) {
    if (labels[n] < 0 || labels[n] >= options_.num_classes) {
      throw hvd::InvalidArgumentError("SoftmaxCrossEntropy: sample " + std::to_string(n) +
                                      " has label " + std::to_string(labels[n]) + ", expected 0.." +
                                      std::to_string(options_.num_classes - 1) + ".");
    }
  }
  context_.activate();
  reserve_activations(batch);
  if (batch > 0) {
    // The pinned buffers are reused: the previous step's copy out of them must have finished.
    CNN_CUDA_CHECK(cudaEventSynchronize(staged_copied_));
    staged_images_.reserve(images.size());
    staged_labels_.reserve(labels.size());
    std::copy(images.begin(), images.end(), staged_images_.data());
    std::copy(labels.begin(), labels.end(), staged_labels_.data());
    // float32 images: straight into the graph's input, or (bf16 / fp16) into input32_ first.
    void* images_to = numerics_.reduced() ? input32_.data() : graph_.input(batch);
    CNN_CUDA_CHECK(cudaMemcpyAsync(images_to, staged_images_.data(), images.size_bytes(),
                                   cudaMemcpyHostToDevice, context_.stream()));
    CNN_CUDA_CHECK(cudaMemcpyAsync(labels_.data(), staged_labels_.data(), labels.size_bytes(),
                                   cudaMemcpyHostToDevice, context_.stream()));
    CNN_CUDA_CHECK(cudaEventRecord(staged_copied_, context_.stream()));
  }
  if (numerics_.reduced()) {
    graph_.forward(prepare_reduced_forward(input32_.data(), batch), labels_.data(), batch);
    return;
  }
  graph_.forward(graph_.input(batch), labels_.data(), batch);
}

void CudnnModel::enqueue_forward_device(const float* images, const int32_t* labels, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnModel::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch > 0 && (images == nullptr || labels == nullptr)) {
    throw hvd::InvalidArgumentError(
        "CudnnModel::enqueue_forward_device: images and labels must be device pointers, got "
        "null.");
  }
  context_.activate();
  reserve_activations(batch);
  if (numerics_.reduced()) {
    // The 16-bit copy goes to the graph's own input: the caller's buffer is read once, here.
    graph_.forward(prepare_reduced_forward(images, batch), labels, batch);
    return;
  }
  graph_.forward(images, labels, batch);
}

model::LossResult CudnnModel::last_loss() {
  if (graph_.batch() < 0) {
    throw hvd::InvalidArgumentError("CudnnModel::last_loss called before forward().");
  }
  return graph_.loss().result();
}

void CudnnModel::backward(const std::function<void(size_t)>& on_grad_ready) {
  if (graph_.batch() < 0) {
    throw hvd::InvalidArgumentError("CudnnModel::backward called before forward().");
  }
  context_.activate();
  if (!numerics_.reduced()) {
    graph_.backward(on_grad_ready);
    return;
  }
  const HalfFormat format = half_format(numerics_.precision);
  graph_.backward([&](size_t i) {
    // The layer's 16-bit gradient, final in stream order, widened (exactly) into the float32
    // gradient the optimizer and the all-reduce see.
    const GpuParameterTensor& p = parameters_[i];
    cast_half_to_float(compute_grads_.data() + p.offset, p.gradient, p.size, format,
                       context_.stream());
    if (on_grad_ready) on_grad_ready(i);
  });
}

model::Evaluation CudnnModel::evaluate(std::span<const float> images,
                                       std::span<const int32_t> labels, int64_t count, int batch) {
  return model::evaluate_in_chunks("CudnnModel::evaluate", *this, images, labels, count, batch);
}

void CudnnModel::copy_parameters_to_host(std::span<float> out) {
  model::check_buffer_size("CudnnModel", "parameters", static_cast<int64_t>(out.size()),
                           num_parameters_);
  context_.activate();
  CNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), params_.data(), out.size_bytes(),
                                 cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
}

void CudnnModel::copy_parameters_from_host(std::span<const float> in) {
  model::check_buffer_size("CudnnModel", "parameters", static_cast<int64_t>(in.size()),
                           num_parameters_);
  context_.activate();
  CNN_CUDA_CHECK(cudaMemcpyAsync(params_.data(), in.data(), in.size_bytes(), cudaMemcpyHostToDevice,
                                 context_.stream()));
  context_.synchronize();  // the caller may reuse its buffer as soon as this returns
}

void CudnnModel::copy_gradients_to_host(std::span<float> out) {
  model::check_buffer_size("CudnnModel", "gradients", static_cast<int64_t>(out.size()),
                           num_parameters_);
  context_.activate();
  CNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), grads_.data(), out.size_bytes(),
                                 cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
}

std::vector<float> CudnnModel::logits_to_host() {
  std::vector<float> out(static_cast<size_t>(std::max(graph_.batch(), 0)) * num_classes());
  if (out.empty()) return out;
  context_.activate();
  // bf16 / fp16: the loss layer keeps the logits widened to float32.
  const void* logits = numerics_.reduced() ? graph_.loss().float_logits() : graph_.logits();
  CNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits, out.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
  return out;
}

}  // namespace train_cnn::gpu
