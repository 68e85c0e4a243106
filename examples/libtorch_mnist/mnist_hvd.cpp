// Fashion-MNIST with the model of pytorch/examples' cpp/mnist (two convolutions, dropout, two fully
// connected layers; SGD with momentum). mnist.cpp is an ordinary LibTorch program, mnist_hvd.cpp
// the same made distributed with hvd::torch; README.md shows the difference.
#include <torch/torch.h>
#include <hvd/torch.h>

#include <cstdio>
#include <exception>
#include <optional>

#include "common.h"

struct NetImpl : torch::nn::Module {
  explicit NetImpl(double dropout)
      : conv1(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        conv2_drop(torch::nn::Dropout2dOptions(dropout)),
        fc1(320, 50),
        fc2(50, 10),
        dropout(dropout) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, dropout, is_training());
    return torch::log_softmax(fc2->forward(x), /*dim=*/1);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1, fc2;
  double dropout;
};
TORCH_MODULE(Net);

// One epoch from global step `step`; steps before `first_step` (done by the checkpoint this run
// resumed from) are skipped. Returns the global step reached.
template <typename DataLoader>
int64_t train(int64_t epoch, int64_t step, int64_t first_step, Net& model, DataLoader& loader,
              hvd::torch::DistributedOptimizer& optimizer, hvd::torch::GradScaler& scaler,
              const mnist::Options& opt, const mnist::Reporter& report, mnist::Timer& timer) {
  model->train();
  timer.start_epoch();
  for (auto& batch : loader) {
    if (opt.max_steps > 0 && step >= opt.max_steps) break;
    if (step++ < first_step) continue;
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      const mnist::Autocast autocast(opt.precision);  // --precision bf16|fp16
      loss = torch::nll_loss(model->forward(batch.data), batch.target);
    }
    loss = mnist::test_overflow(opt, step, report.rank(), loss);
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    timer.step(opt.batch_size);
    if (opt.log_interval > 0 && step % opt.log_interval == 0)
      report.print("epoch %lld step %lld: loss %.4f\n", static_cast<long long>(epoch),
                   static_cast<long long>(step), loss.item<double>());
  }
  return step;
}

template <typename DataLoader>
void test(Net& model, DataLoader& loader, int64_t size, const mnist::Reporter& report) {
  torch::NoGradGuard no_grad;
  model->eval();
  double loss = 0;
  int64_t correct = 0;
  for (const auto& batch : loader) {
    const torch::Tensor output = model->forward(batch.data), target = batch.target;
    loss += torch::nll_loss(output, target, {}, torch::Reduction::Sum).item<double>();
    correct += output.argmax(1).eq(target).sum().item<int64_t>();
  }
  report.print("test: loss %.4f accuracy %.4f\n", loss / size, static_cast<double>(correct) / size);
}

int main(int argc, char** argv) {
  try {
    const mnist::Options opt = mnist::parse_options(argc, argv);
    hvd::init();
    torch::manual_seed(opt.seed);
    if (opt.threads > 0) torch::set_num_threads(opt.threads);
    const std::string data = mnist::prepare_data(opt);
    const mnist::Reporter report(hvd::rank() == 0, hvd::rank());

    auto train_set = torch::data::datasets::MNIST(data)
                         .map(torch::data::transforms::Normalize<>(mnist::kMean, mnist::kStd))
                         .map(torch::data::transforms::Stack<>());
    const int64_t train_size = static_cast<int64_t>(train_set.size().value());
    auto train_loader = torch::data::make_data_loader<hvd::torch::DistributedSampler>(
        std::move(train_set), opt.batch_size / hvd::size());
    auto test_set = torch::data::datasets::MNIST(data, torch::data::datasets::MNIST::Mode::kTest)
                        .map(torch::data::transforms::Normalize<>(mnist::kMean, mnist::kStd))
                        .map(torch::data::transforms::Stack<>());
    const int64_t test_size = static_cast<int64_t>(test_set.size().value());
    auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        std::move(test_set), opt.test_batch_size);

    Net model(opt.dropout);
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(opt.lr).momentum(opt.momentum));
    std::optional<hvd::torch::Checkpointer> checkpoints;
    if (!opt.checkpoint_dir.empty()) checkpoints.emplace(opt.checkpoint_dir);
    const int64_t first_step =
        checkpoints ? checkpoints->restore_latest(model, optimizer).value_or(0) : 0;
    hvd::torch::broadcast_parameters(model->named_parameters(), /*root=*/0);
    hvd::torch::broadcast_optimizer_state(optimizer, 0);
    hvd::torch::DistributedOptimizer dist(optimizer, model->named_parameters(),
                                          {.overlap = opt.overlap});
    hvd::torch::GradScaler scaler({.enabled = opt.precision != "fp32"});  // loss scaling
    if (first_step > 0 && scaler.is_enabled())
      scaler.load_state_dict(checkpoints->checkpointer().last_metadata());
    report.print(
        "libtorch_mnist: Fashion-MNIST from %s (%lld training, %lld test images); batch %lld; SGD "
        "lr %g "
        "momentum %g; dropout %g; %d threads; starting at step %lld\n",
        opt.data_dir.c_str(), static_cast<long long>(train_size), static_cast<long long>(test_size),
        static_cast<long long>(opt.batch_size), opt.lr, opt.momentum, opt.dropout,
        torch::get_num_threads(), static_cast<long long>(first_step));

    mnist::Timer timer(opt.warmup);
    int64_t step = 0;
    for (int64_t epoch = 1; epoch <= opt.epochs && (opt.max_steps == 0 || step < opt.max_steps);
         ++epoch) {
      step = train(epoch, step, first_step, model, *train_loader, dist, scaler, opt, report, timer);
      if (step <= first_step) continue;  // an epoch the checkpoint had already done
      if (opt.test) test(model, *test_loader, test_size, report);
      if (checkpoints) checkpoints->save(step, model, optimizer, scaler.state_dict());
    }
    report.summary(timer, dist.stats().wait_share());
    if (scaler.is_enabled())
      report.print("precision %s: loss scale %g, %lld steps skipped\n", opt.precision.c_str(),
                   scaler.get_scale(), static_cast<long long>(scaler.skipped_steps()));
    report.write_weights(opt.weights_out, *model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
