// hvd::torch::DistributedOptimizer: each gradient's all-reduce starts from an autograd hook as soon
// as the gradient is produced; step() waits for them (docs/libtorch.md).
#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <atomic>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
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
//
// Why every rank submits the same all-reduces under the same names: each decision below (start an
// all-reduce from a hook, drop one, start one in step()) depends only on the sequence of backward
// passes that reach a parameter, the zero_grad() calls and step() calls, and on which tensor
// .grad is and its version counter, which those same calls determine: the same on every rank that
// runs the same program (for parameters that a rank's forward pass skips, step() supplies the one
// all-reduce, as before). A dropped all-reduce still completes everywhere; it is waited for before
// its name is used again (a name may be in flight once).

namespace {

// The all-reduce names of the live DistributedOptimizers. The runtime matches operations across
// ranks by name alone, so names are process-wide: two optimizers sharing one would start it twice
// when one backward pass reaches both models.
std::mutex& live_names_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<std::string>& live_names() {
  static std::unordered_set<std::string> names;
  return names;
}

}  // namespace

struct DistributedOptimizer::Slot {
  std::string name;  // of the all-reduce: "grad." + prefix + the parameter's name
  at::Tensor param;
  bool hooked = false;
  unsigned hook = 0;
  int passes = 0;             // gradients accumulated into .grad since the accumulation began
  int64_t dropped_count = 0;  // all-reduces dropped since the last synchronize()
  // .grad as the end of the last backward pass that reached this parameter left it (a weak
  // reference, so that the address is not reused, and the version counter). Another tensor or
  // version when the next pass (or step()) comes means that .grad was zeroed, set to none,
  // replaced or edited in between: a new accumulation.
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> seen;
  int64_t seen_version = -1;
  Handle handle;      // the all-reduce in flight
  Handle dropped;     // one started earlier and dropped, perhaps still in flight under `name`
  at::Tensor buffer;  // what it reduces (param.grad() itself when in place)
  bool in_place = false;
  double hook_seconds = 0;

  // true when .grad is what the end of the last backward pass that reached it left.
  bool grad_unchanged() const {
    const at::Tensor& g = param.grad();
    return seen && g.defined() && seen->_unsafe_get_target() == g.unsafeGetTensorImpl() &&
           g._version() == seen_version;
  }
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
  if (options_.process_set.id() < 0) options_.process_set = global_process_set();
  if (!options_.process_set.included())
    throw InvalidArgumentError(what + "rank " + std::to_string(hvd::rank()) +
                               " is not a member of process set " +
                               std::to_string(options_.process_set.id()) +
                               ", whose ranks average the gradients: construct it on the set's "
                               "members only (ProcessSet::included()).");
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  if (named)
    for (const auto& item : *named) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::vector<std::string> unnamed;
  const std::string prefix = "grad." + options_.name_prefix;
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
        slot->name = prefix + it->second;
      } else {
        slot->name = prefix + "param." + std::to_string(g) + "." + std::to_string(j);
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
  {
    std::lock_guard<std::mutex> lock(live_names_mutex());
    std::vector<std::string> clashes;
    for (const auto& s : slots_)
      if (live_names().count(s->name)) clashes.push_back("'" + s->name.substr(5) + "'");
    if (!clashes.empty()) {
      std::string list;
      for (std::size_t i = 0; i < clashes.size() && i < 3; ++i)
        list += (i ? ", " : "") + clashes[i];
      if (clashes.size() > 3) list += ", ...";
      throw InvalidArgumentError(
          what + std::to_string(clashes.size()) + " parameter names (" + list +
          ") are those of another live DistributedOptimizer (two models naming their parameters "
          "alike): their gradients' all-reduces would clash when one backward pass reaches both "
          "models. Set DistributedOptimizerOptions::name_prefix on one of them (e.g. "
          "{.name_prefix = \"D.\"}, the same on every rank).");
    }
    for (const auto& s : slots_) live_names().insert(s->name);
  }
  for (const auto& g : param_groups_) synced_lr_.push_back(g.options().get_lr());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = *slots_[i];
    if (!s.param.requires_grad()) continue;
    s.hook = s.param.register_hook([this, i](const at::Tensor& grad) { on_gradient(i, grad); });
    s.hooked = true;
  }
  if (options_.deterministic) hvd::set_deterministic(true);
  last_step_end_ = now_seconds();
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& s : slots_) {
    if (s->hooked) {
      try {
        s->param.remove_hook(s->hook);
      } catch (...) {}
    }
    for (Handle* h : {&s->handle, &s->dropped}) {
      if (h->valid()) {
        try {
          h->wait();  // its buffer must outlive the operation
        } catch (...) {}
      }
    }
  }
  std::lock_guard<std::mutex> lock(live_names_mutex());
  for (const auto& s : slots_) live_names().erase(s->name);
}

