// hvd::torch: what each torch::optim optimizer keeps per parameter, broadcast_optimizer_state, and
// the Checkpointer of a module and its optimizer. (DistributedOptimizer: distributed_optimizer.cc;
// DistributedSampler: sampler.cc.)
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

#include "hvd/config.h"
#include "internal.h"

namespace hvd::torch {

namespace optim = ::torch::optim;

namespace {

using internal::state_key;
using internal::StateKey;

std::vector<at::Tensor> all_params(const optim::Optimizer& opt) {
  std::vector<at::Tensor> v;
  for (const auto& g : opt.param_groups())
    for (const auto& p : g.params()) v.push_back(p);
  return v;
}

// ---- What each optimizer keeps per parameter ----------------------------------------------------

struct Kind {
  int id = 0;
  std::string name;
  std::vector<std::string> fields;  // tensor fields of the per-parameter state
  bool has_step = false;
  std::size_t num_options = 0;
  std::function<std::unique_ptr<optim::OptimizerParamState>()> make;
  std::function<at::Tensor&(optim::OptimizerParamState&, std::size_t)> field;
  std::function<int64_t&(optim::OptimizerParamState&)> step;
  std::function<std::vector<double>(optim::OptimizerOptions&)> get_options;
  std::function<void(optim::OptimizerOptions&, const std::vector<double>&)> set_options;
};

template <class S>
S& as(optim::OptimizerParamState& s) {
  return static_cast<S&>(s);
}
template <class O>
O& as_options(optim::OptimizerOptions& o) {
  return static_cast<O&>(o);
}

template <class State, class Options>
Kind adam_like(int id, const char* name) {
  Kind k;
  k.id = id;
  k.name = name;
  k.fields = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  k.has_step = true;
  k.num_options = 6;
  k.make = [] { return std::make_unique<State>(); };
  k.field = [](optim::OptimizerParamState& s, std::size_t f) -> at::Tensor& {
    State& st = as<State>(s);
    return f == 0 ? st.exp_avg() : f == 1 ? st.exp_avg_sq() : st.max_exp_avg_sq();
  };
  k.step = [](optim::OptimizerParamState& s) -> int64_t& { return as<State>(s).step(); };
  k.get_options = [](optim::OptimizerOptions& o) {
    Options& a = as_options<Options>(o);
    return std::vector<double>{a.lr(),  std::get<0>(a.betas()), std::get<1>(a.betas()),
                               a.eps(), a.weight_decay(),       a.amsgrad() ? 1.0 : 0.0};
  };
  k.set_options = [](optim::OptimizerOptions& o, const std::vector<double>& v) {
    Options& a = as_options<Options>(o);
    a.lr(v[0]).betas(std::make_tuple(v[1], v[2])).eps(v[3]).weight_decay(v[4]).amsgrad(v[5] != 0);
  };
  return k;
}

Kind sgd_kind() {
  Kind k;
  k.id = 1;
  k.name = "SGD";
  k.fields = {"momentum_buffer"};
  k.num_options = 5;
  k.make = [] { return std::make_unique<optim::SGDParamState>(); };
  k.field = [](optim::OptimizerParamState& s, std::size_t) -> at::Tensor& {
    return as<optim::SGDParamState>(s).momentum_buffer();
  };
  k.get_options = [](optim::OptimizerOptions& o) {
    auto& a = as_options<optim::SGDOptions>(o);
    return std::vector<double>{a.lr(), a.momentum(), a.dampening(), a.weight_decay(),
                               a.nesterov() ? 1.0 : 0.0};
  };
  k.set_options = [](optim::OptimizerOptions& o, const std::vector<double>& v) {
    as_options<optim::SGDOptions>(o)
        .lr(v[0])
        .momentum(v[1])
        .dampening(v[2])
        .weight_decay(v[3])
        .nesterov(v[4] != 0);
  };
  return k;
}

Kind adagrad_kind() {
  Kind k;
  k.id = 4;
  k.name = "Adagrad";
  k.fields = {"sum"};
  k.has_step = true;
  k.num_options = 5;
  k.make = [] { return std::make_unique<optim::AdagradParamState>(); };
  k.field = [](optim::OptimizerParamState& s, std::size_t) -> at::Tensor& {
    return as<optim::AdagradParamState>(s).sum();
  };
  k.step = [](optim::OptimizerParamState& s) -> int64_t& {
    return as<optim::AdagradParamState>(s).step();
  };
  k.get_options = [](optim::OptimizerOptions& o) {
    auto& a = as_options<optim::AdagradOptions>(o);
    return std::vector<double>{a.lr(), a.lr_decay(), a.weight_decay(),
                               a.initial_accumulator_value(), a.eps()};
  };
  k.set_options = [](optim::OptimizerOptions& o, const std::vector<double>& v) {
    as_options<optim::AdagradOptions>(o)
        .lr(v[0])
        .lr_decay(v[1])
        .weight_decay(v[2])
        .initial_accumulator_value(v[3])
        .eps(v[4]);
  };
  return k;
}

Kind rmsprop_kind() {
  Kind k;
  k.id = 5;
  k.name = "RMSprop";
  k.fields = {"square_avg", "momentum_buffer", "grad_avg"};
  k.has_step = true;
  k.num_options = 6;
  k.make = [] { return std::make_unique<optim::RMSpropParamState>(); };
  k.field = [](optim::OptimizerParamState& s, std::size_t f) -> at::Tensor& {
    auto& st = as<optim::RMSpropParamState>(s);
    return f == 0 ? st.square_avg() : f == 1 ? st.momentum_buffer() : st.grad_avg();
  };
  k.step = [](optim::OptimizerParamState& s) -> int64_t& {
    return as<optim::RMSpropParamState>(s).step();
  };
  k.get_options = [](optim::OptimizerOptions& o) {
    auto& a = as_options<optim::RMSpropOptions>(o);
    return std::vector<double>{a.lr(),           a.alpha(),    a.eps(),
                               a.weight_decay(), a.momentum(), a.centered() ? 1.0 : 0.0};
  };
  k.set_options = [](optim::OptimizerOptions& o, const std::vector<double>& v) {
    as_options<optim::RMSpropOptions>(o)
        .lr(v[0])
        .alpha(v[1])
        .eps(v[2])
        .weight_decay(v[3])
        .momentum(v[4])
        .centered(v[5] != 0);
  };
  return k;
}

// The optimizer's kind, or an InvalidArgumentError naming the supported ones.
const Kind& kind_of(const optim::Optimizer& opt, const char* what) {
  static const std::vector<Kind> kinds = {
      sgd_kind(), adam_like<optim::AdamParamState, optim::AdamOptions>(2, "Adam"),
      adam_like<optim::AdamWParamState, optim::AdamWOptions>(3, "AdamW"), adagrad_kind(),
      rmsprop_kind()};
  int id = 0;
  if (dynamic_cast<const optim::SGD*>(&opt))
    id = 1;
  else if (dynamic_cast<const optim::Adam*>(&opt))
    id = 2;
  else if (dynamic_cast<const optim::AdamW*>(&opt))
    id = 3;
  else if (dynamic_cast<const optim::Adagrad*>(&opt))
    id = 4;
  else if (dynamic_cast<const optim::RMSprop*>(&opt))
    id = 5;
  if (id == 0)
    throw InvalidArgumentError(
        std::string("hvd::torch::") + what +
        ": this optimizer's state is not known to hvd (supported: torch::optim::SGD, Adam, "
        "AdamW, Adagrad, RMSprop).");
  return kinds[static_cast<std::size_t>(id - 1)];
}

// The descriptor of an optimizer's state: [kind, parameters, groups, fields] then per parameter
// [has state, field 0 defined, ..., field F-1 defined, step].
constexpr std::size_t kHeader = 4;

std::size_t desc_size(const Kind& k, std::size_t n) { return kHeader + n * (k.fields.size() + 2); }

std::vector<int64_t> describe_state(optim::Optimizer& opt, const Kind& k) {
  const std::vector<at::Tensor> params = all_params(opt);
  const std::size_t F = k.fields.size();
  std::vector<int64_t> d(desc_size(k, params.size()), 0);
  d[0] = k.id;
  d[1] = static_cast<int64_t>(params.size());
  d[2] = static_cast<int64_t>(opt.param_groups().size());
  d[3] = static_cast<int64_t>(F);
  auto& state = opt.state();
  for (std::size_t i = 0; i < params.size(); ++i) {
    int64_t* e = &d[kHeader + i * (F + 2)];
    auto it = state.find(state_key(params[i]));
    if (it == state.end() || !it->second) continue;
    e[0] = 1;
    for (std::size_t f = 0; f < F; ++f) e[1 + f] = k.field(*it->second, f).defined() ? 1 : 0;
    e[1 + F] = k.has_step ? k.step(*it->second) : 0;
  }
  return d;
}

// Why `d` does not fit this optimizer ("" when it does).
std::string desc_mismatch(const std::vector<int64_t>& d, optim::Optimizer& opt, const Kind& k,
                          const std::string& source) {
  const std::size_t n = all_params(opt).size();
  if (d.size() < kHeader || d[0] != k.id) {
    std::string other = "an unknown optimizer";
    if (d.size() >= kHeader)
      for (int id = 1; id <= 5; ++id)
        if (d[0] == id)
          other = std::vector<std::string>{"SGD", "Adam", "AdamW", "Adagrad", "RMSprop"}[id - 1];
    return source + " holds the state of " + other + ", this rank's optimizer is " + k.name;
  }
  if (d[1] != static_cast<int64_t>(n) || d[2] != static_cast<int64_t>(opt.param_groups().size()))
    return source + " has " + std::to_string(d[1]) + " parameters in " + std::to_string(d[2]) +
           " param groups, this rank's optimizer " + std::to_string(n) + " in " +
           std::to_string(opt.param_groups().size());
  return "";
}

// Makes the optimizer's per-parameter state the shape `d` describes: created (zeros, filled by the
// caller) where it is missing, removed where d has none, steps set.
void apply_desc(optim::Optimizer& opt, const Kind& k, const std::vector<int64_t>& d) {
  const std::vector<at::Tensor> params = all_params(opt);
  const std::size_t F = k.fields.size();
  auto& state = opt.state();
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int64_t* e = &d[kHeader + i * (F + 2)];
    const StateKey key = state_key(params[i]);
    if (!e[0]) {
      state.erase(key);
      continue;
    }
    auto& slot = state[key];
    if (!slot) slot = k.make();
    for (std::size_t f = 0; f < F; ++f) {
      at::Tensor& t = k.field(*slot, f);
      if (!e[1 + f])
        t = at::Tensor();
      else if (!t.defined() || !t.sizes().equals(params[i].sizes()))
        t = at::zeros_like(params[i], at::MemoryFormat::Contiguous);
    }
    if (k.has_step) k.step(*slot) = e[1 + F];
  }
}

std::vector<double> get_options(optim::Optimizer& opt, const Kind& k) {
  std::vector<double> v;
  for (auto& g : opt.param_groups()) {
    std::vector<double> o = k.get_options(g.options());
    v.insert(v.end(), o.begin(), o.end());
  }
  return v;
}

void set_options(optim::Optimizer& opt, const Kind& k, const std::vector<double>& v) {
  std::size_t i = 0;
  for (auto& g : opt.param_groups()) {
    k.set_options(g.options(),
                  std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(i),
                                      v.begin() + static_cast<std::ptrdiff_t>(i + k.num_options)));
    i += k.num_options;
  }
}

