#include "gpu/cudnn_model.h"

#include <algorithm>
#include <string>

#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {
namespace {

model::ModelOptions host_options(model::ModelOptions o) {
  o.blas_threads = 0;  // the host model only draws the initial weights: leave OpenBLAS alone
  return o;
}

model::Conv2dOptions conv1_options(const model::ModelOptions& o) {
  return {.in_channels = o.in_channels,
          .out_channels = o.conv1_channels,
          .kernel = o.kernel,
          .height = o.height,
          .width = o.width,
          .padding = -1};
}
model::MaxPool2dOptions pool1_options(const model::ModelOptions& o) {
  return {.channels = o.conv1_channels, .height = o.height, .width = o.width, .kernel = 2};
}
model::Conv2dOptions conv2_options(const model::ModelOptions& o) {
  return {.in_channels = o.conv1_channels,
          .out_channels = o.conv2_channels,
          .kernel = o.kernel,
          .height = o.height / 2,
          .width = o.width / 2,
          .padding = -1};
}
model::MaxPool2dOptions pool2_options(const model::ModelOptions& o) {
  return {.channels = o.conv2_channels, .height = o.height / 2, .width = o.width / 2, .kernel = 2};
}
int flat_features(const model::ModelOptions& o) {
  return o.conv2_channels * (o.height / 4) * (o.width / 4);
}

}  // namespace

// host_model_ is constructed first: it validates the options with the CPU model's messages before
// any layer (or CUDA) sees them.
CudnnModel::CudnnModel(const model::ModelOptions& options, const GpuOptions& gpu)
    : options_(options),
      host_model_(std::make_unique<model::Model>(host_options(options))),
      context_(gpu),
      conv1_(context_, conv1_options(options)),
      relu1_(context_, options.conv1_channels, options.height, options.width),
      pool1_(context_, pool1_options(options)),
      conv2_(context_, conv2_options(options)),
      relu2_(context_, options.conv2_channels, options.height / 2, options.width / 2),
      pool2_(context_, pool2_options(options)),
      fc1_(context_, {.in_features = flat_features(options), .out_features = options.hidden}),
      relu3_(context_, options.hidden, 1, 1),
      fc2_(context_, {.in_features = options.hidden, .out_features = options.num_classes}),
      loss_(context_, options.num_classes) {
  num_parameters_ = host_model_->num_parameters();
  params_.resize(static_cast<size_t>(num_parameters_));
  grads_.resize(static_cast<size_t>(num_parameters_));
  for (const model::ParameterTensor& p : host_model_->parameters()) {
    parameters_.push_back({p.name, p.shape, params_.data() + p.offset, grads_.data() + p.offset,
                           p.offset, static_cast<int64_t>(p.value.size())});
  }
  auto& p = parameters_;
  conv1_.bind(p[0].value, p[1].value, p[0].gradient, p[1].gradient);
  conv2_.bind(p[2].value, p[3].value, p[2].gradient, p[3].gradient);
  fc1_.bind(p[4].value, p[5].value, p[4].gradient, p[5].gradient);
  fc2_.bind(p[6].value, p[7].value, p[6].gradient, p[7].gradient);
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
}

void CudnnModel::reserve_activations(int batch) {
  if (batch <= capacity_) return;
  context_.synchronize();  // work queued earlier may still use the old buffers
  const auto n = static_cast<size_t>(batch);
  input_.resize(n * conv1_.input_size());
  a1_.resize(n * conv1_.output_size());
  p1_.resize(n * pool1_.output_size());
  a2_.resize(n * conv2_.output_size());
  p2_.resize(n * pool2_.output_size());
  h_.resize(n * fc1_.out_features());
  logits_.resize(n * fc2_.out_features());
  d_logits_.resize(logits_.size());
  d_h_.resize(h_.size());
  d_p2_.resize(p2_.size());
  d_a2_.resize(a2_.size());
  d_p1_.resize(p1_.size());
  d_a1_.resize(a1_.size());
  labels_.resize(n);
  capacity_ = batch;
}

model::LossResult CudnnModel::forward(std::span<const float> images,
                                      std::span<const int32_t> labels, int batch) {
  enqueue_forward(images, labels, batch);
  return last_loss();
}

