#pragma once

// The Fashion-MNIST CNN as a graph over a layer set, written once for the CPU model
// (model::Model, model/model.h, layers CpuLayers) and the GPU model (gpu::CudnnModel,
// gpu/cudnn_model.h, layers gpu::CudnnLayers):
//   input [N, C, H, W]
//   conv1 KxK, conv1_channels, same padding -> ReLU -> max-pool 2x2   [N, conv1_channels, H/2, W/2]
//   conv2 KxK, conv2_channels, same padding -> ReLU -> max-pool 2x2   [N, conv2_channels, H/4, W/4]
//   fc1 conv2_channels*(H/4)*(W/4) -> hidden -> ReLU
//   fc2 hidden -> num_classes logits -> softmax cross-entropy (mean over the batch)
// The layer order, the activation and gradient buffers and their shapes, the parameter binding
// and the backward order (with the on_grad_ready calls) live here only; a model keeps what is its
// own: parameter storage, initialisation, and how the input reaches input().
//
// Recomputation (ModelOptions::recompute, model/recompute.h): the graph is three blocks (conv1,
// conv2, fc); a recomputed block keeps only its input and output and backward() re-runs the
// block's conv/fc + ReLU just before the block's backward. The gradients are bitwise the same;
// the activation memory held at once falls (activation_memory(), counted by an ActivationLedger,
// model/activation_ledger.h, as the graph runs).
//
// The blocks' inner activations (a1, a2, h: the conv/ReLU and fc1/ReLU outputs) share one buffer
// used as a stack, since their lifetimes nest: a kept one lives from its block's forward to its
// block's backward, and the blocks' backward passes run in reverse order; a recomputed one lives
// only while its block runs, once in each pass. So each takes the place above the kept ones of the
// blocks before it: a kept one pushes, a recomputed one only borrows the top. Kept everywhere, that
// is a1, a2, h back to back (the memory of separate buffers); with conv1 recomputed, a2 and h
// reuse a1's place, so the buffer shrinks to the largest of a1 and a2 + h.
//
// A layer set L provides
//   types   Conv, Pool, Dense, Relu, Loss (the layers), Buffer (owning storage of floats with
//           resize(n) and data()), View / ConstView (what the layers take: spans or pointers;
//           void pointers when the values may be 16-bit)
//   member  value_bytes() (optional; 4 without it): the bytes of one stored activation value. The
//           GPU layers of a bf16 / fp16 model store 2-byte values (gpu/cudnn_model.h); the buffers
//           then hold that many bytes per value (rounded up to whole floats) and the ledger counts
//           them. The CPU emulation of 16-bit storage keeps floats (4)
//   members conv(Conv2dOptions), pool(MaxPool2dOptions), dense(DenseOptions),
//           relu(channels, height, width), loss(num_classes): the layers, returned by value (they
//           need be neither copyable nor movable)
//   static  view(buffer, n): the first n floats of a buffer as a View (ConstView when const)
// and its layers take the same arguments in the same order:
//   conv / dense  bind(w, b, dw, db); forward(x, y, batch); backward(x, dy, dx, batch) (dx may be
//                 View{}: no input gradient)
//   pool          forward(x, y, batch); backward(x, y, dy, dx, batch)
//   relu          forward(x, y, batch); backward(y, dy, dx, batch)
//   loss          forward(logits, labels, batch) (its result is forward()'s); backward(dlogits)

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hvd/error.h"
#include "model/activation_ledger.h"
#include "model/check.h"
#include "model/conv2d.h"
#include "model/dense.h"
#include "model/maxpool2d.h"
#include "model/precision.h"
#include "model/recompute.h"
#include "model/softmax_cross_entropy.h"

