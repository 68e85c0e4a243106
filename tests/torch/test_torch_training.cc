// hvd::torch for training, on 1-3 ranks: broadcast_parameters, broadcast_optimizer_state (SGD,
// Adam, AdamW, Adagrad, RMSprop; ranks without state), DistributedOptimizer (against the
// single-process update on the global batch: average and sum, hooks and after backward(), fp16
// compression, backward_passes_per_step, unused parameters, errors), the Checkpointer and the
// DistributedSampler. Every rank checks its own values.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hvd/torch.h"
#include "tests/torch/torch_test_util.h"
#include "torch/internal.h"

namespace {

namespace ht = hvd::torch;
using namespace hvdtest::torch_util;

class TorchTraining : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

// true when `t` holds the same values on every rank.
bool same_everywhere(const at::Tensor& t, const std::string& name) {
  at::Tensor d = t.detach().to(at::kDouble).contiguous();
  at::Tensor hi = ht::allreduce(d, name + ".max", hvd::ReduceOp::kMax);
  at::Tensor lo = ht::allreduce(d, name + ".min", hvd::ReduceOp::kMin);
  return at::equal(hi, d) && at::equal(lo, d);
}

// ---- The snippet of the issue must compile as written -------------------------------------------

TEST_F(TorchTraining, HorovodStyleSnippetCompilesAndRuns) {
  torch::manual_seed(1 + r());  // different initial weights per rank: the broadcast fixes that
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::Tensor x = torch::ones({3, 4}) * (r() + 1);
  torch::Tensor loss;
  // >>> the lines of the issue
  hvd::torch::broadcast_parameters(model->named_parameters(), /*root=*/0);
  hvd::torch::broadcast_optimizer_state(optimizer, 0);
  hvd::torch::DistributedOptimizer opt(optimizer, model->named_parameters());
  loss = model->forward(x).sum();
  opt.zero_grad();
  loss.backward();
  opt.step();
  // <<<
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(same_everywhere(p.value(), "snippet." + p.key()))
        << p.key() << " differs between ranks";
  EXPECT_EQ(opt.stats().steps, 1);
}

// ---- broadcast_parameters -----------------------------------------------------------------------

TEST_F(TorchTraining, BroadcastParametersAndBuffers) {
  torch::manual_seed(100 + r());
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                              torch::nn::Linear(4, 2));
  for (auto& b : model->buffers()) b.fill_(r() + 1);  // running mean/var, num_batches_tracked
  ht::broadcast_parameters(*model, /*root=*/n() - 1);
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(same_everywhere(p.value(), "bp." + p.key())) << p.key();
  for (const auto& b : model->named_buffers()) {
    EXPECT_TRUE(same_everywhere(b.value(), "bb." + b.key())) << b.key();
    EXPECT_EQ(b.value().flatten()[0].item<double>(), n()) << b.key() << ": not root's";
  }
  torch::manual_seed(200 + r());
  torch::nn::Linear lin(5, 5);
  ht::broadcast_parameters(lin, 0);
  for (const auto& p : lin->named_parameters())
    EXPECT_TRUE(same_everywhere(p.value(), "bl." + p.key())) << p.key();
  // A non-contiguous parameter goes through a contiguous copy.
  at::Tensor nc = at::full({4, 3}, r(), at::kFloat).t();
  ht::broadcast_parameters(std::vector<std::pair<std::string, at::Tensor>>{{"nc", nc}}, 0);
  EXPECT_EQ(nc.abs().sum().item<double>(), 0);
  EXPECT_THROW(
      ht::broadcast_parameters(
          std::vector<std::pair<std::string, at::Tensor>>{{"twice", nc}, {"twice", nc}}, 0),
      hvd::InvalidArgumentError);
}

// ---- broadcast_optimizer_state ------------------------------------------------------------------

// Same model on every rank; `steps` optimizer steps with rank-specific gradients.
void take_steps(torch::nn::Linear& model, torch::optim::Optimizer& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    torch::Tensor loss =
        (model->forward(torch::ones({2, 4}) * (r() + s + 1)) * (r() + 1)).pow(2).sum();
    loss.backward();
    opt.step();
  }
}

