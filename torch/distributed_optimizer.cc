// hvd::torch::DistributedOptimizer: each gradient's all-reduce starts from an autograd hook as soon
// as the gradient is produced; step() waits for them (docs/libtorch.md).
#include <ATen/ATen.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "internal.h"

namespace hvd::torch {

namespace optim = ::torch::optim;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- DistributedOptimizer -----------------------------------------------------------------------

struct DistributedOptimizer::Slot {
  std::string name;  // of the all-reduce: "grad." + the parameter's name
  at::Tensor param;
  bool hooked = false;
  unsigned hook = 0;
  int passes = 0;     // gradients produced since the last step
  Handle handle;      // the all-reduce in flight
  at::Tensor buffer;  // what it reduces (param.grad() itself when in place)
  bool in_place = false;
  double hook_seconds = 0;
};

DistributedOptimizer::DistributedOptimizer(optim::Optimizer& optimizer,
                                           const NamedTensors& named_parameters,
                                           DistributedOptimizerOptions options)
    : optim::Optimizer(optimizer.param_groups(), optimizer.defaults().clone()),
      optimizer_(optimizer),
      options_(options) {
  init(&named_parameters);
}

DistributedOptimizer::DistributedOptimizer(optim::Optimizer& optimizer,
                                           DistributedOptimizerOptions options)
    : optim::Optimizer(optimizer.param_groups(), optimizer.defaults().clone()),
      optimizer_(optimizer),
      options_(options) {
  init(nullptr);
}

void DistributedOptimizer::init(const NamedTensors* named) {
  const std::string what = "hvd::torch::DistributedOptimizer: ";
  if (dynamic_cast<DistributedOptimizer*>(&optimizer_))
    throw InvalidArgumentError(
        what + "the optimizer is a DistributedOptimizer already: wrap the plain optimizer once.");
  if (options_.backward_passes_per_step < 1)
    throw InvalidArgumentError(what + "backward_passes_per_step is " +
                               std::to_string(options_.backward_passes_per_step) +
                               "; it must be at least 1.");
  if (options_.op != ReduceOp::kAverage && options_.op != ReduceOp::kSum)
    throw InvalidArgumentError(
        what + "op is " + reduce_op_name(options_.op) +
        "; gradients are reduced with ReduceOp::kAverage or ReduceOp::kSum.");
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  if (named)
    for (const auto& item : *named) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::vector<std::string> unnamed;
  const auto& groups = optimizer_.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t j = 0; j < groups[g].params().size(); ++j) {
      const at::Tensor& p = groups[g].params()[j];
      auto slot = std::make_unique<Slot>();
      slot->param = p;
      if (named) {
        auto it = names.find(p.unsafeGetTensorImpl());
        if (it == names.end()) {
          unnamed.push_back("group " + std::to_string(g) + " parameter " + std::to_string(j) + " " +
                            internal::describe(p));
          continue;
        }
        slot->name = "grad." + it->second;
      } else {
        slot->name = "grad.param." + std::to_string(g) + "." + std::to_string(j);
      }
      slots_.push_back(std::move(slot));
    }
  }
  if (!unnamed.empty()) {
    std::string list;
    for (std::size_t i = 0; i < unnamed.size() && i < 3; ++i) list += (i ? "; " : "") + unnamed[i];
    if (unnamed.size() > 3) list += "; ...";
    throw InvalidArgumentError(
        what + std::to_string(unnamed.size()) +
        " of the optimizer's parameters are not in named_parameters (" + list +
        "): pass the named_parameters() of the module whose parameters the optimizer updates.");
  }
  for (const auto& g : param_groups_) synced_lr_.push_back(g.options().get_lr());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    if (!s.param.requires_grad()) continue;
    s.hook = s.param.register_hook([this, i](const at::Tensor& grad) { on_gradient(i, grad); });
    s.hooked = true;
  }
  last_step_end_ = now_seconds();
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& s : slots_) {
    if (s->hooked) {
      try {
        s->param.remove_hook(s->hook);
      } catch (...) {}
    }
    if (s->handle.valid()) {
      try {
        s->handle.wait();  // its buffer must outlive the operation
      } catch (...) {}
    }
  }
}

void DistributedOptimizer::on_gradient(std::size_t i, const at::Tensor& grad) {
  Slot& s = *slots_[i];
  const double t0 = now_seconds();
  const int k = options_.backward_passes_per_step;
  if (++s.passes > k)
    throw InvalidArgumentError(
        "hvd::torch::DistributedOptimizer: the gradient of '" + s.name.substr(5) +
        "' was computed " + std::to_string(s.passes) +
        " times since the last step(), but backward_passes_per_step is " + std::to_string(k) +
        ": call step() after every backward pass, or set "
        "DistributedOptimizerOptions::backward_passes_per_step to the number of backward "
        "passes per step.");
  if (!options_.overlap || s.passes < k) return;
  // The gradient .grad will hold once autograd has accumulated `grad` into it. `grad` itself may
  // become .grad or be read by autograd after this hook: reduce a copy.
  at::NoGradGuard no_grad;
  const at::Tensor& acc = s.param.grad();
  at::Tensor total = acc.defined() ? acc + grad : grad.clone(at::MemoryFormat::Contiguous);
  start(s, total);
  s.hook_seconds += now_seconds() - t0;
}

