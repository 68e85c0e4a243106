#pragma once

// hvd::torch: hvd for LibTorch, shaped like Horovod's PyTorch API.
//
//   #include <hvd/torch.h>                                   // link hvd::torch
//   hvd::init();
//   hvd::torch::broadcast_parameters(model->named_parameters(), /*root=*/0);
//   hvd::torch::broadcast_optimizer_state(optimizer, 0);
//   hvd::torch::DistributedOptimizer opt(optimizer, model->named_parameters());
//   opt.zero_grad(); loss.backward(); opt.step();            // gradients averaged over the ranks
//
// This header includes <torch/torch.h>. A separate, optional library: CMake builds it when
// find_package(Torch) succeeds, and an installed hvd exports it as a component
// (find_package(hvd REQUIRED COMPONENTS torch), target hvd::torch). The core library (hvd::hvd)
// does not depend on Torch. docs/libtorch.md has the guide.
//
// Tensors: every dtype hvd and torch share (torch::kUInt8, kInt8, kInt32, kInt64, kFloat16,
// kBFloat16, kFloat32, kFloat64), dense (strided) and contiguous, on the CPU or on a CUDA device
// (hvd then reads the tensor on its device's current stream, c10::cuda::getCurrentCUDAStream).
// Anything else (bool, int16, complex, quantized or sparse tensors, a non-contiguous view, another
// device, an undefined tensor) is an hvd::InvalidArgumentError that names the tensor and the fix.
// When only some ranks pass such a tensor, those ranks throw that message and the other ranks'
// operation fails too (instead of waiting forever), with the core's message naming the rank
// ("rank 2: the tensor has dtype 127, which is not a DataType ..."): hvd::torch submits a request
// the core rejects on every rank. The async functions throw these errors from the call itself.
// CUDA: compiled only against a CUDA build of LibTorch (HVD_TORCH_WITH_CUDA; Debian's LibTorch
// is CPU-only); tests/torch/test_torch_cuda.cc (label gpu) runs it on a GPU (docs/libtorch.md).
//
// Results are not differentiable (no autograd graph through a collective). Names: every rank
// passes the same name for the same operation, as with the core API (hvd/collectives.h).
//
// Inside namespace hvd::torch, `torch::` would name this namespace: this header spells LibTorch's
// namespace `::torch::`.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>  // all of LibTorch's C++ API, as a LibTorch program includes it

#include "hvd/checkpoint.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "hvd/hvd.h"
#include "hvd/loss_scaler.h"
#include "hvd/tensor.h"

namespace hvd::torch {

using NamedTensors = ::torch::OrderedDict<std::string, at::Tensor>;

// ---- Tensors -----------------------------------------------------------------------------------

// The hvd DataType of a torch dtype; hvd::InvalidArgumentError for a dtype hvd has no type for
// (bool, int16, complex, quantized, ...).
DataType dtype_of(c10::ScalarType type);
// The torch dtype of an hvd DataType.
c10::ScalarType scalar_type_of(DataType dtype);
// A view of `tensor` for the core API (hvd/collectives.h), after the checks above; `name` is what
// an error calls the tensor. The tensor must stay alive and unchanged while an operation uses it.
TensorRef tensor_ref(const at::Tensor& tensor, const std::string& name = "tensor");
// Named tensors for hvd::Checkpointer, each named prefix + its name (checks as above): CPU
// tensors, and CUDA tensors where hvd was built with CUDA (views on the current stream, which the
// Checkpointer waits for before it copies them).
std::vector<NamedTensor> named_tensors(const NamedTensors& tensors, const std::string& prefix = "");

// ---- Collectives on tensors -------------------------------------------------------------------

// An operation in flight (cheap to copy; copies share it). wait() throws hvd::Error as
// hvd::Handle::wait() does. After wait(): output() is the result of a single-tensor operation (the
// tensor itself for an in-place one, a new tensor on the input's device otherwise), outputs() the
// results of a grouped allreduce, received_splits() the rows received from each rank (alltoall).
// The handle keeps the tensors it uses alive; when the last copy of a handle that was never waited
// for is destroyed, it waits for the operation (ignoring its errors) before releasing them.
struct HandleImpl;
class Handle {
 public:
  Handle() = default;
  bool valid() const;
  bool ready() const;
  void wait();
  at::Tensor output();
  std::vector<at::Tensor> outputs();
  const std::vector<int64_t>& received_splits() const;
  // The core operation (invalid for a default-constructed handle).
  hvd::Handle core() const;