// Root took 2 steps, rank 1 one, the others none; after the broadcast every rank has root's state
// and options, and one more identical step leaves identical parameters.
template <class Optimizer, class Options>
void check_optimizer(const std::string& tag, Options options,
                     const std::vector<std::string>& fields) {
  torch::manual_seed(5);
  torch::nn::Linear model(4, 3);
  Optimizer opt(model->parameters(), options);
  take_steps(model, opt, r() == 0 ? 2 : r() == 1 ? 1 : 0);
  if (r() == 0) opt.param_groups()[0].options().set_lr(0.0123);
  ht::broadcast_parameters(model->named_parameters(), 0);
  ht::broadcast_optimizer_state(opt, 0);
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), 0.0123) << tag;
  const std::vector<at::Tensor> st = state_of(opt, fields);
  for (std::size_t i = 0; i < st.size(); ++i) {
    EXPECT_GT(st[i].numel() + (fields[i % fields.size()] == "max" ||
                               fields[i % fields.size()] == "momentum_buffer" ||
                               fields[i % fields.size()] == "grad_avg"),
              0)
        << tag << " state " << i << " missing";
    EXPECT_TRUE(same_everywhere(st[i], tag + ".st" + std::to_string(i)))
        << tag << " state " << i << " differs";
  }
  // The same gradient everywhere: the update must be the same everywhere.
  opt.zero_grad();
  model->forward(torch::ones({2, 4})).sum().backward();
  opt.step();
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(same_everywhere(p.value(), tag + ".p." + p.key())) << tag << " " << p.key();
}

TEST_F(TorchTraining, BroadcastOptimizerStateSGD) {
  check_optimizer<torch::optim::SGD>(
      "sgd", torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1), {"momentum_buffer"});
}
TEST_F(TorchTraining, BroadcastOptimizerStateAdam) {
  check_optimizer<torch::optim::Adam>("adam", torch::optim::AdamOptions(0.01),
                                      {"exp_avg", "exp_avg_sq", "step"});
  check_optimizer<torch::optim::Adam>("adam.amsgrad", torch::optim::AdamOptions(0.01).amsgrad(true),
                                      {"exp_avg", "exp_avg_sq", "max", "step"});
}
TEST_F(TorchTraining, BroadcastOptimizerStateAdamW) {
  check_optimizer<torch::optim::AdamW>("adamw", torch::optim::AdamWOptions(0.01).amsgrad(true),
                                       {"exp_avg", "exp_avg_sq", "max", "step"});
}
TEST_F(TorchTraining, BroadcastOptimizerStateRMSpropAdagrad) {
  check_optimizer<torch::optim::RMSprop>(
      "rmsprop", torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true),
      {"square_avg", "momentum_buffer", "grad_avg", "step"});
  check_optimizer<torch::optim::Adagrad>("adagrad", torch::optim::AdagradOptions(0.1),
                                         {"sum", "step"});
}

TEST_F(TorchTraining, BroadcastOptimizerStateRootWithoutState) {
  torch::manual_seed(5);
  torch::nn::Linear model(4, 3);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  if (r() != 0) take_steps(model, opt, 1);
  ht::broadcast_optimizer_state(opt, 0);
  EXPECT_TRUE(opt.state().empty()) << "rank " << r() << " kept state root does not have";
}

TEST_F(TorchTraining, BroadcastOptimizerStateMismatchFailsEveryRank) {
  torch::nn::Linear model(4, 3);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (r() == 0)
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  else
    opt = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.1));
  if (n() > 1) {
    try {
      ht::broadcast_optimizer_state(*opt, 0);
      ADD_FAILURE() << "no error on rank " << r();
    } catch (const hvd::InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(r() == 0 ? "another rank's optimizer differs"
                                                    : "holds the state of SGD"),
                std::string::npos)
          << e.what();
    }
  }
  torch::optim::LBFGS lbfgs(model->parameters(), torch::optim::LBFGSOptions(1));
  try {
    ht::broadcast_optimizer_state(lbfgs, 0);
    ADD_FAILURE() << "LBFGS accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(
        std::string(e.what()).find("supported: torch::optim::SGD, Adam, AdamW, Adagrad, RMSprop"),
        std::string::npos)
        << e.what();
  }
}

// ---- DistributedOptimizer -----------------------------------------------------------------------

// make_model, batch and local_loss: tests/torch/torch_test_util.h.

