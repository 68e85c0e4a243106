// Activation recomputation on the cuDNN model (ModelOptions::recompute, model/recompute.h; the
// graph is shared with the CPU model, model/cnn_graph.h): losses, logits and every gradient
// bitwise those of a CudnnModel that keeps its activations (deterministic cuDNN algorithms), for
// several block choices and batch sizes, over SGD steps; the device activation bytes the graph
// counts equal the CPU model's for the same shapes and fall. Exits 77 (ctest: skipped) with a
// message when no CUDA device is visible; runs on device 0.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/cudnn_model.h"
#include "gpu/sgd_momentum.h"
#include "model/model.h"
#include "model/recompute.h"

namespace train_cnn::gpu {
namespace {

std::vector<float> random_images(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<int32_t> random_labels(size_t n, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(classes));
  return v;
}

model::ModelOptions with(model::RecomputeBlocks r) {
  model::ModelOptions o;
  o.recompute = r;
  return o;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudnnRecompute, GradientsLossesAndLogitsAreBitwiseThoseOfKeptActivations) {
  for (const model::RecomputeBlocks& r :
       {model::RecomputeBlocks::all(), model::RecomputeBlocks{.conv1 = true},
        model::RecomputeBlocks{.conv2 = true, .fc = true}}) {
    SCOPED_TRACE("recompute " + model::describe(r));
    CudnnModel kept, recomputed(with(r));
    kept.initialize(5);
    recomputed.initialize(5);
    const model::SgdMomentumOptions o{.momentum = 0.9f, .weight_decay = 5e-4f};
    SgdMomentum opt_kept(kept.context(), kept.num_parameters(), o);
    SgdMomentum opt_rec(recomputed.context(), recomputed.num_parameters(), o);
    uint32_t seed = 10;
    for (int batch : {7, 32, 1, 32}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      const auto images = random_images(batch * kept.input_size(), seed);
      const auto labels = random_labels(batch, kept.num_classes(), seed + 1);
      seed += 2;
      std::vector<size_t> order_kept, order_rec;
      kept.zero_gradients();
      const model::LossResult a = kept.forward(images, labels, batch);
      kept.backward([&](size_t i) { order_kept.push_back(i); });
      recomputed.zero_gradients();
      const model::LossResult b = recomputed.forward(images, labels, batch);
      recomputed.backward([&](size_t i) { order_rec.push_back(i); });
      EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << a.loss << " vs " << b.loss;
      EXPECT_EQ(a.correct, b.correct);
      EXPECT_EQ(order_kept, order_rec);
      EXPECT_TRUE(bitwise_equal(kept.logits_to_host(), recomputed.logits_to_host()));
      std::vector<float> ga(kept.num_parameters()), gb(ga.size());
      kept.copy_gradients_to_host(ga);
      recomputed.copy_gradients_to_host(gb);
      EXPECT_TRUE(bitwise_equal(ga, gb));
      opt_kept.step(kept.flat_parameters(), kept.flat_gradients(), 0.05f);
      opt_rec.step(recomputed.flat_parameters(), recomputed.flat_gradients(), 0.05f);
    }
    std::vector<float> pa(kept.num_parameters()), pb(pa.size());
    kept.copy_parameters_to_host(pa);
    recomputed.copy_parameters_to_host(pb);
    EXPECT_TRUE(bitwise_equal(pa, pb)) << "parameters after 4 SGD steps";
  }
}

TEST(CudnnRecompute, DeviceActivationBytesAreTheCpuModelsAndFall) {
  const int batch = 64;
  const auto images = random_images(batch * 784, 3);
  const auto labels = random_labels(batch, 10, 4);
  int64_t peak[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const model::ModelOptions o =
        with(k == 0 ? model::RecomputeBlocks{} : model::RecomputeBlocks::all());
    CudnnModel gpu(o);
    model::Model cpu(o);
    gpu.initialize(1);
    cpu.initialize(1);
    gpu.forward(images, labels, batch);
    gpu.backward();
    cpu.forward(images, labels, batch);
    cpu.backward();
    const model::ActivationMemory g = gpu.activation_memory(), c = cpu.activation_memory();
    EXPECT_EQ(g.peak_bytes, c.peak_bytes) << "recompute " << model::describe(o.recompute);
    EXPECT_EQ(g.reserved_bytes, c.reserved_bytes) << "recompute " << model::describe(o.recompute);
    peak[k] = g.peak_bytes;
  }
  EXPECT_LT(peak[1], peak[0] * 7 / 10) << peak[1] << " vs " << peak[0];
}

}  // namespace
}  // namespace train_cnn::gpu

int main(int argc, char** argv) {
  if (train_cnn::gpu::device_count() == 0) {
    std::printf(
        "SKIPPED: no CUDA device visible; test_cnn_cudnn_recompute compares the cuDNN model with "
        "and without activation recomputation on a GPU.\n");
    std::fflush(stdout);
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