// Starts the all-reduce of `total`, a tensor this object may reduce in place (a copy, or .grad).
void DistributedOptimizer::start(Slot& s, const at::Tensor& total) {
  const bool floating = total.scalar_type() == at::kFloat || total.scalar_type() == at::kDouble;
  if (options_.compression == Compression::kFP16 && floating) {
    s.buffer = total.to(at::kHalf).contiguous();
    s.in_place = false;
  } else if (total.is_contiguous()) {
    s.buffer = total;
    s.in_place = total.is_same(s.param.grad());
  } else {
    s.buffer = total.contiguous();
    s.in_place = false;
  }
  s.handle = allreduce_async_(s.buffer, s.name, options_.op);
}

void DistributedOptimizer::synchronize() {
  const double t0 = now_seconds();
  std::exception_ptr first;
  at::NoGradGuard no_grad;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.param.requires_grad() || s.handle.valid()) continue;
    try {
      at::Tensor& grad = s.param.mutable_grad();
      if (!grad.defined()) grad = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
      start(s, grad);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  for (auto& sp : slots_) {
    if (!sp->handle.valid()) continue;
    try {
      sp->handle.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!first && s.handle.valid() && !s.in_place) {
      at::Tensor& grad = s.param.mutable_grad();
      if (!grad.defined()) grad = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
      grad.copy_(s.buffer);
    }
    stats_.hook_seconds += s.hook_seconds;
    s.hook_seconds = 0;
    s.passes = 0;
    s.handle = Handle();
    s.buffer = at::Tensor();
    s.in_place = false;
  }
  stats_.wait_seconds += now_seconds() - t0;
  if (first) std::rethrow_exception(first);
  synchronized_ = true;
}

void DistributedOptimizer::sync_options() {
  auto& theirs = optimizer_.param_groups();
  if (theirs.size() != param_groups_.size())
    throw InvalidArgumentError("hvd::torch::DistributedOptimizer: the wrapped optimizer has " +
                               std::to_string(theirs.size()) + " param groups, " +
                               std::to_string(param_groups_.size()) +
                               " when it was wrapped: wrap it after adding every param group.");
  for (std::size_t g = 0; g < theirs.size(); ++g) {
    const double ours = param_groups_[g].options().get_lr();
    const double wrapped = theirs[g].options().get_lr();
    const double synced = synced_lr_[g];
    if (ours != synced && wrapped != synced && ours != wrapped)
      throw InvalidArgumentError(
          "hvd::torch::DistributedOptimizer: the learning rate of param group " +
          std::to_string(g) + " was set to " + std::to_string(ours) +
          " on the DistributedOptimizer and to " + std::to_string(wrapped) +
          " on the wrapped optimizer since the last step(): set it on one of them.");
    const double lr = ours != synced ? ours : wrapped;
    theirs[g].options().set_lr(lr);
    param_groups_[g].set_options(theirs[g].options().clone());
    synced_lr_[g] = lr;
  }
}

at::Tensor DistributedOptimizer::step(LossClosure closure) {
  if (closure)
    throw InvalidArgumentError(
        "hvd::torch::DistributedOptimizer::step() takes no closure: compute the loss and call "
        "backward() before "
        "step() (closure-based optimizers such as LBFGS are not supported).");
  if (!synchronized_) synchronize();
  synchronized_ = false;
  sync_options();
  at::Tensor result = optimizer_.step();
  const double now = now_seconds();
  stats_.step_seconds += now - last_step_end_;
  ++stats_.steps;
  last_step_end_ = now;
  return result;
}

void DistributedOptimizer::zero_grad() {
  for (const auto& s : slots_)
    if (s->handle.valid())
      throw InvalidArgumentError(
          "hvd::torch::DistributedOptimizer::zero_grad(): the all-reduce of '" + s->name.substr(5) +
          "' is in flight (backward() ran since the last step()): call step() or "
          "synchronize() before zero_grad().");
  optim::Optimizer::zero_grad();
}

void DistributedOptimizer::reset_stats() {
  stats_ = CommunicationStats();
  last_step_end_ = now_seconds();
}

void DistributedOptimizer::save(::torch::serialize::OutputArchive& archive) const {
  optimizer_.save(archive);
}
void DistributedOptimizer::load(::torch::serialize::InputArchive& archive) {
  optimizer_.load(archive);
  for (std::size_t g = 0; g < param_groups_.size() && g < optimizer_.param_groups().size(); ++g) {
    param_groups_[g].set_options(optimizer_.param_groups()[g].options().clone());
    synced_lr_[g] = param_groups_[g].options().get_lr();
  }
}

}  // namespace hvd::torch