// Trains `steps` steps with a DistributedOptimizer and, on the side, the single-process reference
// on the global batch (every rank's data, computed locally); their parameters must agree.
void check_distributed(const std::string& tag, ht::DistributedOptimizerOptions options,
                       double rtol) {
  const int steps = 3, passes = options.backward_passes_per_step;
  torch::nn::Sequential model = make_model(), ref = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ht::DistributedOptimizer opt(sgd, model->named_parameters(), options);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    for (int p = 0; p < passes; ++p) local_loss(model, r(), s, p).backward();
    opt.step();
    ref_sgd.zero_grad();
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    for (int p = 0; p < passes; ++p)
      for (int q = 0; q < n(); ++q) total = total + local_loss(ref, q, s, p);
    if (options.op == hvd::ReduceOp::kAverage) total = total / n();
    total.backward();
    ref_sgd.step();
  }
  auto a = model->named_parameters();
  auto b = ref->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i].value(), b[i].value(), rtol, 1e-9))
        << tag << " " << a[i].key() << ": distributed\n"
        << a[i].value() << "\nreference\n"
        << b[i].value();
  EXPECT_EQ(opt.stats().steps, steps) << tag;
  EXPECT_GT(opt.stats().step_seconds, 0) << tag;
  EXPECT_GE(opt.stats().wait_seconds, 0) << tag;
  if (options.overlap) {
    EXPECT_GT(opt.stats().hook_seconds, 0) << tag;
  }
}

TEST_F(TorchTraining, DistributedOptimizerMatchesTheGlobalBatch) {
  check_distributed("average.hooks", {}, 1e-10);
  check_distributed("average.after_backward", {.overlap = false}, 1e-10);
  check_distributed("sum", {.op = hvd::ReduceOp::kSum}, 1e-10);
  check_distributed("two_passes", {.backward_passes_per_step = 2}, 1e-10);
  check_distributed("two_passes.after_backward", {.backward_passes_per_step = 2, .overlap = false},
                    1e-10);
  check_distributed("fp16", {.compression = ht::Compression::kFP16}, 2e-2);
  // The switch turns hvd's deterministic reductions on for the process (docs/determinism.md).
  check_distributed("deterministic", {.deterministic = true}, 1e-10);
  EXPECT_TRUE(hvd::deterministic());
  hvd::set_deterministic(false);
}

// synchronize() twice with no backward pass in between all-reduces once: with kSum a second
// all-reduce would multiply the gradients by the ranks again (a GradScaler's step() after the
// program's own synchronize() for clipping does just that sequence).
TEST_F(TorchTraining, DistributedOptimizerSynchronizesOncePerAccumulation) {
  auto m = make_model();
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1));
  ht::DistributedOptimizer opt(
      sgd, m->named_parameters(),
      ht::DistributedOptimizerOptions{.op = hvd::ReduceOp::kSum, .name_prefix = "sync_once."});
  opt.zero_grad();
  local_loss(m, r(), 0, 0).backward();
  opt.synchronize();
  std::vector<torch::Tensor> once;
  for (const auto& p : m->parameters()) once.push_back(p.grad().clone());
  opt.synchronize();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_TRUE(same(m->parameters()[i].grad(), once[i]));
  // A backward pass after it is a new accumulation: all-reduced again, and the step uses it.
  opt.zero_grad();
  local_loss(m, r(), 1, 0).backward();
  opt.step();
  EXPECT_TRUE(same_everywhere(m->parameters()[0].detach(), "sync_once.check"));
}

TEST_F(TorchTraining, DistributedOptimizerUnusedParameter) {
  // Branch b is used only on even ranks: odd ranks all-reduce zeros for it in step().
  torch::manual_seed(3);
  torch::nn::Linear a(3, 1), b(3, 1);
  std::vector<torch::Tensor> params = a->parameters();
  for (auto& p : b->parameters()) params.push_back(p);
  torch::OrderedDict<std::string, torch::Tensor> named;
  for (auto& p : a->named_parameters()) named.insert("a." + p.key(), p.value());
  for (auto& p : b->named_parameters()) named.insert("b." + p.key(), p.value());
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(1.0));
  ht::DistributedOptimizer opt(sgd, named);
  const torch::Tensor b_weight = b->weight.detach().clone();
  opt.zero_grad();
  torch::Tensor x = torch::ones({1, 3});
  torch::Tensor loss = a->forward(x).sum();
  if (r() % 2 == 0) loss = loss + b->forward(x).sum();
  loss.backward();
  opt.step();
  const int even = (n() + 1) / 2;  // ranks using b
  // d(sum b(x))/dW = x = ones; averaged over n ranks, even of which contribute.
  EXPECT_TRUE(torch::allclose(b->weight, b_weight - static_cast<double>(even) / n())) << b->weight;
  EXPECT_TRUE(b->weight.grad().defined());
  EXPECT_TRUE(same_everywhere(b->weight, "unused.b"));
}