// (name, tensor) of every defined state tensor, in parameter order.
std::vector<std::pair<std::string, at::Tensor>> state_tensors(optim::Optimizer& opt, const Kind& k,
                                                              const std::string& prefix) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  const std::vector<at::Tensor> params = all_params(opt);
  auto& state = opt.state();
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto it = state.find(state_key(params[i]));
    if (it == state.end() || !it->second) continue;
    for (std::size_t f = 0; f < k.fields.size(); ++f) {
      const at::Tensor& t = k.field(*it->second, f);
      if (t.defined()) v.emplace_back(prefix + std::to_string(i) + "." + k.fields[f], t);
    }
  }
  return v;
}

at::Tensor int64_tensor(const std::vector<int64_t>& v) {
  return at::tensor(at::ArrayRef<int64_t>(v), at::TensorOptions().dtype(at::kLong)).contiguous();
}
at::Tensor float64_tensor(const std::vector<double>& v) {
  return at::tensor(at::ArrayRef<double>(v), at::TensorOptions().dtype(at::kDouble)).contiguous();
}
std::vector<int64_t> to_int64(const at::Tensor& t) {
  const int64_t* p = t.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}
std::vector<double> to_float64(const at::Tensor& t) {
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + t.numel());
}

}  // namespace

// ---- broadcast_optimizer_state ------------------------------------------------------------------