 private:
  friend struct HandleAccess;
  std::shared_ptr<HandleImpl> impl_;
};
// wait(), then output().
at::Tensor synchronize(Handle& handle);

// Every collective takes a trailing process set (hvd/process_set.h; default: the global set): the
// operation runs over its members, as ProcessSet's own (roots are global ranks).
// allreduce: postscale * op over ranks of (prescale * tensor); kAverage divides by the ranks.
Handle allreduce_async(const at::Tensor& tensor, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0,
                       const ProcessSet& process_set = global_process_set());
at::Tensor allreduce(const at::Tensor& tensor, const std::string& name,
                     ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                     double postscale_factor = 1.0,
                     const ProcessSet& process_set = global_process_set());
// In place: the result replaces the tensor's values.
Handle allreduce_async_(const at::Tensor& tensor, const std::string& name,
                        ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                        double postscale_factor = 1.0,
                        const ProcessSet& process_set = global_process_set());
const at::Tensor& allreduce_(const at::Tensor& tensor, const std::string& name,
                             ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                             double postscale_factor = 1.0,
                             const ProcessSet& process_set = global_process_set());

// One fused operation for all tensors (members named name.0, name.1, ...); all on one device.
Handle grouped_allreduce_async(const std::vector<at::Tensor>& tensors, const std::string& name,
                               ReduceOp op = ReduceOp::kAverage,
                               const ProcessSet& process_set = global_process_set());
std::vector<at::Tensor> grouped_allreduce(const std::vector<at::Tensor>& tensors,
                                          const std::string& name, ReduceOp op = ReduceOp::kAverage,
                                          const ProcessSet& process_set = global_process_set());
Handle grouped_allreduce_async_(const std::vector<at::Tensor>& tensors, const std::string& name,
                                ReduceOp op = ReduceOp::kAverage,
                                const ProcessSet& process_set = global_process_set());
const std::vector<at::Tensor>& grouped_allreduce_(
    const std::vector<at::Tensor>& tensors, const std::string& name,
    ReduceOp op = ReduceOp::kAverage, const ProcessSet& process_set = global_process_set());

// Concatenation along the first dimension in rank order (the first dimension may differ per rank).
Handle allgather_async(const at::Tensor& tensor, const std::string& name,
                       const ProcessSet& process_set = global_process_set());
at::Tensor allgather(const at::Tensor& tensor, const std::string& name,
                     const ProcessSet& process_set = global_process_set());

// Root's tensor on every rank: broadcast_ writes it into `tensor`; broadcast returns a copy and
// leaves `tensor` unchanged.
Handle broadcast_async_(const at::Tensor& tensor, int root, const std::string& name,
                        const ProcessSet& process_set = global_process_set());
const at::Tensor& broadcast_(const at::Tensor& tensor, int root, const std::string& name,
                             const ProcessSet& process_set = global_process_set());
Handle broadcast_async(const at::Tensor& tensor, int root, const std::string& name,
                       const ProcessSet& process_set = global_process_set());
at::Tensor broadcast(const at::Tensor& tensor, int root, const std::string& name,
                     const ProcessSet& process_set = global_process_set());

// splits[r] rows of the first dimension go to rank r (empty: equal parts); the result holds the
// rows received, in rank order; received_splits (optional) gets how many came from each rank.
Handle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                      const std::string& name,
                      const ProcessSet& process_set = global_process_set());
at::Tensor alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                    const std::string& name, std::vector<int64_t>* received_splits = nullptr,
                    const ProcessSet& process_set = global_process_set());

