// Mirrored strategies (hvd/strategy.h): sharding, learning-rate scaling, parameter broadcast and
// gradient reduction that overlaps the backward pass, on top of the public collectives.
#include <chrono>
#include <cstring>
#include <numeric>

#include "hvd/error.h"
#include "hvd/hvd.h"
#include "common/dtype_math.h"
#include "common/config.h"
#include "common/logging.h"
#include "training/device.h"

namespace hvd {
namespace {

// splitmix64: a tiny, fully specified generator, so every rank and every platform shuffles alike
// (std::shuffle's use of the engine is implementation-defined).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<int64_t> Shard::batch(int64_t step) const {
  if (step < 0 || step >= steps)
    throw InvalidArgumentError("Shard::batch(" + std::to_string(step) + "): the epoch has " +
                               std::to_string(steps) + " steps (0.." + std::to_string(steps - 1) +
                               ").");
  auto first = indices.begin() + step * batch_per_replica;
  return std::vector<int64_t>(first, first + batch_per_replica);
}

Strategy::Strategy(const StrategyOptions& options) : options_(options) {
  if (options_.accumulation_steps < 1)
    throw InvalidArgumentError("StrategyOptions::accumulation_steps is " +
                               std::to_string(options_.accumulation_steps) +
                               ": it must be 1 (no accumulation) or more.");
  if (options_.warmup_steps < 0)
    throw InvalidArgumentError("StrategyOptions::warmup_steps is " +
                               std::to_string(options_.warmup_steps) + ": it must be 0 or more.");
  const DataType g = options_.gradient_dtype;
  if (g != DataType::kFloat32 && g != DataType::kFloat16 && g != DataType::kBFloat16)
    throw InvalidArgumentError(std::string("StrategyOptions::gradient_dtype is ") + dtype_name(g) +
                               ": it must be float32, float16 or bfloat16.");
  (void)hvd::size();  // throws the usual error before init()
  if (options_.deterministic) set_deterministic(true);
}

int Strategy::num_replicas_in_sync() const { return hvd::size(); }
int Strategy::replica_id() const { return hvd::rank(); }

void Strategy::broadcast_parameters(const std::vector<NamedTensor>& tensors, int root) {
  std::vector<Handle> handles;
  handles.reserve(tensors.size());
  for (const auto& t : tensors)
    handles.push_back(broadcast_async(t.tensor, root, "bcast." + t.name));
  for (auto& h : handles) h.wait();
}

Shard Strategy::shard(int64_t dataset_size, int64_t batch_per_replica, int64_t epoch) const {
  if (batch_per_replica <= 0)
    throw InvalidArgumentError("shard(): batch_per_replica is " +
                               std::to_string(batch_per_replica) + ": it must be at least 1.");
  if (dataset_size < 0) throw InvalidArgumentError("shard(): dataset_size is negative.");
  const int replicas = num_replicas_in_sync();
  const int64_t global = batch_per_replica * replicas;
  std::vector<int64_t> order(static_cast<size_t>(dataset_size));
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = options_.shuffle_seed * 0x100000001B3ull + static_cast<uint64_t>(epoch) + 1;
  for (int64_t i = dataset_size - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  Shard s;
  s.steps = dataset_size / global;
  s.batch_per_replica = batch_per_replica;
  s.indices.reserve(static_cast<size_t>(s.steps * batch_per_replica));
  const int64_t offset = static_cast<int64_t>(replica_id()) * batch_per_replica;
  for (int64_t step = 0; step < s.steps; ++step)
    for (int64_t i = 0; i < batch_per_replica; ++i)
      s.indices.push_back(order[step * global + offset + i]);
  return s;
}

double Strategy::learning_rate(int64_t step) const {
  const double base = options_.base_learning_rate;
  const double target = options_.scale_learning_rate ? base * num_replicas_in_sync() : base;
  if (options_.warmup_steps <= 0 || step >= options_.warmup_steps) return target;
  const double frac = static_cast<double>(step) / static_cast<double>(options_.warmup_steps);
  return base + (target - base) * frac;
}

bool Strategy::communicating_step() const {
  return (micro_step_ % options_.accumulation_steps) == options_.accumulation_steps - 1;
}

void Strategy::begin_step() {
  if (!pending_.empty())
    throw InvalidArgumentError(
        "begin_step() called while gradients of the previous step are still in flight: call "
        "synchronize_gradients() once per step, after the backward pass.");
}

struct Strategy::DeviceState {
  struct Accumulator {
    training::DeviceBuffer memory;
    size_t bytes = 0;  // in use (zeroed when it changes, as the CPU accumulator)
  };
  std::map<std::string, Accumulator> accumulators;
  std::map<std::string, training::DeviceBuffer> wire;  // 16-bit copies (gradient_dtype)
  std::vector<std::pair<TensorRef, void*>> unpack;     // written back after the waits
};

Strategy::DeviceState& Strategy::device_state() {
  if (!device_) device_ = std::make_shared<DeviceState>();
  return *device_;
}

void Strategy::gradient_ready(const std::string& name, TensorRef grad) {
  training::require_device(grad, "gradient '" + name + "'");
  const int k = options_.accumulation_steps;
  if (k > 1 && grad.device().kind != Device::kCPU) {
    // The CPU path below on the device, in the gradient's stream order.
    const training::Place at = training::place_of(grad);
    auto& acc = device_state().accumulators[name];
    const size_t bytes = grad.size_bytes();
    void* sum = acc.memory.get(grad.device(), bytes);
    if (acc.bytes != bytes) {
      training::zero(at, sum, bytes);
      acc.bytes = bytes;
    }
    training::accumulate(at, grad.dtype(), grad.data(), sum, grad.num_elements());
    if (!communicating_step()) return;
    training::copy(at, sum, grad.data(), bytes);
    training::zero(at, sum, bytes);
    pending_.push_back(start_allreduce(name, grad, 1.0 / k));
    return;
  }
  if (k > 1) {
    auto& acc = accumulators_[name];
    const size_t bytes = grad.size_bytes();
    const size_t n = static_cast<size_t>(grad.num_elements());
    if (acc.size() != bytes) acc.assign(bytes, std::byte{0});
    hvd::reduce_buffers(grad.dtype(), ReduceOp::kSum, grad.data(), acc.data(), n);
    if (!communicating_step()) return;
    std::memcpy(grad.data(), acc.data(), bytes);
    std::fill(acc.begin(), acc.end(), std::byte{0});
    pending_.push_back(start_allreduce(name, grad, 1.0 / k));
    return;
  }
  pending_.push_back(start_allreduce(name, grad, 1.0));
}

Handle Strategy::start_allreduce(const std::string& name, TensorRef grad, double prescale) {
  const DataType wire = options_.gradient_dtype;
  if (wire == DataType::kFloat32 || grad.dtype() != DataType::kFloat32)
    return allreduce_async(grad, grad, "grad." + name, ReduceOp::kAverage, prescale, 1.0);
  if (grad.device().kind != Device::kCPU) {
    // Rounded once on the device (the prescale applied in float), reduced in 16 bits in the
    // gradient's stream order, widened back after the wait.
    DeviceState& d = device_state();
    void* bits = d.wire[name].get(grad.device(), static_cast<size_t>(grad.num_elements()) * 2);
    training::cast(training::place_of(grad), DataType::kFloat32, wire, grad.data(), bits,
                   grad.num_elements(), prescale);
    d.unpack.emplace_back(grad, bits);
    const TensorRef w(bits, wire, grad.shape(), grad.device(), grad.stream());
    return allreduce_async(w, w, "grad." + name, ReduceOp::kAverage);
  }
  // Rounded once (the prescale applied in double first), reduced in 16 bits, widened back after
  // the wait (synchronize_gradients).
  std::vector<uint16_t>& bits = wire_[name];
  const size_t n = static_cast<size_t>(grad.num_elements());
  bits.resize(n);
  compress_copy(DataType::kFloat32, wire, grad.data(), bits.data(), n, prescale);
  unpack_.emplace_back(grad, &bits);
  const TensorRef w(bits.data(), wire, grad.shape());
  return allreduce_async(w, w, "grad." + name, ReduceOp::kAverage);
}

bool Strategy::synchronize_gradients() {
  const bool stepping = communicating_step();
  auto start = std::chrono::steady_clock::now();
  std::string first_error;
  for (auto& h : pending_) {
    try {
      h.wait();
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  pending_.clear();
  if (first_error.empty())
    for (auto& [grad, bits] : unpack_)
      decompress_copy(options_.gradient_dtype, DataType::kFloat32, bits->data(), grad.data(),
                      bits->size(), 1.0);
  unpack_.clear();
  if (device_) {
    // After wait(), the 16-bit result is valid in its stream's order (docs/gpu.md): widened there.
    if (first_error.empty())
      for (auto& [grad, bits] : device_->unpack)
        training::cast(training::place_of(grad), options_.gradient_dtype, DataType::kFloat32, bits,
                       grad.data(), grad.num_elements(), 1.0);
    device_->unpack.clear();
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++micro_step_;
  if (!first_error.empty()) throw CommunicationError("gradient reduction failed: " + first_error);
  return stepping;
}

MirroredStrategy::MirroredStrategy(const StrategyOptions& options) : Strategy(options) {
  if (hvd::cross_size() > 1)
    throw InvalidArgumentError("MirroredStrategy needs every replica on one node, but the " +
                               std::to_string(hvd::size()) + " ranks span " +
                               std::to_string(hvd::cross_size()) +
                               " nodes: use hvd::MultiWorkerMirroredStrategy for several nodes.");
}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const StrategyOptions& options)
    : Strategy(options) {
  Config config = load_config(process_env_lookup());
  hierarchical_ = config.hierarchical_allreduce && hvd::cross_size() > 1 && hvd::is_homogeneous();
  if (config.hierarchical_allreduce && !hierarchical_ && hvd::rank() == 0)
    HVD_LOG(Info) << "MultiWorkerMirroredStrategy: hierarchical all-reduce not used ("
                  << (hvd::cross_size() <= 1 ? "one node" : "nodes have different numbers of ranks")
                  << ").";
}

}  // namespace hvd