namespace train_cnn::model {

struct ModelOptions {
  int in_channels = 1;
  int height = 28;
  int width = 28;
  int conv1_channels = 32;
  int conv2_channels = 64;
  int kernel = 5;  // odd: same padding
  int hidden = 512;
  int num_classes = 10;
  int blas_threads = 1;  // CPU model: applied to OpenBLAS by the constructor; 0 leaves it as it is
  RecomputeBlocks recompute = {};  // blocks recomputed during backward (model/recompute.h)
  // The 16-bit storage of mixed precision (model/precision.h): emulated by the CPU model, real on
  // the cuDNN model (16-bit activations and gradients on tensor cores, gpu/cudnn_model.h).
  Precision precision = Precision::kFp32;
};

// Mean loss and accuracy over a whole set (Model::evaluate, CudnnModel::evaluate).
struct Evaluation {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t count = 0;
};

// A parameter tensor's name and PyTorch-style shape (conv [out,in,kh,kw], dense [out,in]).
struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// The parameters in forward order; their flat layout is this order, back to back:
//   0 conv1.weight  1 conv1.bias  2 conv2.weight  3 conv2.bias
//   4 fc1.weight    5 fc1.bias    6 fc2.weight    7 fc2.bias
inline std::vector<ParameterSpec> parameter_specs(const ModelOptions& o) {
  const int64_t k = o.kernel;
  return {
      {"conv1.weight", {o.conv1_channels, o.in_channels, k, k}},
      {"conv1.bias", {o.conv1_channels}},
      {"conv2.weight", {o.conv2_channels, o.conv1_channels, k, k}},
      {"conv2.bias", {o.conv2_channels}},
      {"fc1.weight", {o.hidden, int64_t{o.conv2_channels} * (o.height / 4) * (o.width / 4)}},
      {"fc1.bias", {o.hidden}},
      {"fc2.weight", {o.num_classes, o.hidden}},
      {"fc2.bias", {o.num_classes}},
  };
}

// who: "batch must be >= 0" and the images' size for batch images of input_size floats.
inline void check_forward_input(const char* who, int64_t images, int batch, int64_t input_size) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError(std::string(who) + ": batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  check_buffer_size(who, "images", images, int64_t{batch} * input_size);
}

// Model::evaluate and CudnnModel::evaluate: net.forward() over count host images in chunks of
// batch, the loss weighted by the chunk sizes.
template <class Net>
Evaluation evaluate_in_chunks(const char* who, Net& net, std::span<const float> images,
                              std::span<const int32_t> labels, int64_t count, int batch) {
  const int64_t input_size = net.input_size();
  check_positive(who, "batch", batch);
  check_buffer_size(who, "images", static_cast<int64_t>(images.size()), count * input_size);
  check_buffer_size(who, "labels", static_cast<int64_t>(labels.size()), count);
  Evaluation e;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t start = 0; start < count; start += batch) {
    const int b = static_cast<int>(std::min<int64_t>(batch, count - start));
    const LossResult r = net.forward(images.subspan(start * input_size, b * input_size),
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

template <class L>
class CnnGraph {
 public:
  using View = typename L::View;
  using ConstView = typename L::ConstView;

  // options must be valid (the CPU model's constructor checks them).
  CnnGraph(const L& layers, const ModelOptions& o)
      : conv1_(layers.conv({.in_channels = o.in_channels,
                            .out_channels = o.conv1_channels,
                            .kernel = o.kernel,
                            .height = o.height,
                            .width = o.width,
                            .padding = -1})),
        relu1_(layers.relu(o.conv1_channels, o.height, o.width)),
        pool1_(layers.pool(
            {.channels = o.conv1_channels, .height = o.height, .width = o.width, .kernel = 2})),
        conv2_(layers.conv({.in_channels = o.conv1_channels,
                            .out_channels = o.conv2_channels,
                            .kernel = o.kernel,
                            .height = o.height / 2,
                            .width = o.width / 2,
                            .padding = -1})),
        relu2_(layers.relu(o.conv2_channels, o.height / 2, o.width / 2)),
        pool2_(layers.pool({.channels = o.conv2_channels,
                            .height = o.height / 2,
                            .width = o.width / 2,
                            .kernel = 2})),
        fc1_(layers.dense({.in_features = o.conv2_channels * (o.height / 4) * (o.width / 4),
                           .out_features = o.hidden})),
        relu3_(layers.relu(o.hidden, 1, 1)),
        fc2_(layers.dense({.in_features = o.hidden, .out_features = o.num_classes})),
        loss_(layers.loss(o.num_classes)),
        recompute_(o.recompute),
        value_bytes_(value_bytes_of(layers)) {
    // The inner activations' places on the stack, in values per image (see the file comment).
    int64_t top = 0;
    auto place = [&](int64_t per_sample, bool recomputed) {
      const int64_t at = top;
      inner_.per_sample = std::max(inner_.per_sample, at + per_sample);
      if (!recomputed) top += per_sample;
      return at;
    };
    inner_.a1_at = place(conv1_.output_size(), recompute_.conv1);
    inner_.a2_at = place(conv2_.output_size(), recompute_.conv2);
    inner_.h_at = place(fc1_.out_features(), recompute_.fc);
  }

  CnnGraph(const CnnGraph&) = delete;
  CnnGraph& operator=(const CnnGraph&) = delete;

  // The layers with parameters (their sizes and fan-ins, for initialisation).
  const typename L::Conv& conv1() const { return conv1_; }
  const typename L::Conv& conv2() const { return conv2_; }
  const typename L::Dense& fc1() const { return fc1_; }
  const typename L::Dense& fc2() const { return fc2_; }
  int64_t input_size() const { return conv1_.input_size(); }  // floats per image

  // Binds the layers to the 8 tensors of parameter_specs() order; p[i].value and p[i].gradient
  // are what the layers' bind() takes.
  template <class Parameters>
  void bind(Parameters& p) {
    conv1_.bind(p[0].value, p[1].value, p[0].gradient, p[1].gradient);
    conv2_.bind(p[2].value, p[3].value, p[2].gradient, p[3].gradient);
    fc1_.bind(p[4].value, p[5].value, p[4].gradient, p[5].gradient);
    fc2_.bind(p[6].value, p[7].value, p[6].gradient, p[7].gradient);
  }

  // Whether the buffers hold batch images; reserve() grows them (contents lost), never shrinks.
  bool fits(int batch) const { return batch <= capacity_; }
  void reserve(int batch) {
    if (fits(batch)) return;
    auto grow = [&](typename L::Buffer& b, int64_t per_sample) {
      b.resize(buffer_floats(floats(per_sample, batch)));
    };
    grow(input_, conv1_.input_size());
    grow(inner_.buffer, inner_.per_sample);  // a1, a2, h (the stack of the file comment)
    grow(d_a1_, conv1_.output_size());
    for (auto* b : {&p1_, &d_p1_}) grow(*b, pool1_.output_size());
    grow(d_a2_, conv2_.output_size());
    for (auto* b : {&p2_, &d_p2_}) grow(*b, pool2_.output_size());
    grow(d_h_, fc1_.out_features());
    for (auto* b : {&logits_, &d_logits_}) grow(*b, fc2_.out_features());
    capacity_ = batch;
  }

  // Room for batch images (after reserve(batch)): a model may place its input here, in the
  // layers' storage type (the layer set's value_bytes() per value).
  View input(int batch) { return L::view(input_, floats(conv1_.input_size(), batch)); }

  // Runs the forward pass of images [batch, C, H, W] (used in place: unchanged until backward())
  // and returns the loss layer's forward(logits, labels, batch). After reserve(batch).
  // A recomputed block's inner activation is dropped after its block (recompute_).
  template <class Labels>
  auto forward(ConstView images, Labels labels, int batch) {
    batch_ = batch;
    images_ = images;
    const Views v = views(batch);
    ledger_.begin_step();
    hold(kInput, conv1_.input_size());
    for (int b = 0; b < kBlocks; ++b) forward_block(b, v);
    return loss_.forward(v.z, labels, batch);
  }

  // ---- Pipeline stages (examples/pipeline_cnn): the graph as kBlocks blocks, run a range at a
  // time on one rank. Block 0: conv1, ReLU, pool1 (in: the images; out: p1); block 1: conv2, ReLU,
  // pool2 (in: p1; out: p2); block 2: fc1, ReLU, fc2 (in: p2; out: the logits). forward() and
  // backward() are the three blocks in a row, so a range's results are those of the whole graph.
  static constexpr int kBlocks = 3;
  // Values per image entering block b (1 or 2): what one stage sends the next, and (as its
  // gradient) the next sends back.
  int64_t boundary_size(int b) const {
    return b == 1 ? pool1_.output_size() : pool2_.output_size();
  }
  // The activation entering block b (1 or 2) and its gradient, [batch, ...] (after reserve(batch)).
  View boundary(int b, int batch) {
    return L::view(b == 1 ? p1_ : p2_, floats(boundary_size(b), batch));
  }
  View boundary_grad(int b, int batch) {
    return L::view(b == 1 ? d_p1_ : d_p2_, floats(boundary_size(b), batch));
  }
  // Forward of blocks first..last on batch images: `images` when first is 0, else boundary(first)
  // as the caller filled it. The output is in boundary(last + 1), or the logits when last is 2.
  void forward_blocks(int first, int last, ConstView images, int batch) {
    batch_ = batch;
    images_ = images;
    const Views v = views(batch);
    ledger_.begin_step();
    if (first == 0) hold(kInput, conv1_.input_size());
    for (int b = first; b <= last; ++b) forward_block(b, v);
  }
  // Backward of blocks last..first of the last forward_blocks(), adding into the bound gradients:
  // from the loss when last is 2 (loss().forward() ran), else from boundary_grad(last + 1) as the
  // caller filled it. Leaves the gradient of block first's input in boundary_grad(first) when first
  // is not 0. on_grad_ready as for backward().
  void backward_blocks(int first, int last, const std::function<void(size_t)>& on_grad_ready) {
    const Views v = views(batch_);
    if (last == kBlocks - 1) loss_.backward(v.dz);
    for (int b = last; b >= first; --b) backward_block(b, v, on_grad_ready);
  }

  // The batch of the last forward(); -1 before the first.
  int batch() const { return batch_; }
  // Logits of the last forward(), [batch, num_classes].
  ConstView logits() const {
    return L::view(logits_, floats(fc2_.out_features(), std::max(batch_, 0)));
  }
  typename L::Loss& loss() { return loss_; }

  // Back-propagates the last forward() (batch() >= 0), adding into the bound gradients. Calls
  // on_grad_ready(i) for each parameter once, 7, 6, ..., 0, as soon as the layer's backward that
  // makes gradient i final has been issued.
  void backward(const std::function<void(size_t)>& on_grad_ready) {
    backward_blocks(0, kBlocks - 1, on_grad_ready);
  }

  const RecomputeBlocks& recompute() const { return recompute_; }

  // The activation memory of the last step as the ledger counted it (the input images, the
  // conv/ReLU, pooling, hidden and logit activations; not the layers' own state such as the CPU
  // pooling's winner indices, nor the gradient buffers), and the bytes the activation buffers have
  // allocated.
  ActivationMemory activation_memory() const {
    int64_t reserved = 0;
    for (const auto* b : {&input_, &p1_, &p2_, &logits_, &inner_.buffer})
      reserved += static_cast<int64_t>(b->size() * sizeof(float));
    return {.peak_bytes = ledger_.peak_bytes(),
            .held_bytes = ledger_.held_bytes(),
            .reserved_bytes = reserved};
  }

 private:
  // The ledger's slots: the activations.
  enum Slot : int { kInput, kA1, kP1, kA2, kP2, kH, kLogits };
  static_assert(kLogits < ActivationLedger::kSlots);

  // The buffers' first batch images.
  struct Views {
    View a1, p1, a2, p2, h, z;  // activations (z: logits)
    View da1, dp1, da2, dp2, dh, dz;
  };
  static size_t floats(int64_t per_sample, int batch) {
    return static_cast<size_t>(per_sample) * static_cast<size_t>(batch);
  }
  static size_t value_bytes_of(const L& layers) {
    if constexpr (requires { layers.value_bytes(); }) {
      return layers.value_bytes();
    } else {
      return sizeof(float);
    }
  }
  // The floats a buffer of n stored values takes (n itself for float values).
  size_t buffer_floats(size_t n) const {
    return (n * value_bytes_ + sizeof(float) - 1) / sizeof(float);
  }
  Views views(int batch) {
    auto v = [&](typename L::Buffer& b, int64_t per_sample) {
      return L::view(b, floats(per_sample, batch));
    };
    // An inner activation: per_sample values per image from place at (per image) of inner_.
    auto inner = [&](int64_t at, int64_t per_sample) {
      const size_t offset = floats(at, batch);
      const View all = L::view(inner_.buffer, offset + floats(per_sample, batch));
      if constexpr (std::is_pointer_v<View>) {
        // Values of value_bytes_ each: advance by bytes (View may be void*).
        using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<View>>,
                                        const unsigned char, unsigned char>;
        return reinterpret_cast<View>(reinterpret_cast<Byte*>(all) + offset * value_bytes_);
      } else {
        return all.subspan(offset);
      }
    };
    return {inner(inner_.a1_at, conv1_.output_size()),
            v(p1_, pool1_.output_size()),
            inner(inner_.a2_at, conv2_.output_size()),
            v(p2_, pool2_.output_size()),
            inner(inner_.h_at, fc1_.out_features()),
            v(logits_, fc2_.out_features()),
            v(d_a1_, conv1_.output_size()),
            v(d_p1_, pool1_.output_size()),
            v(d_a2_, conv2_.output_size()),
            v(d_p2_, pool2_.output_size()),
            v(d_h_, fc1_.out_features()),
            v(d_logits_, fc2_.out_features())};
  }

  // Block b's forward: its inner forward, then its output (an activation is dropped from the ledger
  // after its last reader; a recomputed block's inner activation after its block).
  void forward_block(int b, const Views& v) {
    switch (b) {
      case 0:
        conv1_inner(v);
        hold(kP1, pool1_.output_size());
        pool1_.forward(v.a1, v.p1, batch_);
        if (recompute_.conv1) ledger_.drop(kA1);
        return;
      case 1:
        conv2_inner(v);
        hold(kP2, pool2_.output_size());
        pool2_.forward(v.a2, v.p2, batch_);
        if (recompute_.conv2) ledger_.drop(kA2);
        return;
      default:
        fc_inner(v);
        hold(kLogits, fc2_.out_features());
        fc2_.forward(v.h, v.z, batch_);
        if (recompute_.fc) ledger_.drop(kH);
        return;
    }
  }
  // Block b's backward: re-run its inner forward when it is recomputed, then its backward. The
  // logits stay held (logits()).
  void backward_block(int b, const Views& v, const std::function<void(size_t)>& on_grad_ready) {
    const int batch = batch_;
    auto ready = [&](size_t weight_index) {
      if (!on_grad_ready) return;
      on_grad_ready(weight_index + 1);  // bias
      on_grad_ready(weight_index);      // weight
    };
    switch (b) {
      case 2:
        if (recompute_.fc) fc_inner(v);
        fc2_.backward(v.h, v.dz, v.dh, batch);
        ready(6);
        relu3_.backward(v.h, v.dh, v.dh, batch);
        ledger_.drop(kH);
        fc1_.backward(v.p2, v.dh, v.dp2, batch);
        ready(4);
        return;
      case 1:
        if (recompute_.conv2) conv2_inner(v);
        pool2_.backward(v.a2, v.p2, v.dp2, v.da2, batch);
        ledger_.drop(kP2);
        relu2_.backward(v.a2, v.da2, v.da2, batch);
        ledger_.drop(kA2);
        conv2_.backward(v.p1, v.da2, v.dp1, batch);
        ready(2);
        return;
      default:
        if (recompute_.conv1) conv1_inner(v);
        pool1_.backward(v.a1, v.p1, v.dp1, v.da1, batch);
        ledger_.drop(kP1);
        relu1_.backward(v.a1, v.da1, v.da1, batch);
        ledger_.drop(kA1);
        conv1_.backward(images_, v.da1, View{}, batch);  // no input gradient
        ledger_.drop(kInput);
        ready(0);
        return;
    }
  }

  // The ledger holds per_sample values of the current batch in slot.
  void hold(Slot slot, int64_t per_sample) {
    ledger_.hold(slot, static_cast<int64_t>(floats(per_sample, batch_) * value_bytes_));
  }
  // The blocks' inner forward passes, in forward() and again in backward() for a recomputed block;
  // the ReLUs run in place, so a1, a2 and h hold the ReLU outputs.
  void conv1_inner(const Views& v) {
    hold(kA1, conv1_.output_size());
    conv1_.forward(images_, v.a1, batch_);
    relu1_.forward(v.a1, v.a1, batch_);
  }
  void conv2_inner(const Views& v) {
    hold(kA2, conv2_.output_size());
    conv2_.forward(v.p1, v.a2, batch_);
    relu2_.forward(v.a2, v.a2, batch_);
  }
  void fc_inner(const Views& v) {
    hold(kH, fc1_.out_features());
    fc1_.forward(v.p2, v.h, batch_);
    relu3_.forward(v.h, v.h, batch_);
  }

  typename L::Conv conv1_;
  typename L::Relu relu1_;
  typename L::Pool pool1_;
  typename L::Conv conv2_;
  typename L::Relu relu2_;
  typename L::Pool pool2_;
  typename L::Dense fc1_;
  typename L::Relu relu3_;
  typename L::Dense fc2_;
  typename L::Loss loss_;
  RecomputeBlocks recompute_;
  size_t value_bytes_;  // bytes per stored activation value
  ActivationLedger ledger_;

  int batch_ = -1;
  int capacity_ = 0;
  ConstView images_{};  // the last forward()'s input
  // Activations [capacity, ...] (ReLU in place on a1, a2, h) and gradient scratch.
  typename L::Buffer input_, p1_, p2_, logits_;
  struct {
    typename L::Buffer buffer;  // [capacity, per_sample]
    int64_t per_sample = 0;
    int64_t a1_at = 0, a2_at = 0, h_at = 0;  // values per image below each activation's place
  } inner_;
  typename L::Buffer d_logits_, d_h_, d_p2_, d_a2_, d_p1_, d_a1_;
};

}  // namespace train_cnn::model