void broadcast_optimizer_state(optim::Optimizer& optimizer, int root) {
  if (auto* d = dynamic_cast<DistributedOptimizer*>(&optimizer)) {
    broadcast_optimizer_state(d->optimizer(), root);
    for (std::size_t g = 0;
         g < d->param_groups().size() && g < d->optimizer().param_groups().size(); ++g)
      d->param_groups()[g].set_options(d->optimizer().param_groups()[g].options().clone());
    return;
  }
  const Kind& k = kind_of(optimizer, "broadcast_optimizer_state");
  const std::string prefix = "hvd.torch.broadcast_optimizer_state.";
  // 1. Root's header; every rank checks it against its own optimizer, and all agree to fail.
  const std::vector<int64_t> mine = describe_state(optimizer, k);
  at::Tensor header = int64_tensor(std::vector<int64_t>(mine.begin(), mine.begin() + kHeader));
  broadcast_(header, root, prefix + "header");
  const std::string mismatch =
      desc_mismatch(to_int64(header), optimizer, k, "root rank " + std::to_string(root));
  at::Tensor bad = at::full({1}, mismatch.empty() ? 0 : 1, at::TensorOptions().dtype(at::kInt));
  allreduce_(bad, prefix + "check", ReduceOp::kMax);
  if (!mismatch.empty())
    throw InvalidArgumentError(
        "hvd::torch::broadcast_optimizer_state: " + mismatch +
        ": every rank must pass the same kind of optimizer over the same parameters.");
  if (bad.item<int>() != 0)
    throw InvalidArgumentError(
        "hvd::torch::broadcast_optimizer_state: another rank's optimizer differs from root rank " +
        std::to_string(root) +
        "'s (that rank's error says how): every rank must pass the same kind of optimizer over "
        "the same parameters.");
  // 2. Root's descriptor and options; the state takes root's shape everywhere.
  at::Tensor desc = int64_tensor(mine);
  at::Tensor options = float64_tensor(get_options(optimizer, k));
  broadcast_(desc, root, prefix + "state");
  broadcast_(options, root, prefix + "options");
  if (hvd::rank() != root) {
    apply_desc(optimizer, k, to_int64(desc));
    set_options(optimizer, k, to_float64(options));
  }
  // 3. The state tensors.
  internal::broadcast_in_place(state_tensors(optimizer, k, prefix), root);
}

