#pragma once

// Shared by the hvd::torch tests (test_torch's files and test_torch_cuda): rank and size, exact
// comparisons, an optimizer's state tensors, and the small model and deterministic per-rank
// batches that DistributedOptimizer is checked with against the single-process update on the
// global batch.
#include <torch/torch.h>

#include <ftw.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "hvd/torch.h"
#include "torch/internal.h"

namespace hvdtest::torch_util {

inline int r() { return hvd::rank(); }
inline int n() { return hvd::size(); }

// Removes a directory tree (a test's checkpoint directory). Not std::filesystem::remove_all: pip's
// libtorch.so (2.x) exports a statically linked copy of std::filesystem (pytorch/pytorch#133437)
// that the dynamic linker binds a test's call to, and that copy's remove_all jumps to address 0
// (torch 2.11.0: test_torch's cleanup, then test_torch_cuda's on the H200, and reproduced here;
// docs/libtorch.md, "pip's LibTorch and std::filesystem").
inline void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

inline std::string tname(c10::ScalarType t) { return c10::toString(t); }

inline at::Tensor as_double(const at::Tensor& t) { return t.to(at::kCPU, at::kDouble); }

// true when a and b hold the same values (compared in double on the host; the tests use exact
// values), wherever they live.
inline bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes().equals(b.sizes()) && at::equal(as_double(a), as_double(b));
}

// Linear(5, 4), tanh, Linear(4, 2) in double on `device`, the same weights on every rank.
inline torch::nn::Sequential make_model(const at::Device& device = at::kCPU) {
  torch::manual_seed(11);
  torch::nn::Sequential m(torch::nn::Linear(5, 4), torch::nn::Functional(torch::tanh),
                          torch::nn::Linear(4, 2));
  m->to(device, torch::kDouble);
  return m;
}

// Rank q's batch at (step, pass): 3 rows of 5 inputs and 2 targets, deterministic, on the host.
inline std::pair<torch::Tensor, torch::Tensor> batch(int q, int step, int pass) {
  torch::Tensor x = torch::sin(torch::arange(15, torch::kDouble).view({3, 5}) * 0.37 + q * 1.3 +
                               step * 0.7 + pass * 0.11);
  torch::Tensor y =
      torch::cos(torch::arange(6, torch::kDouble).view({3, 2}) * 0.5 + q + step * 0.3 + pass * 0.2);
  return {x, y};
}

// The loss of model m on rank q's batch, computed on the model's device.
inline torch::Tensor local_loss(torch::nn::Sequential& m, int q, int step, int pass) {
  auto [x, y] = batch(q, step, pass);
  const at::Device device = m->parameters().front().device();
  return torch::mse_loss(m->forward(x.to(device)), y.to(device));
}

// The optimizer's state tensors in parameter order, one tensor per field, flattened, in double, on
// their device (undefined -> empty; a parameter without state -> one empty tensor).
inline std::vector<at::Tensor> state_of(torch::optim::Optimizer& opt,
                                        const std::vector<std::string>& fields) {
  std::vector<at::Tensor> v;
  for (const auto& p : opt.param_groups()[0].params()) {
    auto it = opt.state().find(hvd::torch::internal::state_key(p));
    if (it == opt.state().end()) {
      v.push_back(at::empty({0}));
      continue;
    }
    for (const auto& f : fields) {
      // Adam and AdamW keep the same fields in two unrelated types.
      auto adam_like = [&f](const auto* s) {
        return f == "exp_avg"      ? s->exp_avg()
               : f == "exp_avg_sq" ? s->exp_avg_sq()
               : f == "max"        ? s->max_exp_avg_sq()
                                   : at::full({1}, s->step());
      };
      at::Tensor t;
      if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(it->second.get()))
        t = s->momentum_buffer();
      if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) t = adam_like(s);
      if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get()))
        t = adam_like(s);
      if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(it->second.get()))
        t = f == "square_avg"        ? s->square_avg()
            : f == "momentum_buffer" ? s->momentum_buffer()
            : f == "grad_avg"        ? s->grad_avg()
                                     : at::full({1}, s->step());
      if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(it->second.get()))
        t = f == "sum" ? s->sum() : at::full({1}, s->step());
      v.push_back(t.defined() ? t.detach().flatten().to(at::kDouble) : at::empty({0}, at::kDouble));
    }
  }
  return v;
}

}  // namespace hvdtest::torch_util