TEST_F(TorchTraining, DistributedOptimizerErrors) {
  torch::nn::Linear model(3, 1);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  {
    ht::DistributedOptimizer opt(sgd, model->named_parameters());
    torch::Tensor x = torch::ones({1, 3});
    const torch::Tensor weight = model->weight.detach().clone();
    model->forward(x).sum().backward();
    // Not errors (docs/libtorch.md, "Several models and optimizers"): a second backward pass with
    // backward_passes_per_step 1 (step() would all-reduce the sum), and zero_grad() with
    // all-reduces in flight (dropped: the next step() reduces the zeros).
    model->forward(x).sum().backward();
    opt.zero_grad();
    opt.step();
    EXPECT_TRUE(torch::equal(model->weight, weight)) << model->weight;
    EXPECT_EQ(opt.stats().dropped_allreduces, 2);  // weight and bias, from the first pass
    EXPECT_THROW(opt.step([] { return torch::zeros({}); }), hvd::InvalidArgumentError);
  }
  torch::nn::Linear other(3, 1);
  try {
    ht::DistributedOptimizer bad(sgd, other->named_parameters());
    ADD_FAILURE() << "unnamed parameters accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(
        std::string(e.what()).find("2 of the optimizer's parameters are not in named_parameters"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      ht::DistributedOptimizer(sgd, ht::DistributedOptimizerOptions{.backward_passes_per_step = 0}),
      hvd::InvalidArgumentError);
  EXPECT_THROW(
      ht::DistributedOptimizer(sgd, ht::DistributedOptimizerOptions{.op = hvd::ReduceOp::kMax}),
      hvd::InvalidArgumentError);
}

TEST_F(TorchTraining, DistributedOptimizerLearningRateFollowsEitherSide) {
  torch::nn::Linear model(3, 1);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  ht::DistributedOptimizer opt(sgd, model->named_parameters());
  auto run = [&] {
    opt.zero_grad();
    model->forward(torch::ones({1, 3})).sum().backward();
    opt.step();
  };
  opt.param_groups()[0].options().set_lr(
      0.5);  // as a scheduler given the DistributedOptimizer would
  run();
  EXPECT_EQ(sgd.param_groups()[0].options().get_lr(), 0.5);
  sgd.param_groups()[0].options().set_lr(0.25);  // on the wrapped optimizer
  run();
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), 0.25);
  opt.param_groups()[0].options().set_lr(1);
  sgd.param_groups()[0].options().set_lr(2);
  EXPECT_THROW(run(), hvd::InvalidArgumentError);
}

// ---- Checkpointer -------------------------------------------------------------------------------

TEST_F(TorchTraining, CheckpointerRestoresModelAndOptimizerState) {
  // One directory for all ranks (rank 0 writes), named after rank 0's process id.
  at::Tensor pid =
      ht::broadcast(at::full({1}, static_cast<int64_t>(getpid()), at::kLong), 0, "ckpt.pid");
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("hvd-torch-ckpt-" + std::to_string(pid.item<int64_t>())))
                              .string();
  torch::manual_seed(9);
  torch::nn::Linear model(4, 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  ht::Checkpointer ckpt(dir);
  EXPECT_FALSE(ckpt.restore_latest(model, adam).has_value());
  take_steps(model, adam, 2);
  ht::broadcast_parameters(model->named_parameters(), 0);
  ht::broadcast_optimizer_state(adam, 0);
  ckpt.save(7, model, adam);
  const auto saved_params = model->parameters();
  std::vector<at::Tensor> want;
  for (const auto& p : saved_params) want.push_back(p.detach().clone());
  const std::vector<at::Tensor> want_state = state_of(adam, {"exp_avg", "exp_avg_sq", "step"});

  // A fresh model and optimizer (no state yet) resume exactly.
  torch::manual_seed(1000 + r());
  torch::nn::Linear fresh(4, 3);
  torch::optim::Adam fresh_adam(fresh->parameters(), torch::optim::AdamOptions(0.5));
  EXPECT_EQ(ckpt.restore_latest(fresh, fresh_adam), std::optional<int64_t>(7));
  auto got = fresh->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << i;
  const std::vector<at::Tensor> got_state = state_of(fresh_adam, {"exp_avg", "exp_avg_sq", "step"});
  ASSERT_EQ(got_state.size(), want_state.size());
  for (std::size_t i = 0; i < got_state.size(); ++i)
    EXPECT_TRUE(at::equal(got_state[i], want_state[i])) << i;
  EXPECT_EQ(fresh_adam.param_groups()[0].options().get_lr(), 0.01);
  // The next step is the same in both.
  take_steps(model, adam, 1);
  take_steps(fresh, fresh_adam, 1);
  got = fresh->parameters();
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(at::equal(got[i], model->parameters()[i])) << i;
  // The wrong optimizer kind is refused with a message saying so.
  torch::optim::SGD sgd(fresh->parameters(), torch::optim::SGDOptions(0.1));
  try {
    ckpt.restore_latest(fresh, sgd);
    ADD_FAILURE() << "Adam's checkpoint restored into SGD";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("Adam"), std::string::npos) << e.what();
  }
  hvd::barrier();
  if (r() == 0) remove_tree(dir);
}