// Reduce over ranks, then rank r keeps its block of the first dimension (the first rows % size
// ranks one row more).
Handle reducescatter_async(const at::Tensor& tensor, const std::string& name,
                           ReduceOp op = ReduceOp::kAverage,
                           const ProcessSet& process_set = global_process_set());
at::Tensor reducescatter(const at::Tensor& tensor, const std::string& name,
                         ReduceOp op = ReduceOp::kAverage,
                         const ProcessSet& process_set = global_process_set());

// ---- Models and optimizers ---------------------------------------------------------------------

// Copies root's tensors into every rank's, in place, by name (every rank passes the same names,
// shapes and dtypes): module->named_parameters(), or a module (its parameters and buffers).
void broadcast_parameters(const NamedTensors& named_tensors, int root = 0);
void broadcast_parameters(const std::vector<std::pair<std::string, at::Tensor>>& named_tensors,
                          int root = 0);
void broadcast_parameters(const ::torch::nn::Module& module, int root = 0);
template <class M>
void broadcast_parameters(const ::torch::nn::ModuleHolder<M>& module, int root = 0) {
  broadcast_parameters(*module, root);
}

// Makes every rank's optimizer state and hyperparameters root's: for each parameter (in the order
// of the param groups) the per-parameter state (SGD: momentum_buffer; Adam, AdamW: step, exp_avg,
// exp_avg_sq, max_exp_avg_sq; Adagrad: step, sum; RMSprop: step, square_avg, momentum_buffer,
// grad_avg) and every param group's options (lr, momentum, betas, ...). A rank without state for
// a parameter (no step taken yet) gets root's, created; a rank with state where root has none
// loses it. Every rank passes the same kind of optimizer over the same parameters (else every rank
// throws hvd::InvalidArgumentError). Other optimizers (LBFGS, your own) are an
// InvalidArgumentError. A DistributedOptimizer stands for the optimizer it wraps.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root = 0);

enum class Compression {
  kNone,
  kFP16,  // float32/float64 gradients travel as float16 (cast before, cast back after)
};

struct DistributedOptimizerOptions {
  ReduceOp op = ReduceOp::kAverage;  // kAverage (mean over ranks) or kSum
  Compression compression = Compression::kNone;
  // Backward passes per step(): gradients add up locally (as torch does) and are all-reduced on
  // the last pass. To average over the passes too, divide the loss by this number. More passes
  // before step() still train correctly (step() all-reduces the sum, after backward(); a note says
  // so once); a zero_grad() of any kind starts the count again.
  int backward_passes_per_step = 1;
  // true: each gradient's all-reduce starts from an autograd hook as soon as backward() has
  // produced it, overlapping the rest of the backward pass. false: step() starts them all after
  // backward() (the baseline that CommunicationStats compares against).
  bool overlap = true;
  // Put before every parameter name in the all-reduces' names ("grad.<prefix><name>"): two live
  // DistributedOptimizers whose names coincide (two models' "0.weight") need it on one of them.
  std::string name_prefix = "";
  // The ranks that average the gradients (hvd/process_set.h): a data-parallel group inside a
  // larger job, such as one pipeline stage's replicas. Default-constructed: the global set.
  ProcessSet process_set = {};
  // true: turns hvd's deterministic reductions on at construction (hvd::set_deterministic(true),
  // for the whole process): the same bits on every run with fusion on. false leaves the setting as
  // it is (HVD_DETERMINISTIC).
  bool deterministic = false;
};

// Where step time goes (seconds, summed over steps since construction or reset_stats()).
struct CommunicationStats {
  int64_t steps = 0;
  double step_seconds = 0;  // between consecutive step() returns (forward, backward, update, ...)
  double wait_seconds =
      0;  // in step()/synchronize(), starting the remaining all-reduces and waiting
  double hook_seconds =
      0;  // in the autograd hooks (copying each gradient and starting its all-reduce)
  // All-reduces a hook started and a later zero_grad() or backward pass made useless (another
  // model's loss back-propagated through this one, more passes than backward_passes_per_step):
  // wasted communication.
  int64_t dropped_allreduces = 0;
  // The share of step time spent waiting for communication.
  double wait_share() const { return step_seconds > 0 ? wait_seconds / step_seconds : 0.0; }
};