void CudnnModel::enqueue_forward(std::span<const float> images, std::span<const int32_t> labels,
                                 int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnModel::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  model::check_buffer_size("CudnnModel::forward", "images", static_cast<int64_t>(images.size()),
                           int64_t{batch} * input_size());
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
    CNN_CUDA_CHECK(cudaMemcpyAsync(input_.data(), staged_images_.data(), images.size_bytes(),
                                   cudaMemcpyHostToDevice, context_.stream()));
    CNN_CUDA_CHECK(cudaMemcpyAsync(labels_.data(), staged_labels_.data(), labels.size_bytes(),
                                   cudaMemcpyHostToDevice, context_.stream()));
    CNN_CUDA_CHECK(cudaEventRecord(staged_copied_, context_.stream()));
  }
  run_forward(input_.data(), labels_.data(), batch);
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
  run_forward(images, labels, batch);
}

void CudnnModel::run_forward(const float* images, const int32_t* labels, int batch) {
  batch_ = batch;
  input_ptr_ = images;
  float* a1 = a1_.data();
  float* a2 = a2_.data();
  float* h = h_.data();
  conv1_.forward(images, a1, batch);
  relu1_.forward(a1, a1, batch);
  pool1_.forward(a1, p1_.data(), batch);
  conv2_.forward(p1_.data(), a2, batch);
  relu2_.forward(a2, a2, batch);
  pool2_.forward(a2, p2_.data(), batch);
  fc1_.forward(p2_.data(), h, batch);
  relu3_.forward(h, h, batch);
  fc2_.forward(h, logits_.data(), batch);
  loss_.forward(logits_.data(), labels, batch);
}

model::LossResult CudnnModel::last_loss() {
  if (batch_ < 0) {
    throw hvd::InvalidArgumentError("CudnnModel::last_loss called before forward().");
  }
  return loss_.result();
}

void CudnnModel::backward(const std::function<void(size_t)>& on_grad_ready) {
  if (batch_ < 0) {
    throw hvd::InvalidArgumentError("CudnnModel::backward called before forward().");
  }
  context_.activate();
  const int batch = batch_;
  auto ready = [&](size_t weight_index) {
    if (!on_grad_ready) return;
    on_grad_ready(weight_index + 1);  // bias
    on_grad_ready(weight_index);      // weight
  };
  float* dz = d_logits_.data();
  float* dh = d_h_.data();
  float* dp2 = d_p2_.data();
  float* da2 = d_a2_.data();
  float* dp1 = d_p1_.data();
  float* da1 = d_a1_.data();

  loss_.backward(dz);
  fc2_.backward(h_.data(), dz, dh, batch);
  ready(6);
  relu3_.backward(h_.data(), dh, dh, batch);
  fc1_.backward(p2_.data(), dh, dp2, batch);
  ready(4);
  pool2_.backward(a2_.data(), p2_.data(), dp2, da2, batch);
  relu2_.backward(a2_.data(), da2, da2, batch);
  conv2_.backward(p1_.data(), da2, dp1, batch);
  ready(2);
  pool1_.backward(a1_.data(), p1_.data(), dp1, da1, batch);
  relu1_.backward(a1_.data(), da1, da1, batch);
  conv1_.backward(input_ptr_, da1, nullptr, batch);  // no input gradient
  ready(0);
}

model::Model::Evaluation CudnnModel::evaluate(std::span<const float> images,
                                              std::span<const int32_t> labels, int64_t count,
                                              int batch) {
  model::check_positive("CudnnModel::evaluate", "batch", batch);
  model::check_buffer_size("CudnnModel::evaluate", "images", static_cast<int64_t>(images.size()),
                           count * input_size());
  model::check_buffer_size("CudnnModel::evaluate", "labels", static_cast<int64_t>(labels.size()),
                           count);
  model::Model::Evaluation e;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t start = 0; start < count; start += batch) {
    const int b = static_cast<int>(std::min<int64_t>(batch, count - start));
    const model::LossResult r = forward(images.subspan(start * input_size(), b * input_size()),
                                        labels.subspan(start, b), b);
    loss_sum += r.loss * b;
    correct += r.correct;
  }
  e.count = count;
  if (count > 0) {
    e.loss = loss_sum / count;
    e.accuracy = static_cast<double>(correct) / count;
  }
  return e;
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
  std::vector<float> out(static_cast<size_t>(std::max(batch_, 0)) * num_classes());
  if (out.empty()) return out;
  context_.activate();
  CNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_.data(), out.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
  return out;
}

}  // namespace train_cnn::gpu
