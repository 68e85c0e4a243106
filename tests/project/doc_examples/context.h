#pragma once

// The names that the C++ examples of README.md, docs/*.md and the comments of include/hvd/*.h use
// without declaring them (a user's gradient, model, optimizer, data set, ...), declared so that
// tests/project/doc_examples/check_doc_examples.py can compile each example on its own
// (-fsyntax-only, test docs.examples_compile). Declarations only: nothing here runs. An example
// picks its set with `<!-- compiled with: NAME -->` before its fence (default: core); the examples
// in include/hvd/torch.h use torch.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <hvd/hvd.h>

namespace hvd_doc_context {

namespace core {
std::vector<float> compute_gradient();
inline std::vector<float> grad, w, params, local_rows, w1, m1;
inline int64_t steps = 0, global_step = 0, batch_per_replica = 32, epochs = 1;
inline int epoch = 0;
void train_one_step();
// strategy.h: a model whose backward pass calls back as each gradient i is final.
struct Model {
  void backward(const std::vector<int64_t>& rows, const std::function<void(int)>& on_grad_ready);
};
struct Optimizer {
  void step(double learning_rate);
};
struct Dataset {
  int64_t size() const;
};
inline Model model;
inline Optimizer optimizer;
inline Dataset train;
inline std::vector<std::string> names;
inline std::vector<hvd::TensorRef> grads;
}  // namespace core

}  // namespace hvd_doc_context

#ifdef HVD_DOC_EXAMPLES_TORCH
#include <hvd/torch.h>  // the torch examples show hvd::torch calls without their #include
#include <torch/torch.h>

namespace hvd_doc_context::torch_example {
inline ::torch::nn::Linear model{4, 2};
inline ::torch::optim::SGD optimizer{model->parameters(), 0.1};
inline ::torch::Tensor loss;
extern hvd::torch::DistributedOptimizer opt;  // declared only: examples are never run
inline auto dataset = ::torch::data::datasets::TensorDataset(::torch::zeros({8, 4}));
inline int64_t global_batch = 8;
}  // namespace hvd_doc_context::torch_example
#endif
