// hvd::torch on process sets, on 1-3 ranks (hvd/process_set.h; docs/libtorch.md): every torch
// collective with a trailing process set runs over its members (the even and the odd ranks), and a
// DistributedOptimizer whose DistributedOptimizerOptions::process_set is this rank's parity set
// averages the gradients over that set only: each set's ranks end with the weights of a
// single-process run over their own samples. A non-member's DistributedOptimizer is refused. Every
// rank checks its own values.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "hvd/torch.h"

namespace {

namespace ht = hvd::torch;

class TorchProcessSets : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

std::vector<int> parity_ranks(int parity) {
  std::vector<int> out;
  for (int r = 0; r < hvd::size(); ++r)
    if (r % 2 == parity) out.push_back(r);
  return out;
}

}  // namespace

TEST_F(TorchProcessSets, CollectivesOverTheSet) {
  if (hvd::size() < 2) GTEST_SKIP() << "needs 2 ranks";
  hvd::ProcessSet even = hvd::add_process_set(parity_ranks(0));
  hvd::ProcessSet odd = hvd::add_process_set(parity_ranks(1));
  const hvd::ProcessSet& set = hvd::rank() % 2 == 0 ? even : odd;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat);
  double sum = 0;
  for (int g : set.ranks()) sum += g + 1;
  at::Tensor t = torch::full({3}, hvd::rank() + 1.0, opts);
  at::Tensor r = ht::allreduce(t, "tps.sum", hvd::ReduceOp::kSum, 1.0, 1.0, set);
  EXPECT_TRUE(torch::allclose(r, torch::full({3}, sum, opts)));
  ht::allreduce_(t, "tps.avg", hvd::ReduceOp::kAverage, 1.0, 1.0, set);
  EXPECT_TRUE(torch::allclose(t, torch::full({3}, sum / set.size(), opts)));
  at::Tensor g =
      ht::allgather(torch::full({1, 2}, static_cast<double>(hvd::rank()), opts), "tps.gather", set);
  ASSERT_EQ(g.size(0), set.size());
  for (int i = 0; i < set.size(); ++i)
    EXPECT_EQ(g[i][1].item<float>(), static_cast<float>(set.ranks()[static_cast<size_t>(i)]));
  at::Tensor b = torch::full({2}, static_cast<double>(hvd::rank()), opts);
  ht::broadcast_(b, set.ranks().back(), "tps.bcast", set);
  EXPECT_EQ(b[0].item<float>(), static_cast<float>(set.ranks().back()));
  at::Tensor rs =
      ht::reducescatter(torch::ones({set.size() * 2}, opts), "tps.rs", hvd::ReduceOp::kSum, set);
  EXPECT_TRUE(torch::allclose(rs, torch::full({2}, static_cast<double>(set.size()), opts)));
  hvd::remove_process_set(even);
  hvd::remove_process_set(odd);
}

// A linear model trained by each parity set on its own samples: the set's ranks end with the
// weights of one process that trains on the set's global batch.
TEST_F(TorchProcessSets, DistributedOptimizerAveragesOverItsSet) {
  if (hvd::size() < 2) GTEST_SKIP() << "needs 2 ranks";
  hvd::ProcessSet even = hvd::add_process_set(parity_ranks(0));
  hvd::ProcessSet odd = hvd::add_process_set(parity_ranks(1));
  const hvd::ProcessSet& set = hvd::rank() % 2 == 0 ? even : odd;
  const hvd::ProcessSet& other = hvd::rank() % 2 == 0 ? odd : even;
  auto make = [] {
    torch::manual_seed(5);
    torch::nn::Linear m(4, 1);
    m->to(torch::kDouble);
    return m;
  };
  // Rank g's samples: x = g + 1 + k/10 in every feature, y = the sum of x.
  auto batch = [](int g) {
    at::Tensor x = torch::empty({3, 4}, torch::kDouble);
    for (int k = 0; k < 3; ++k) x[k].fill_(g + 1 + k / 10.0);
    return std::make_pair(x, x.sum(1, true));
  };
  torch::nn::Linear dist = make();
  torch::optim::SGD sgd(dist->parameters(), 0.01);
  ht::DistributedOptimizerOptions o;
  o.process_set = set;
  o.name_prefix = "tps.";
  ht::DistributedOptimizer opt(sgd, dist->named_parameters(), o);
  // The reference: one process, the set's samples as one batch (the mean of the ranks' means).
  torch::nn::Linear ref = make();
  torch::optim::SGD ref_sgd(ref->parameters(), 0.01);
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    auto [x, y] = batch(hvd::rank());
    torch::mse_loss(dist->forward(x), y).backward();
    opt.step();
    ref_sgd.zero_grad();
    at::Tensor loss = torch::zeros({}, torch::kDouble);
    for (int g : set.ranks()) {
      auto [gx, gy] = batch(g);
      loss = loss + torch::mse_loss(ref->forward(gx), gy);
    }
    (loss / set.size()).backward();
    ref_sgd.step();
  }
  EXPECT_TRUE(torch::allclose(dist->weight, ref->weight, 1e-9, 1e-12))
      << dist->weight << " vs " << ref->weight;
  EXPECT_TRUE(torch::allclose(dist->bias, ref->bias, 1e-9, 1e-12));
  // Constructed on a rank outside its set: refused at once.
  torch::nn::Linear stray = make();
  torch::optim::SGD stray_sgd(stray->parameters(), 0.01);
  ht::DistributedOptimizerOptions so;
  so.process_set = other;
  so.name_prefix = "tps.stray.";
  EXPECT_THROW(ht::DistributedOptimizer(stray_sgd, stray->named_parameters(), so),
               hvd::InvalidArgumentError);
  hvd::remove_process_set(even);
  hvd::remove_process_set(odd);
}