// ---- Checkpointer -------------------------------------------------------------------------------

namespace {

// Tensors for hvd::Checkpointer: contiguous views of CPU tensors, and of CUDA tensors where hvd
// was built with CUDA (hvd::Checkpointer stages them through pinned memory itself, after the work
// queued on the current stream: docs/checkpointing.md); else contiguous copies (on the tensor's
// device, or on the CPU for a CUDA tensor that this hvd cannot take), copied back after a restore.
struct Staged {
  std::vector<NamedTensor> named;
  std::vector<at::Tensor> keep;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (target, CPU copy)

  void add(const std::string& name, const at::Tensor& t) {
    const std::string p = internal::problem(t);
    if (!p.empty() && t.defined() && t.layout() == c10::kStrided && t.is_contiguous())
      throw InvalidArgumentError("hvd::torch::Checkpointer: '" + name + "' " + p);
    if (!t.defined()) throw InvalidArgumentError("hvd::torch::Checkpointer: '" + name + "' " + p);
    at::Tensor c = t;
    const bool device_ok = t.is_cpu() || (HVD_HAVE_CUDA && t.is_cuda());
    if (!device_ok) {
      c = t.detach().to(at::kCPU).contiguous();
      copy_back.emplace_back(t, c);
    } else if (!t.is_contiguous()) {
      c = t.detach().contiguous();
      copy_back.emplace_back(t, c);
    }
    const std::string pc = internal::problem(c);
    if (!pc.empty()) throw InvalidArgumentError("hvd::torch::Checkpointer: '" + name + "' " + pc);
    keep.push_back(c);
    named.push_back(NamedTensor{name, internal::ref(c)});
  }
  void finish_restore() {
    at::NoGradGuard no_grad;
    for (auto& [t, c] : copy_back) t.copy_(c);
    for (auto& t : keep) internal::bump_version(t);
    for (auto& [t, c] : copy_back) internal::bump_version(t);
  }
};

void add_model(Staged& s, const ::torch::nn::Module& model) {
  for (const auto& item : model.named_parameters(true)) s.add("model." + item.key(), item.value());
  for (const auto& item : model.named_buffers(true))
    if (item.value().defined()) s.add("model." + item.key(), item.value());
}

optim::Optimizer& unwrap(optim::Optimizer& opt) {
  if (auto* d = dynamic_cast<DistributedOptimizer*>(&opt)) return d->optimizer();
  return opt;
}

}  // namespace

void Checkpointer::save_state(int64_t step, const ::torch::nn::Module& model,
                              optim::Optimizer* optimizer_in,
                              const std::map<std::string, std::string>& metadata, bool async) {
  Staged s;
  add_model(s, model);
  std::map<std::string, std::string> meta = metadata;
  if (optimizer_in != nullptr) {
    optim::Optimizer& optimizer = unwrap(*optimizer_in);
    const Kind& k = kind_of(optimizer, async ? "Checkpointer::save_async" : "Checkpointer::save");
    const std::vector<int64_t> desc = describe_state(optimizer, k);
    s.add("optimizer.header",
          int64_tensor(std::vector<int64_t>(desc.begin(), desc.begin() + kHeader)));
    s.add("optimizer.state", int64_tensor(desc));
    s.add("optimizer.options", float64_tensor(get_options(optimizer, k)));
    for (const auto& [name, t] : state_tensors(optimizer, k, "optimizer.")) s.add(name, t);
    meta["hvd.torch.optimizer"] = k.name;
  }
  // save_async: rank 0 copies the views before the call returns, so `s` may go.
  if (async)
    checkpointer_.save_async(step, s.named, meta);
  else
    checkpointer_.save(step, s.named, meta);
}