// Wraps any torch::optim::Optimizer: step() waits for every gradient's all-reduce (averaged or
// summed over ranks), writes the results into the parameters' .grad and steps the wrapped
// optimizer. It is a torch::optim::Optimizer itself (pass it wherever one is expected): its
// param_groups() hold the same parameters; its learning rates and the wrapped optimizer's are kept
// in sync at each step() (set either; setting both differently between two steps is an error),
// other hyperparameters are read from the wrapped optimizer. The state lives in the wrapped
// optimizer. Tensor names come from named_parameters (identical on every rank); every parameter
// of the optimizer must be in it (unnamed form: "param.<group>.<index>"; pass its options as
// DistributedOptimizerOptions{...}, a bare {...} is ambiguous between the two constructors).
//
// Parameters without a gradient in a step (unused by this rank's forward pass) are all-reduced
// from zeros in step(), and their .grad is set, so that every rank submits the same tensors.
// Gradient clipping and other edits between backward() and step(): call synchronize() first, edit,
// then step() (it does not all-reduce again). step() takes no closure (LBFGS-style optimizers are
// not supported). Not copyable or movable (the hooks point at it); destroying it removes them.
//
// Several models (docs/libtorch.md, "Several models and optimizers"): step() all-reduces what
// .grad holds, whatever produced it. A zero_grad() of any kind (this one, the wrapped optimizer's,
// the module's, with or without set_to_none) starts a new accumulation: an all-reduce a hook
// started before it (another model's loss back-propagated through this one) is dropped, at the
// cost of its communication. Parameter names must not coincide with those of another live
// DistributedOptimizer (an InvalidArgumentError at construction): see name_prefix.
class DistributedOptimizer : public ::torch::optim::Optimizer {
 public:
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, const NamedTensors& named_parameters,
                       DistributedOptimizerOptions options = {});
  explicit DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                DistributedOptimizerOptions options = {});
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;
  DistributedOptimizer(DistributedOptimizer&&) = delete;
  DistributedOptimizer& operator=(DistributedOptimizer&&) = delete;

  at::Tensor step(LossClosure closure = nullptr) override;
  // Waits for every gradient's all-reduce (starting those not started) and writes the results to
  // .grad; the next step() then only steps the wrapped optimizer. Once per accumulation: called
  // again with no backward pass in between, it does nothing (edits to .grad since are kept).
  void synchronize();
  // Zeros the gradients and starts a new accumulation (all-reduces in flight are dropped). Through
  // a torch::optim::Optimizer& the base class's zero_grad() runs, on the same tensors, which the
  // next backward pass notices.
  void zero_grad();

  ::torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& distributed_options() const { return options_; }
  const CommunicationStats& stats() const { return stats_; }
  void reset_stats();

  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

 private:
  struct Slot;
  void init(const NamedTensors* named_parameters);
  void on_gradient(std::size_t slot, const at::Tensor& grad);
  void on_backward_end(std::size_t slot);
  void start(Slot& slot, const at::Tensor& total);
  void drop(Slot& slot);
  void sync_options();

  ::torch::optim::Optimizer& optimizer_;
  DistributedOptimizerOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<double> synced_lr_;
  CommunicationStats stats_;
  double last_step_end_ = 0;
  bool synchronized_ = false;
  std::atomic<bool> noted_extra_passes_{false};  // set from the hooks
};

