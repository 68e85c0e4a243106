#pragma once

// Mirrored strategies: data-parallel training with one replica per process.
//
// A trainer that uses one reads like a single-process trainer plus a few lines:
//
//   hvd::init();
//   hvd::MirroredStrategy strategy({.base_learning_rate = 0.01, .warmup_steps = 100});
//   std::vector<hvd::NamedTensor> params = {{"w", hvd::as_tensor(std::span<float>(w))}};
//   strategy.broadcast_parameters(params);                        // everyone starts from rank 0
//   // (a LibTorch model: hvd::torch::broadcast_parameters(model->named_parameters()), hvd/torch.h)
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     hvd::Shard shard = strategy.shard(train.size(), batch_per_replica, epoch);
//     for (int64_t step = 0; step < shard.steps; ++step) {
//       auto rows = shard.batch(step);                            // this replica's rows
//       strategy.begin_step();
//       model.backward(rows, [&](int i) {                         // as each gradient is final:
//         strategy.gradient_ready(names[i], grads[i]);            //   its all-reduce starts now
//       });
//       if (strategy.synchronize_gradients())                     // one wait before the update
//         optimizer.step(strategy.learning_rate(global_step++));  // (false: accumulation step)
//     }
//   }
//
// Gradient reduction overlaps the backward pass (like DDP's buckets): gradient_ready() starts the
// tensor's asynchronous all-reduce at once, and the runtime fuses whatever is ready in each cycle.
// With accumulation_steps = k, gradients are summed locally for k steps with no communication and
// all-reduced (averaged over k steps and all replicas) on the k-th.
//
// Every rank must make the same calls in the same order (the names identify tensors).
// Thread safety: one Strategy per training thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hvd/checkpoint.h"
#include "hvd/collectives.h"
#include "hvd/tensor.h"

namespace hvd {

struct StrategyOptions {
  double base_learning_rate = 0.01;  // the learning rate of one replica with its own batch
  bool scale_learning_rate = true;   // linear scaling: base x replicas (Goyal et al., 2017)
  int64_t warmup_steps = 0;          // ramp linearly from base to the scaled rate over these steps
  int accumulation_steps = 1;        // all-reduce every k-th step; sum gradients locally in between
  uint64_t shuffle_seed = 0;         // the shared seed of the per-epoch shuffle
  // The dtype float32 gradients are all-reduced in: kFloat32 (as they are), or kFloat16 /
  // kBFloat16, mixed precision's 16-bit gradient all-reduce: each gradient is rounded to 16 bits
  // (nearest even), all-reduced as such (half the bytes) and written back as float32. On the CPU
  // or a CUDA device (there in device memory, on the gradient's stream); gradients of other dtypes
  // travel as they are.
  DataType gradient_dtype = DataType::kFloat32;
  // true: turns hvd's deterministic reductions on at construction (hvd::set_deterministic(true),
  // for the whole process): training gives the same bits on every run with fusion on. false
  // leaves the setting as it is (HVD_DETERMINISTIC).
  bool deterministic = false;
};

// This replica's share of one epoch: the same number of steps on every replica.
struct Shard {
  int64_t steps = 0;  // steps in the epoch (the remainder of the data set is dropped)
  int64_t batch_per_replica = 0;
  std::vector<int64_t> indices;  // steps x batch_per_replica sample indices, step-major
  // The sample indices of this replica's batch at `step`.
  std::vector<int64_t> batch(int64_t step) const;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  int num_replicas_in_sync() const;
  int replica_id() const;
  const StrategyOptions& options() const { return options_; }

  // Copies rank 0's tensors (parameters, optimizer state) to every rank, in place.
  void broadcast_parameters(const std::vector<NamedTensor>& tensors, int root = 0);

  // Sharding with a per-epoch shuffle of [0, dataset_size) from the shared seed: each step takes
  // the next global batch of batch_per_replica x replicas samples; replica r takes its r-th slice.
  Shard shard(int64_t dataset_size, int64_t batch_per_replica, int64_t epoch) const;
  int64_t global_batch(int64_t batch_per_replica) const {
    return batch_per_replica * num_replicas_in_sync();
  }
  // The learning rate at a (0-based, optimizer) step: scaled and warmed up as the options say.
  double learning_rate(int64_t step) const;

  // Starts a training step (a micro-step when accumulating).
  void begin_step();
  // `grad` (CPU or GPU memory, written by the backward pass) is final for this step. On a step
  // that communicates, its all-reduce starts now and the averaged result is written back to
  // `grad`; on an accumulation step it is added to a local buffer. `grad` must stay valid until
  // synchronize_gradients() returns. A CUDA gradient is final in the order of its TensorRef
  // stream: the accumulation, the 16-bit rounding and the all-reduce follow the work queued there
  // (device kernels, no copy to the host, no host wait), and a device this process cannot reach
  // is an hvd::InvalidArgumentError naming the gradient.
  void gradient_ready(const std::string& name, TensorRef grad);
  // Waits for every all-reduce started this step. Returns true when the gradients hold the
  // averaged values and the optimizer should step; false on an accumulation step. CUDA gradients
  // hold them in the order of their stream (the 16-bit ones are widened there, after the wait).
  bool synchronize_gradients();
  // Seconds spent waiting in synchronize_gradients() since construction (communication not hidden
  // behind the backward pass).
  double wait_seconds() const { return wait_seconds_; }

 protected:
  explicit Strategy(const StrategyOptions& options);

 private:
  bool communicating_step() const;
  // Starts the all-reduce of grad (in place, or through its 16-bit copy: gradient_dtype).
  Handle start_allreduce(const std::string& name, TensorRef grad, double prescale);
  struct DeviceState;
  DeviceState& device_state();

  StrategyOptions options_;
  int64_t micro_step_ = 0;
  std::vector<Handle> pending_;
  std::map<std::string, std::vector<std::byte>> accumulators_;
  std::map<std::string, std::vector<uint16_t>> wire_;  // 16-bit copies (gradient_dtype)
  std::vector<std::pair<TensorRef, std::vector<uint16_t>*>> unpack_;  // written back after waits
  // The same for CUDA gradients (training/device.h): device accumulators and 16-bit copies by
  // name, made at the first one. A copy of the strategy shares them: one per training thread.
  std::shared_ptr<DeviceState> device_;
  double wait_seconds_ = 0;
};

// All replicas on one node. Constructing it when the ranks span several nodes is an error that
// points to MultiWorkerMirroredStrategy.
class MirroredStrategy : public Strategy {
 public:
  explicit MirroredStrategy(const StrategyOptions& options = {});
};

// Replicas on several nodes (also fine on one). Uses the hierarchical all-reduce (reduce-scatter
// in the node, all-reduce across nodes, all-gather in the node) when HVD_HIERARCHICAL_ALLREDUCE is
// set and the cluster is homogeneous; hierarchical() says whether it does.
class MultiWorkerMirroredStrategy : public Strategy {
 public:
  explicit MultiWorkerMirroredStrategy(const StrategyOptions& options = {});
  bool hierarchical() const { return hierarchical_; }

 private:
  bool hierarchical_ = false;
};

}  // namespace hvd
