// hvd::torch with several models and an optimizer each, on 1-3 ranks (docs/libtorch.md, "Several
// models and optimizers"): a GAN-shaped toy (a generator G and a discriminator D, Adam for each
// wrapped in a DistributedOptimizer; D takes two backward passes per step, real and fake; G's loss
// back-propagates through D, so D's hooks fire during G's backward pass) ends with the
// single-process weights for the same global batch, with the modules' and with the wrappers'
// zero_grad(), and with more passes than backward_passes_per_step. Parameter names that two live
// DistributedOptimizers share fail at construction on every rank; name_prefix separates them.
// Every rank computes the single-process reference itself and checks its own weights against it.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "hvd/torch.h"
#include "tests/torch/torch_test_util.h"

namespace {

namespace ht = hvd::torch;
using namespace hvdtest::torch_util;

class TorchSeveralModels : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

// G: 3 noise inputs -> 5 features; D: 5 features -> 1 score. Both name their parameters
// "0.weight", "0.bias", "2.weight", "2.bias". The same weights on every rank (fixed seeds).
torch::nn::Sequential make_g() {
  torch::manual_seed(21);
  torch::nn::Sequential m(torch::nn::Linear(3, 4), torch::nn::Functional(torch::tanh),
                          torch::nn::Linear(4, 5));
  m->to(torch::kDouble);
  return m;
}
torch::nn::Sequential make_d() {
  torch::manual_seed(22);
  torch::nn::Sequential m(torch::nn::Linear(5, 4), torch::nn::Functional(torch::tanh),
                          torch::nn::Linear(4, 1));
  m->to(torch::kDouble);
  return m;
}

// Rank q's real samples and noise at step s (2 rows each; deterministic).
torch::Tensor real(int q, int s) {
  return torch::sin(torch::arange(10, torch::kDouble).view({2, 5}) * 0.41 + q * 0.9 + s * 0.5);
}
torch::Tensor noise(int q, int s) {
  return torch::cos(torch::arange(6, torch::kDouble).view({2, 3}) * 0.63 + q * 1.7 + s * 0.3);
}

// The least-squares GAN losses: D scores real samples 1 and fakes 0; G wants its fakes scored 1.
torch::Tensor d_loss_real(torch::nn::Sequential& d, const torch::Tensor& x) {
  return torch::mean(torch::square(d->forward(x) - 1));
}
torch::Tensor d_loss_fake(torch::nn::Sequential& d, const torch::Tensor& fake) {
  return torch::mean(torch::square(d->forward(fake.detach())));
}
torch::Tensor g_loss(torch::nn::Sequential& d, const torch::Tensor& fake) {
  return torch::mean(torch::square(d->forward(fake) - 1));
}

enum class ZeroGrad { kModule, kModuleToNone, kWrapper };

struct Gan {
  ZeroGrad zero_grad = ZeroGrad::kModule;
  int d_backward_passes_per_step = 2;  // D takes 2 backward passes per step in every case
  bool overlap = true;
};

// `steps` steps of the GAN with DistributedOptimizers, and on the side the single-process
// reference: one process with every rank's real samples and noise as its batch (the mean over the
// ranks of each loss); their weights must agree.
void check_gan(const std::string& tag, const Gan& gan, int steps = 3) {
  torch::nn::Sequential g = make_g(), d = make_d(), g_ref = make_g(), d_ref = make_d();
  torch::optim::Adam g_adam(g->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::Adam d_adam(d->parameters(), torch::optim::AdamOptions(0.02));
  torch::optim::Adam g_ref_adam(g_ref->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::Adam d_ref_adam(d_ref->parameters(), torch::optim::AdamOptions(0.02));
  // The same names in both models: broadcasts wait for their result, so they cannot clash.
  ht::broadcast_parameters(g->named_parameters(), 0);
  ht::broadcast_parameters(d->named_parameters(), 0);
  ht::DistributedOptimizer g_opt(g_adam, g->named_parameters(),
                                 {.overlap = gan.overlap, .name_prefix = "G."});
  ht::DistributedOptimizer d_opt(d_adam, d->named_parameters(),
                                 {.backward_passes_per_step = gan.d_backward_passes_per_step,
                                  .overlap = gan.overlap,
                                  .name_prefix = "D."});
  auto zero = [&](torch::nn::Sequential& m, ht::DistributedOptimizer& opt) {
    switch (gan.zero_grad) {
      case ZeroGrad::kModule:
        m->zero_grad();
        break;
      case ZeroGrad::kModuleToNone:
        m->zero_grad(/*set_to_none=*/true);
        break;
      case ZeroGrad::kWrapper:
        opt.zero_grad();
        break;
    }
  };
  const double ranks = n();
  for (int s = 0; s < steps; ++s) {
    // As pytorch/examples' cpp/dcgan writes it.
    zero(d, d_opt);
    d_loss_real(d, real(r(), s)).backward();
    torch::Tensor fake = g->forward(noise(r(), s));
    d_loss_fake(d, fake).backward();
    d_opt.step();
    zero(g, g_opt);
    g_loss(d, fake).backward();  // also produces D's gradients, which D's next zero_grad() drops
    g_opt.step();

    d_ref->zero_grad();
    torch::Tensor loss = torch::zeros({}, torch::kDouble);
    for (int q = 0; q < n(); ++q) loss = loss + d_loss_real(d_ref, real(q, s));
    (loss / ranks).backward();
    std::vector<torch::Tensor> fakes;
    loss = torch::zeros({}, torch::kDouble);
    for (int q = 0; q < n(); ++q) {
      fakes.push_back(g_ref->forward(noise(q, s)));
      loss = loss + d_loss_fake(d_ref, fakes.back());
    }
    (loss / ranks).backward();
    d_ref_adam.step();
    g_ref->zero_grad();
    loss = torch::zeros({}, torch::kDouble);
    for (int q = 0; q < n(); ++q) loss = loss + g_loss(d_ref, fakes[q]);
    (loss / ranks).backward();
    g_ref_adam.step();
  }
  auto compare = [&](torch::nn::Sequential& a, torch::nn::Sequential& b, const std::string& m) {
    auto pa = a->named_parameters();
    auto pb = b->named_parameters();
    for (std::size_t i = 0; i < pa.size(); ++i)
      EXPECT_TRUE(torch::allclose(pa[i].value(), pb[i].value(), 1e-9, 1e-12))
          << tag << " " << m << pa[i].key() << ": distributed\n"
          << pa[i].value() << "\nreference\n"
          << pb[i].value();
  };
  compare(g, g_ref, "G.");
  compare(d, d_ref, "D.");
  EXPECT_EQ(g_opt.stats().steps, steps) << tag;
  EXPECT_EQ(d_opt.stats().steps, steps) << tag;
  // The hooks' all-reduces are used, except where D's own settings waste some: with
  // backward_passes_per_step 1, G's pass through D starts D's 4 (dropped by D's next zero_grad(),
  // except after the last step) and D's fake pass drops those of its real pass.
  const int64_t wasted =
      gan.overlap && gan.d_backward_passes_per_step == 1 ? 4 * (steps - 1) + 4 * steps : 0;
  EXPECT_EQ(d_opt.stats().dropped_allreduces, wasted) << tag;
  EXPECT_EQ(g_opt.stats().dropped_allreduces, 0) << tag;
  if (gan.overlap) {
    EXPECT_GT(d_opt.stats().hook_seconds, 0) << tag;
  }
}

TEST_F(TorchSeveralModels, GanMatchesTheGlobalBatchWithModuleZeroGrad) {
  check_gan("module", {.zero_grad = ZeroGrad::kModule});
  check_gan("module.set_to_none", {.zero_grad = ZeroGrad::kModuleToNone});
  check_gan("module.after_backward", {.zero_grad = ZeroGrad::kModule, .overlap = false});
}

TEST_F(TorchSeveralModels, GanMatchesTheGlobalBatchWithWrapperZeroGrad) {
  check_gan("wrapper", {.zero_grad = ZeroGrad::kWrapper});
  check_gan("wrapper.after_backward", {.zero_grad = ZeroGrad::kWrapper, .overlap = false});
}

// D left at backward_passes_per_step 1 takes 2 passes per step: step() all-reduces D's
// accumulated gradients (a note says so once) and training is still that of the global batch; G's
// backward pass starts D's all-reduces from the hooks, which D's zero_grad() then drops.
TEST_F(TorchSeveralModels, GanWithMorePassesThanBackwardPassesPerStepStillTrains) {
  check_gan("module.k1", {.zero_grad = ZeroGrad::kModule, .d_backward_passes_per_step = 1});
  check_gan("module.set_to_none.k1",
            {.zero_grad = ZeroGrad::kModuleToNone, .d_backward_passes_per_step = 1});
  check_gan("wrapper.k1", {.zero_grad = ZeroGrad::kWrapper, .d_backward_passes_per_step = 1});
}

// Two live DistributedOptimizers over parameters named alike would all-reduce "grad.0.weight"
// twice at once (G's backward pass reaches both models): the second one fails at construction, on
// every rank, with a message naming the clash and the fix; name_prefix separates them.
TEST_F(TorchSeveralModels, ClashingParameterNamesFailAtConstructionOnEveryRank) {
  torch::nn::Sequential g = make_g(), d = make_d();
  torch::optim::SGD g_sgd(g->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD d_sgd(d->parameters(), torch::optim::SGDOptions(0.1));
  {
    ht::DistributedOptimizer g_opt(g_sgd, g->named_parameters());
    try {
      ht::DistributedOptimizer d_opt(d_sgd, d->named_parameters());
      ADD_FAILURE() << "two optimizers over parameters named alike accepted";
    } catch (const hvd::InvalidArgumentError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'0.weight'"), std::string::npos) << what;
      EXPECT_NE(what.find("DistributedOptimizerOptions::name_prefix"), std::string::npos) << what;
    }
    // A prefix on one of them is enough; a step of each trains on every rank alike.
    ht::DistributedOptimizer d_opt(d_sgd, d->named_parameters(), {.name_prefix = "D."});
    d_opt.zero_grad();
    g_opt.zero_grad();
    torch::Tensor fake = g->forward(noise(r(), 0));
    g_loss(d, fake).backward();  // both models' hooks, the same parameter names
    d_opt.step();
    g_opt.step();
    for (auto* m : {&g, &d})
      for (const auto& p : (*m)->named_parameters()) {
        const std::string name = (m == &g ? "clash.G." : "clash.D.") + p.key();
        torch::Tensor v = p.value().detach();
        EXPECT_TRUE(same(ht::allreduce(v, name + ".max", hvd::ReduceOp::kMax), v) &&
                    same(ht::allreduce(v, name + ".min", hvd::ReduceOp::kMin), v))
            << name << " differs between ranks";
      }
  }
  // The names are free again once the first optimizer is gone.
  ht::DistributedOptimizer d_opt(d_sgd, d->named_parameters());
  ht::DistributedOptimizer g_opt(g_sgd, g->named_parameters(), {.name_prefix = "G."});
  EXPECT_EQ(d_opt.distributed_options().name_prefix, "");
}

}  // namespace
