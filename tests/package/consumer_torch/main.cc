// Built against the installed package's component torch: Horovod's PyTorch API lines, in C++.
#include <hvd/torch.h>

#include <cstdio>

int main() {
  hvd::init();
  torch::manual_seed(hvd::rank());  // different initial weights on each rank
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.5));
  torch::Tensor loss = model->forward(torch::ones({2, 4}) * (hvd::rank() + 1)).pow(2).sum();

  hvd::torch::broadcast_parameters(model->named_parameters(), /*root=*/0);
  hvd::torch::broadcast_optimizer_state(optimizer, 0);
  hvd::torch::DistributedOptimizer opt(optimizer, model->named_parameters());
  opt.zero_grad();
  loss.backward();
  opt.step();

  // Every rank must now hold the same weights.
  int bad = 0;
  for (const auto& p : model->parameters()) {
    torch::Tensor hi = hvd::torch::allreduce(p.detach(), "consumer.max", hvd::ReduceOp::kMax);
    bad += !torch::equal(hi, p.detach());
  }
  torch::Tensor total = hvd::torch::allreduce(torch::full({1}, bad, torch::kInt), "consumer.bad",
                                              hvd::ReduceOp::kSum);
  const bool ok = total.item<int>() == 0;
  if (hvd::rank() == 0)
    std::printf("consumer_torch: %d ranks %s (hvd %s)\n", hvd::size(), ok ? "OK" : "WRONG",
                hvd::version_string());
  hvd::shutdown();
  return ok ? 0 : 1;
}