// save_async: the checkpoint holds the model and optimizer of the call, though the next steps
// change them before the write can have finished; a fresh model restores it exactly.
TEST_F(TorchTraining, CheckpointerSaveAsyncKeepsTheStateOfTheCall) {
  at::Tensor pid =
      ht::broadcast(at::full({1}, static_cast<int64_t>(getpid()), at::kLong), 0, "ckpt.pid.async");
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("hvd-torch-ckpt-async-" + std::to_string(pid.item<int64_t>())))
                              .string();
  torch::manual_seed(11);
  torch::nn::Linear model(4, 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  take_steps(model, adam, 2);
  ht::broadcast_parameters(model->named_parameters(), 0);
  ht::broadcast_optimizer_state(adam, 0);
  ht::Checkpointer ckpt(dir);
  ckpt.save_async(3, model, adam);
  std::vector<at::Tensor> want;
  for (const auto& p : model->parameters()) want.push_back(p.detach().clone());
  const std::vector<at::Tensor> want_state = state_of(adam, {"exp_avg", "exp_avg_sq", "step"});
  take_steps(model, adam, 2);  // at once: the write must not see these
  ckpt.wait();

  torch::manual_seed(2000 + r());
  torch::nn::Linear fresh(4, 3);
  torch::optim::Adam fresh_adam(fresh->parameters(), torch::optim::AdamOptions(0.5));
  EXPECT_EQ(ckpt.restore_latest(fresh, fresh_adam), std::optional<int64_t>(3));
  auto got = fresh->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << i;
  const std::vector<at::Tensor> got_state = state_of(fresh_adam, {"exp_avg", "exp_avg_sq", "step"});
  ASSERT_EQ(got_state.size(), want_state.size());
  for (std::size_t i = 0; i < got_state.size(); ++i)
    EXPECT_TRUE(at::equal(got_state[i], want_state[i])) << i;
  hvd::barrier();
  if (r() == 0) remove_tree(dir);
}

// ---- DistributedSampler -------------------------------------------------------------------------

TEST(TorchSampler, RanksTogetherTakeTheGlobalBatches) {
  const std::size_t size = 23, b = 2;
  for (int replicas : {1, 2, 3, 4}) {
    ht::DistributedSampler one(size, 1, 0, true, 42);
    one.reset();
    std::vector<ht::DistributedSampler> ranks;
    for (int q = 0; q < replicas; ++q) {
      ranks.emplace_back(size, replicas, q, true, 42);
      ranks.back().reset();
      EXPECT_EQ(ranks.back().indices().size(), (size + replicas - 1) / replicas);
    }
    // Batch k of the ranks together == batch k of one process with batch replicas * b.
    for (int k = 0; k * b * replicas < size; ++k) {
      std::vector<std::size_t> together;
      for (auto& s : ranks)
        if (auto batch = s.next(b)) together.insert(together.end(), batch->begin(), batch->end());
      auto global = one.next(b * replicas);
      ASSERT_TRUE(global.has_value());
      std::sort(together.begin(), together.end());
      std::sort(global->begin(), global->end());
      if ((k + 1) * b * replicas <= size) {
        EXPECT_EQ(together, *global) << replicas << " replicas, batch " << k;
      }
    }
  }
  ht::DistributedSampler s(10, 2, 1, true, 0);
  s.reset();
  const auto e0 = s.indices();
  s.reset();
  EXPECT_EQ(s.epoch(), 1u);
  EXPECT_NE(s.indices(), e0);
  s.set_epoch(0);
  s.reset();
  EXPECT_EQ(s.indices(), e0);
  ht::DistributedSampler ordered(5, 2, 1, /*shuffle=*/false);
  ordered.reset();
  EXPECT_EQ(ordered.indices(),
            (std::vector<std::size_t>{1, 3, 0}));  // padded with the first sample
  ht::DistributedSampler dropped(5, 2, 1, false, 0, /*drop_last=*/true);
  dropped.reset();
  EXPECT_EQ(dropped.indices(), (std::vector<std::size_t>{1, 3}));
  EXPECT_THROW(ht::DistributedSampler(5, 2, 2), hvd::InvalidArgumentError);
}

}  // namespace
