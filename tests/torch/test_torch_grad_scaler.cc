// hvd::torch::GradScaler on 1-3 ranks: a scaled step gives the unscaled step's weights bit for bit;
// an overflow on one rank skips the step on every rank and halves the scale alike; the scale
// grows after growth_interval good steps; unscale_() before step() (for clipping); float32 and
// bfloat16 gradients; disabled; state_dict() round trip; the errors. Every rank checks its own
// values.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hvd/torch.h"
#include "tests/support/throws_with.h"
#include "tests/torch/torch_test_util.h"

namespace {

namespace ht = hvd::torch;
using namespace hvdtest::torch_util;
using hvdtest::throws_with;

class TorchGradScaler : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

// A model, its SGD and its DistributedOptimizer, every gradient named under `prefix`.
struct Trainer {
  explicit Trainer(const std::string& prefix, c10::ScalarType dtype = torch::kDouble)
      : model(make_model()),
        sgd(model->parameters(), torch::optim::SGDOptions(0.1)),
        dist(sgd, model->named_parameters(),
             ht::DistributedOptimizerOptions{.name_prefix = prefix}) {
    model->to(dtype);
  }
  torch::Tensor loss(int step) {
    auto [x, y] = batch(r(), step, 0);
    const auto dtype = model->parameters().front().scalar_type();
    // The loss in float32 (as autocast computes losses), the model in its own dtype.
    return torch::mse_loss(model->forward(x.to(dtype)).to(torch::kFloat), y.to(torch::kFloat));
  }
  std::vector<torch::Tensor> weights() {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
  torch::nn::Sequential model;
  torch::optim::SGD sgd;
  ht::DistributedOptimizer dist;
};

bool same_weights(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

TEST_F(TorchGradScaler, AScaledStepGivesTheUnscaledStepsWeightsBitForBit) {
  Trainer plain("plain."), scaled("scaled.");
  ht::GradScaler scaler;
  for (int step = 0; step < 3; ++step) {
    plain.dist.zero_grad();
    plain.loss(step).backward();
    plain.dist.step();
    scaled.dist.zero_grad();
    at::Tensor loss = scaled.loss(step);
    at::Tensor big = scaler.scale(loss);
    EXPECT_EQ(big.item<double>(), loss.item<double>() * 65536.0);
    big.backward();
    EXPECT_TRUE(scaler.step(scaled.dist)) << step;
    scaler.update();
    EXPECT_FALSE(scaler.last_step().skipped);
    EXPECT_EQ(scaler.last_step().overflow_ranks, 0);
    EXPECT_TRUE(same_weights(plain.weights(), scaled.weights())) << "step " << step;
  }
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST_F(TorchGradScaler, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  Trainer t("overflow.");
  ht::GradScaler scaler({.initial_scale = 1024});
  const int bad_rank = n() - 1;
  for (int step = 0; step < 4; ++step) {
    const auto before = t.weights();
    t.dist.zero_grad();
    scaler.scale(t.loss(step)).backward();
    // After the all-reduce, so that the Inf is on one rank only (one in a rank's own backward pass
    // reaches every rank through the average): the ranks must agree through the scaler's flag.
    t.dist.synchronize();
    if (step == 1 && r() == bad_rank) {
      torch::NoGradGuard no_grad;
      t.model->parameters()[0].mutable_grad().view(-1)[0] = std::numeric_limits<double>::infinity();
    }
    const bool stepped = scaler.step(t.dist);
    scaler.update();
    const ht::GradScaler& s = scaler;
    if (step == 1) {
      EXPECT_FALSE(stepped) << "rank " << r() << " stepped past an overflow on rank " << bad_rank;
      EXPECT_TRUE(s.last_step().skipped);
      EXPECT_EQ(s.last_step().overflow_ranks, 1);
      EXPECT_EQ(s.last_step().scale, 1024.0);
      EXPECT_EQ(s.last_step().next_scale, 512.0);
      EXPECT_TRUE(same_weights(before, t.weights())) << "a skipped step changed the weights";
    } else {
      EXPECT_TRUE(stepped) << step;
      EXPECT_FALSE(same_weights(before, t.weights())) << step;
    }
  }
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // The replicas stayed identical.
  for (const auto& p : t.model->parameters()) {
    at::Tensor hi = ht::allreduce(p.detach(), "overflow.check.max", hvd::ReduceOp::kMax);
    EXPECT_TRUE(at::equal(hi, p.detach()));
  }
}

TEST_F(TorchGradScaler, TheScaleGrowsAfterGrowthIntervalGoodSteps) {
  Trainer t("growth.");
  ht::GradScaler scaler({.initial_scale = 8, .growth_interval = 2, .max_scale = 32});
  const std::vector<double> expected{8, 8, 16, 16, 32, 32};  // the scale of each step; 32 is max
  for (int step = 0; step < 6; ++step) {
    t.dist.zero_grad();
    scaler.scale(t.loss(step)).backward();
    EXPECT_EQ(scaler.get_scale(), expected[step]) << step;
    scaler.step(t.dist);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 32.0);
}

TEST_F(TorchGradScaler, UnscaleBeforeStepLetsTheProgramClipTheTrueGradients) {
  Trainer plain("clip.plain."), scaled("clip.scaled.");
  ht::GradScaler scaler;
  plain.dist.zero_grad();
  plain.loss(0).backward();
  plain.dist.synchronize();
  torch::nn::utils::clip_grad_norm_(plain.model->parameters(), 0.01);
  plain.dist.step();
  scaled.dist.zero_grad();
  scaler.scale(scaled.loss(0)).backward();
  scaler.unscale_(scaled.dist);
  torch::nn::utils::clip_grad_norm_(scaled.model->parameters(), 0.01);
  EXPECT_TRUE(scaler.step(scaled.dist));
  scaler.update();
  EXPECT_TRUE(same_weights(plain.weights(), scaled.weights()));
}

TEST_F(TorchGradScaler, BFloat16GradientsAreUnscaledAndChecked) {
  Trainer plain("bf16.plain.", torch::kBFloat16), scaled("bf16.scaled.", torch::kBFloat16);
  ht::GradScaler scaler;
  plain.dist.zero_grad();
  plain.loss(0).backward();
  plain.dist.step();
  scaled.dist.zero_grad();
  scaler.scale(scaled.loss(0)).backward();
  EXPECT_EQ(scaled.model->parameters()[0].grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(scaler.step(scaled.dist));
  scaler.update();
  EXPECT_TRUE(same_weights(plain.weights(), scaled.weights()));
  // A NaN in a bfloat16 gradient is seen.
  scaled.dist.zero_grad();
  scaler.scale(scaled.loss(1)).backward();
  scaled.dist.synchronize();
  {
    torch::NoGradGuard no_grad;
    scaled.model->parameters()[1].mutable_grad().view(-1)[0] =
        std::numeric_limits<double>::quiet_NaN();
  }
  EXPECT_FALSE(scaler.step(scaled.dist));
  scaler.update();
  EXPECT_EQ(scaler.last_step().overflow_ranks, n());
}

TEST_F(TorchGradScaler, DisabledItOnlySteps) {
  Trainer plain("off.plain."), off("off.scaled.");
  ht::GradScaler scaler({.enabled = false});
  EXPECT_FALSE(scaler.is_enabled());
  plain.dist.zero_grad();
  plain.loss(0).backward();
  plain.dist.step();
  off.dist.zero_grad();
  at::Tensor loss = off.loss(0);
  EXPECT_TRUE(at::equal(scaler.scale(loss), loss));
  scaler.scale(loss).backward();
  EXPECT_TRUE(scaler.step(off.dist));
  scaler.update();
  EXPECT_TRUE(same_weights(plain.weights(), off.weights()));
}

TEST_F(TorchGradScaler, StateDictRoundTripContinuesTheSchedule) {
  Trainer t("state.");
  ht::GradScaler a({.initial_scale = 64, .growth_interval = 3});
  for (int step = 0; step < 2; ++step) {
    t.dist.zero_grad();
    a.scale(t.loss(step)).backward();
    a.step(t.dist);
    a.update();
  }
  const std::map<std::string, std::string> state = a.state_dict();
  EXPECT_EQ(state.at("grad_scaler.scale"), "64");
  EXPECT_EQ(state.at("grad_scaler.good_steps"), "2");
  ht::GradScaler b({.initial_scale = 64, .growth_interval = 3});
  b.load_state_dict(state);
  for (ht::GradScaler* s : {&a, &b}) {  // one more good step: both grow now
    t.dist.zero_grad();
    s->scale(t.loss(5)).backward();
    s->step(t.dist);
    s->update();
  }
  EXPECT_EQ(a.get_scale(), 128.0);
  EXPECT_EQ(b.get_scale(), 128.0);
  ht::GradScaler c;
  EXPECT_TRUE(throws_with([&] { c.load_state_dict({}); }, "no 'grad_scaler.scale' in the state"));
  EXPECT_TRUE(throws_with(
      [&] {
        c.load_state_dict({{"grad_scaler.scale", "x"}, {"grad_scaler.good_steps", "0"}});
      },
      "'grad_scaler.scale' is 'x', not a number"));
  EXPECT_TRUE(throws_with(
      [&] {
        c.load_state_dict({{"grad_scaler.scale", "0.5"}, {"grad_scaler.good_steps", "0"}});
      },
      "outside [min_scale, max_scale]"));
}

TEST_F(TorchGradScaler, MisuseIsAClearError) {
  EXPECT_TRUE(throws_with([] { ht::GradScaler s({.backoff_factor = 2}); },
                          "GradScalerOptions::backoff_factor is 2"));
  EXPECT_TRUE(throws_with([] { ht::GradScaler s({.initial_scale = 0}); },
                          "GradScalerOptions::initial_scale is 0"));
  Trainer t("misuse.");
  ht::GradScaler scaler;
  EXPECT_TRUE(throws_with([&] { scaler.update(); }, "update() without a step()"));
  t.dist.zero_grad();
  scaler.scale(t.loss(0)).backward();
  scaler.unscale_(t.dist);
  EXPECT_TRUE(throws_with([&] { scaler.unscale_(t.dist); }, "already called"));
  scaler.step(t.dist);
  EXPECT_TRUE(throws_with([&] { scaler.step(t.dist); }, "step() twice without update()"));
  scaler.update();
}

}  // namespace