// Rank-0 checkpoints of a model (parameters and buffers) and optimizer (state and options) in
// hvd::Checkpointer's safetensors files (names "model.<name>", "optimizer.*"). Collective, like
// hvd::Checkpointer: rank 0 writes and reads, restore_latest() fills every rank. Tensors on a GPU
// go through CPU copies. A restore creates the optimizer state the checkpoint has (also on ranks
// that have taken no step) and removes state it does not have, so a resumed run continues exactly.
// save_async() returns once rank 0 holds a copy and writes the file while training goes on; the
// next call (or wait()) throws a failed write on every rank (hvd::Checkpointer::save_async).
class Checkpointer {
 public:
  explicit Checkpointer(std::string dir, int keep_last = 3)
      : checkpointer_(std::move(dir), keep_last) {}
  void save(int64_t step, const ::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
            const std::map<std::string, std::string>& metadata = {});
  void save(int64_t step, const ::torch::nn::Module& model,
            const std::map<std::string, std::string>& metadata = {});
  void save_async(int64_t step, const ::torch::nn::Module& model,
                  ::torch::optim::Optimizer& optimizer,
                  const std::map<std::string, std::string>& metadata = {});
  void save_async(int64_t step, const ::torch::nn::Module& model,
                  const std::map<std::string, std::string>& metadata = {});
  // Collective: the last save_async()'s file is durable, or its failure is thrown on every rank.
  void wait() { checkpointer_.wait(); }
  // The step of the checkpoint restored, or std::nullopt (nothing changed) when dir has none.
  std::optional<int64_t> restore_latest(::torch::nn::Module& model,
                                        ::torch::optim::Optimizer& optimizer);
  std::optional<int64_t> restore_latest(::torch::nn::Module& model);

  template <class M>
  void save(int64_t step, const ::torch::nn::ModuleHolder<M>& model,
            ::torch::optim::Optimizer& optimizer,
            const std::map<std::string, std::string>& metadata = {}) {
    save(step, *model, optimizer, metadata);
  }
  template <class M>
  void save_async(int64_t step, const ::torch::nn::ModuleHolder<M>& model,
                  ::torch::optim::Optimizer& optimizer,
                  const std::map<std::string, std::string>& metadata = {}) {
    save_async(step, *model, optimizer, metadata);
  }
  template <class M>
  std::optional<int64_t> restore_latest(::torch::nn::ModuleHolder<M>& model,
                                        ::torch::optim::Optimizer& optimizer) {
    return restore_latest(*model, optimizer);
  }
  hvd::Checkpointer& checkpointer() { return checkpointer_; }

 private:
  void save_state(int64_t step, const ::torch::nn::Module& model,
                  ::torch::optim::Optimizer* optimizer,
                  const std::map<std::string, std::string>& metadata, bool async);
  hvd::Checkpointer checkpointer_;
};

// ---- Mixed precision ---------------------------------------------------------------------------
// Loss scaling over the ranks, as torch.cuda.amp.GradScaler gives Python programs (LibTorch has
// none): the loss is multiplied by a scale before backward() so that small 16-bit gradients do not
// flush to zero, and the gradients are divided by it before the optimizer steps.
//
//   hvd::torch::GradScaler scaler;  // the scale starts at 2^16
//   opt.zero_grad();                // opt: a DistributedOptimizer
//   scaler.scale(loss).backward();  // the loss (from a forward pass under autocast) x the scale
//   scaler.step(opt);   // all-reduce, unscale, check: every rank steps, or every rank skips
//   scaler.update();    // the next step's scale, the same on every rank
//
// step(opt) synchronises the optimizer (its gradients' all-reduces), multiplies every gradient by
// 1/scale in place and looks for Inf and NaN; then the ranks agree (one all-reduce of a flag over
// the optimizer's process set), so that an overflow on any rank skips the step on every rank and
// the replicas never diverge; without one the wrapped optimizer steps. update() then moves the
// scale as hvd::LossScaler does (hvd/loss_scaler.h): x backoff_factor after a skipped step, x
// growth_factor after growth_interval good steps in a row, within [min_scale, max_scale]. With the
// default factors (powers of two) scaling and unscaling are exact: a step that is not skipped
// gives the weights of the same step without a scaler, bit for bit. To clip or read gradients
// before the step, call unscale_(opt) first (step() then does not unscale again).
//
// CPU and CUDA gradients of any floating dtype (the checks run on their device; step() reads one
// flag per device back to the host). Collective: every rank of the optimizer's set calls step()
// at the same step. Checkpoints: state_dict() into hvd::torch::Checkpointer's metadata,
// load_state_dict(checkpointer.checkpointer().last_metadata()) after a restore.
struct GradScalerOptions {
  double initial_scale = 65536.0;  // 2^16 (PyTorch's init_scale)
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24
  // false: scale() returns the loss, step() only steps the optimizer, update() does nothing.
  bool enabled = true;
  std::string name = "grad_scaler";  // the flag's all-reduce ("<name>.overflow"), state keys
};