void DistributedOptimizer::on_gradient(std::size_t i, const at::Tensor& grad) {
  Slot& s = *slots_[i];
  const double t0 = now_seconds();
  const int k = options_.backward_passes_per_step;
  if (s.passes > 0 && !s.grad_unchanged()) {
    // zero_grad() (the module's, the wrapped optimizer's) or another change of .grad since the
    // last pass: a new accumulation; an all-reduce started for the old one is of no use.
    drop(s);
    s.passes = 0;
  }
  ++s.passes;
  // The end of this backward pass records what autograd left in .grad (after this hook, autograd
  // adds `grad` into it). Final callbacks run once every node of the pass has run.
  ::torch::autograd::Engine::get_default_engine().queue_callback([this, i] { on_backward_end(i); });
  if (!options_.overlap) return;
  if (s.passes == k + 1) {
    // More passes than backward_passes_per_step: the all-reduce the k-th pass started misses
    // this one; step() all-reduces the sum in .grad instead.
    drop(s);
    if (!noted_extra_passes_.exchange(true)) {
      // One line on stderr, from rank 0 (every rank counts alike; hvd::torch may use only hvd's
      // public API, which has no logger).
      if (hvd::rank() == 0)
        std::cerr << "[hvd rank " + std::to_string(hvd::rank()) +
                         "] note: hvd::torch::DistributedOptimizer: the gradient of '" +
                         s.name.substr(5) + "' was computed " + std::to_string(s.passes) +
                         " times before step() (or zero_grad()), but backward_passes_per_step is " +
                         std::to_string(k) +
                         ": step() all-reduces such gradients after backward() (correct, without "
                         "overlap). Set DistributedOptimizerOptions::backward_passes_per_step to "
                         "the number of backward passes per step to overlap them again (noted "
                         "once per optimizer).\n";
    }
  }
  if (s.passes != k) return;
  // The gradient .grad will hold once autograd has accumulated `grad` into it. `grad` itself may
  // become .grad or be read by autograd after this hook: reduce a copy.
  at::NoGradGuard no_grad;
  const at::Tensor& acc = s.param.grad();
  at::Tensor total = acc.defined() ? acc + grad : grad.clone(at::MemoryFormat::Contiguous);
  start(s, total);
  s.hook_seconds += now_seconds() - t0;
}

void DistributedOptimizer::on_backward_end(std::size_t i) {
  Slot& s = *slots_[i];
  const at::Tensor& g = s.param.grad();
  s.seen.reset();
  s.seen_version = -1;
  if (!g.defined()) return;
  s.seen.emplace(g.getIntrusivePtr());
  s.seen_version = g._version();
}

// Sets an all-reduce started by a hook aside: it completes on every rank (each started it), and is
// waited for before the next one under its name starts. Hooks never reduce .grad in place.
void DistributedOptimizer::drop(Slot& s) {
  if (!s.handle.valid()) return;
  ++s.dropped_count;  // per slot: hooks of a model on several devices run on several threads
  s.dropped = std::move(s.handle);
  s.handle = Handle();
  s.buffer = at::Tensor();
  s.in_place = false;
}

// Starts the all-reduce of `total`, a tensor this object may reduce in place (a copy, or .grad).
void DistributedOptimizer::start(Slot& s, const at::Tensor& total) {
  if (s.dropped.valid()) {
    Handle dropped = std::move(s.dropped);
    s.dropped = Handle();
    dropped.wait();  // the name may be in flight once
  }
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
  s.handle = allreduce_async_(s.buffer, s.name, options_.op, 1.0, 1.0, options_.process_set);
}

void DistributedOptimizer::synchronize() {
  // Once per accumulation: a second call (a GradScaler's step() after the program's own
  // synchronize() for clipping) must not all-reduce the averages again.
  bool pending = !synchronized_;
  for (const auto& sp : slots_) pending = pending || sp->passes > 0;
  if (!pending) return;
  const double t0 = now_seconds();
  std::exception_ptr first;
  at::NoGradGuard no_grad;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.param.requires_grad()) continue;
    // A hook's all-reduce holds .grad as the end of its backward pass left it; if .grad changed
    // since (zero_grad(), an edit), reduce .grad as it is now.
    if (s.handle.valid() && !s.grad_unchanged()) drop(s);
    if (s.handle.valid()) continue;
    try {
      at::Tensor& grad = s.param.mutable_grad();
      if (!grad.defined()) grad = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
      start(s, grad);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  for (auto& sp : slots_) {
    for (Handle* h : {&sp->handle, &sp->dropped}) {
      if (!h->valid()) continue;
      try {
        h->wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
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
    stats_.dropped_allreduces += s.dropped_count;
    s.dropped_count = 0;
    s.passes = 0;
    s.handle = Handle();
    s.dropped = Handle();
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
  synchronize();  // does nothing when synchronize() ran since the last backward pass
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
  for (auto& s : slots_) {
    drop(*s);
    s->passes = 0;
  }
  synchronized_ = false;
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
