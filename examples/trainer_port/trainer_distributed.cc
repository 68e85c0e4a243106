// trainer_port: logistic regression with minibatch SGD on synthetic data, written once as an
// ordinary single-process trainer (trainer_single.cc) and once made distributed with hvd
// (trainer_distributed.cc, run with `mpirun -np N`). `diff trainer_single.cc
// trainer_distributed.cc` shows every change a port takes; docs/trainer_port.md walks through it.
#include <cstdio>
#include <exception>
#include <span>
#include <vector>

#include <hvd/hvd.h>

#include "logistic_regression.h"
#include "options.h"

int main(int argc, char** argv) {
  try {
    const trainer_port::Options opt = trainer_port::parse_options(argc, argv);
    hvd::init();
    const trainer_port::Dataset data =
        trainer_port::make_dataset(opt.seed, opt.num_samples, opt.num_features);
    std::vector<float> params = trainer_port::init_params(opt.seed, opt.num_features);
    hvd::broadcast(params, 0, "initial_params");  // every rank starts from rank 0's weights

    // Each step takes the next global batch of a shuffled epoch; each rank its own slice of it.
    const int64_t local_batch = trainer_port::local_batch_size(opt.global_batch, hvd::size());
    const int64_t first = hvd::rank() * local_batch;
    const int64_t steps_per_epoch = data.num_samples / opt.global_batch;
    std::vector<int64_t> order;
    double epoch_loss = 0;
    int64_t epoch_steps = 0;
    for (int64_t step = 0; step < opt.steps; ++step) {
      const int64_t epoch = step / steps_per_epoch, batch = step % steps_per_epoch;
      if (batch == 0) order = trainer_port::shuffled_indices(data.num_samples, opt.seed + epoch);
      const std::span<const int64_t> rows(&order[batch * opt.global_batch + first], local_batch);

      std::vector<float> gradient = trainer_port::batch_gradient(data, params, rows);
      hvd::allreduce(gradient, "gradient");  // average over ranks = mean over the global batch
      trainer_port::sgd_step(params, gradient, opt.lr);

      epoch_loss += gradient.back();
      ++epoch_steps;
      if (batch + 1 == steps_per_epoch || step + 1 == opt.steps) {
        if (hvd::rank() == 0)  // one rank prints and writes
          std::printf("epoch %3lld  step %5lld  loss %.6f\n", static_cast<long long>(epoch),
                      static_cast<long long>(step + 1), epoch_loss / epoch_steps);
        epoch_loss = 0;
        epoch_steps = 0;
      }
    }

    if (hvd::rank() == 0 && !opt.weights_out.empty())
      trainer_port::write_params(opt.weights_out, params);
    hvd::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: %s\n", e.what());
    return 1;
  }
  return 0;
}