class GradScaler {
 public:
  // Throws hvd::InvalidArgumentError for options out of range, naming the field.
  explicit GradScaler(GradScalerOptions options = {});
  // loss x scale() (the loss unchanged when disabled).
  at::Tensor scale(const at::Tensor& loss) const;
  double get_scale() const { return schedule_.scale(); }
  bool is_enabled() const { return options_.enabled; }
  // Synchronises the optimizer, divides its gradients by the scale in place and records whether
  // this rank saw Inf or NaN. Once per step, before step() (an InvalidArgumentError otherwise).
  void unscale_(DistributedOptimizer& optimizer);
  // unscale_() unless done, then the agreement; steps the optimizer and returns true, or skips the
  // step on every rank and returns false.
  bool step(DistributedOptimizer& optimizer);
  // Moves the scale for the next step (after step(); an InvalidArgumentError otherwise).
  void update();
  // What the last step() decided (the same on every rank): skipped, overflow_ranks, scale, and
  // after update() next_scale.
  const LossScaleStep& last_step() const { return last_; }
  int64_t skipped_steps() const { return schedule_.skipped_steps(); }
  // "<name>.scale" and "<name>.good_steps", exact as text; load_state_dict() takes them back
  // (missing or malformed keys are an InvalidArgumentError naming them).
  std::map<std::string, std::string> state_dict() const;
  void load_state_dict(const std::map<std::string, std::string>& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  GradScalerOptions options_;
  LossScaler schedule_;
  Stage stage_ = Stage::kReady;
  bool local_overflow_ = false;
  LossScaleStep last_;
  at::Tensor flag_;  // int32 [1] on the CPU: the ranks' overflows, summed
};

// ---- Data ---------------------------------------------------------------------------------------

// PyTorch's torch.utils.data.DistributedSampler for LibTorch's data loaders:
//   auto loader = torch::data::make_data_loader<hvd::torch::DistributedSampler>(
//       std::move(dataset), global_batch / hvd::size());
// Each epoch is a permutation of [0, size) drawn from (seed, epoch) (the identity without
// shuffle), the same on every rank; rank r takes its elements r, r + n, r + 2n, ... (n replicas).
// So the ranks' k-th batches of b samples together are exactly the k-th batch of n * b samples of
// the permutation: the global batches of one process with batch n * b. Every rank gets
// ceil(size / n) samples per epoch (the permutation's first samples repeat to pad), or
// floor(size / n) with drop_last. Each reset() (a data loader calls it at the start of every
// epoch) starts the next epoch: 0, 1, 2, ...; set_epoch(e) makes the next reset() start epoch e.
// (LibTorch's own torch::data::samplers::DistributedRandomSampler gives each rank a contiguous
// block of one permutation and does not change it between epochs unless set_epoch() is called,
// which a data loader owning the sampler does not allow: see docs/libtorch.md.)
class DistributedSampler : public ::torch::data::samplers::Sampler<> {
 public:
  explicit DistributedSampler(
      std::size_t size);  // hvd::size() replicas, rank hvd::rank(), shuffled, seed 0
  DistributedSampler(std::size_t size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  void reset(c10::optional<std::size_t> new_size = c10::nullopt) override;
  c10::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  void set_epoch(std::size_t epoch) { next_epoch_ = epoch; }
  std::size_t epoch() const { return epoch_; }  // the epoch of the last reset()
  std::size_t local_size() const;               // samples per epoch on this rank
  const std::vector<std::size_t>& indices() const { return indices_; }  // this rank's, this epoch

 private:
  void populate();

  std::size_t size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  std::size_t epoch_ = 0;
  std::size_t next_epoch_ = 0;
  std::size_t position_ = 0;
  std::vector<std::size_t> indices_;
};

}  // namespace hvd::torch