void Checkpointer::save(int64_t step, const ::torch::nn::Module& model, optim::Optimizer& optimizer,
                        const std::map<std::string, std::string>& metadata) {
  save_state(step, model, &optimizer, metadata, false);
}

void Checkpointer::save(int64_t step, const ::torch::nn::Module& model,
                        const std::map<std::string, std::string>& metadata) {
  save_state(step, model, nullptr, metadata, false);
}

void Checkpointer::save_async(int64_t step, const ::torch::nn::Module& model,
                              optim::Optimizer& optimizer,
                              const std::map<std::string, std::string>& metadata) {
  save_state(step, model, &optimizer, metadata, true);
}

void Checkpointer::save_async(int64_t step, const ::torch::nn::Module& model,
                              const std::map<std::string, std::string>& metadata) {
  save_state(step, model, nullptr, metadata, true);
}

std::optional<int64_t> Checkpointer::restore_latest(::torch::nn::Module& model) {
  Staged s;
  add_model(s, model);
  std::optional<int64_t> step = checkpointer_.restore_latest(s.named);
  if (step) s.finish_restore();
  return step;
}

std::optional<int64_t> Checkpointer::restore_latest(::torch::nn::Module& model,
                                                    optim::Optimizer& optimizer_in) {
  optim::Optimizer& optimizer = unwrap(optimizer_in);
  const Kind& k = kind_of(optimizer, "Checkpointer::restore_latest");
  // 1. The model, the state's descriptor and the options (sized from this rank's optimizer).
  Staged s;
  add_model(s, model);
  at::Tensor desc =
      int64_tensor(std::vector<int64_t>(desc_size(k, all_params(optimizer).size()), 0));
  at::Tensor options = float64_tensor(get_options(optimizer, k));
  s.add("optimizer.state", desc);
  s.add("optimizer.options", options);
  std::optional<int64_t> step;
  try {
    step = checkpointer_.restore_latest(s.named);
  } catch (const InvalidArgumentError& e) {
    // Say why when the checkpoint holds another kind of optimizer (its header has a fixed shape).
    std::string mismatch;
    try {
      Staged h;
      h.add("optimizer.header", int64_tensor(std::vector<int64_t>(kHeader, 0)));
      if (checkpointer_.restore_latest(h.named))
        mismatch = desc_mismatch(to_int64(h.keep[0]), optimizer, k, "the newest checkpoint");
    } catch (const Error&) {}
    if (!mismatch.empty())
      throw InvalidArgumentError("hvd::torch::Checkpointer::restore_latest from '" +
                                 checkpointer_.dir() + "': " + mismatch +
                                 ": restore with the model and optimizer it was saved from.");
    throw InvalidArgumentError(std::string(e.what()) +
                               " (hvd::torch::Checkpointer: was it saved from another model "
                               "or optimizer, or without an optimizer?)");
  }
  if (!step) return std::nullopt;
  s.finish_restore();
  const std::vector<int64_t> d = to_int64(desc);
  const std::string mismatch =
      desc_mismatch(d, optimizer, k, "the checkpoint of step " + std::to_string(*step));
  if (!mismatch.empty())
    throw InvalidArgumentError("hvd::torch::Checkpointer::restore_latest: " + mismatch + ".");
  // 2. The state the checkpoint has, created where missing, then filled.
  apply_desc(optimizer, k, d);
  set_options(optimizer, k, to_float64(options));
  Staged st;
  for (const auto& [name, t] : state_tensors(optimizer, k, "optimizer.")) st.add(name, t);
  if (!st.named.empty()) {
    std::optional<int64_t> again = checkpointer_.restore_latest(st.named);
    if (again != step)
      throw Error("hvd::torch::Checkpointer::restore_latest: the newest checkpoint in '" +
                  checkpointer_.dir() + "' changed while it was being restored (step " +
                  std::to_string(*step) + ", then " +
                  (again ? std::to_string(*again) : std::string("none")) +
                  "): do not save while restoring.");
    st.finish_restore();
  }
  return step;
}

}  // namespace hvd::torch
