// hvd::torch on CUDA tensors (label gpu; built only against a CUDA build of LibTorch with hvd's GPU
// path, e.g. pip's torch: docs/libtorch.md). ctest runs it with 1 rank on NCCL and with 2 ranks
// sharing one GPU through host staging (HVD_GPU_OPERATIONS=MPI), each also with
// HVD_ENABLE_ASYNC_COMPLETION=1, and with 2 and 3 ranks sharing the GPU on NCCL
// (HVD_NCCL_SHARED_GPU=1). Every rank checks its own values, read back through the current stream
// as PyTorch code would.
//   - allreduce (sum, average; in place and not) for every dtype NCCL and hvd share;
//   - the tensor produced on a side stream (made current) long after the call would see it on the
//     default stream, read back on that stream;
//   - allgather, broadcast, alltoall, reducescatter: results on the input's device;
//   - DistributedOptimizer on a CUDA model against the single-process update on the global batch;
//   - broadcast_parameters and broadcast_optimizer_state of a CUDA model and its Adam state;
//   - hvd::torch::Checkpointer of a CUDA model and its Adam state: save and save_async (the file
//     holds the values of the call even when a kernel changes them right after it) read back on
//     the CPU, and a CPU model's checkpoint restored on the device;
//   - hvd::torch::GradScaler on CUDA gradients: a scaled step is the unscaled step bit for bit, an
//     overflow on one rank is skipped by every rank and halves the scale alike.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvd/torch.h"
#include "tests/torch/torch_test_util.h"
#include "torch/internal.h"

namespace {

namespace ht = hvd::torch;
using namespace hvdtest::torch_util;

at::Device device() {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(
                                   hvd::local_rank() % static_cast<int>(at::cuda::device_count())));
}

class TorchCuda : public testing::Test {
 protected:
  void SetUp() override {
    hvd::init();
    c10::cuda::set_device(device().index());
  }
};

TEST_F(TorchCuda, AllreduceEveryDtype) {
  const auto dev = device();
  for (auto t : {at::kByte, at::kChar, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat,
                 at::kDouble}) {
    // Values small enough for every dtype's sum over 4 ranks: i % 7 + rank.
    const int64_t count = 1001;
    at::Tensor base = at::arange(count, at::kLong).remainder(7);
    at::Tensor mine = (base + r()).to(dev, t);
    at::Tensor want = (base * n() + n() * (n() - 1) / 2).to(at::kDouble);
    const std::string name = "torch_cuda.allreduce." + tname(t);
    at::Tensor out = ht::allreduce(mine, name + ".sum", hvd::ReduceOp::kSum);
    EXPECT_TRUE(out.is_cuda()) << name;
    EXPECT_EQ(out.device(), dev) << name;
    EXPECT_TRUE(same(out, want)) << name << " on rank " << r();
    EXPECT_TRUE(same(mine, base + r())) << name << ": the input changed on rank " << r();
    ht::allreduce_(mine, name + ".in_place", hvd::ReduceOp::kSum);
    EXPECT_TRUE(same(mine, want)) << name << " in place on rank " << r();
    if (at::isFloatingType(t)) {
      at::Tensor avg = ht::allreduce(
          at::full({7}, 2.0 * (r() + 1), at::TensorOptions(dev).dtype(t)), name + ".average");
      EXPECT_TRUE(same(avg, at::full({7}, n() + 1.0, at::kDouble))) << name << " average";
    }
  }
}

TEST_F(TorchCuda, TensorFromASideStreamIsReadInItsOrder) {
  // The tensor is written on a side stream made current, after enough work that the default
  // stream would read it too early; hvd must take the current stream as the producer, and the
  // result must be readable in that stream's order (as PyTorch code reads it).
  const auto dev = device();
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, dev.index());
  c10::cuda::CUDAStreamGuard guard(side);
  at::Tensor big = at::rand({2048, 2048}, at::TensorOptions(dev).dtype(at::kFloat));
  at::Tensor t = at::zeros({1 << 20}, at::TensorOptions(dev).dtype(at::kFloat));
  for (int i = 0; i < 20; ++i) big = at::mm(big, big).clamp_(-1, 1);
  t.add_(big.sum().mul(0).add(r() + 1));  // rank + 1, written after the matmuls
  ht::Handle h = ht::allreduce_async_(t, "torch_cuda.side_stream", hvd::ReduceOp::kSum, 1.0, 2.0);
  h.wait();
  at::Tensor host = t.to(at::kCPU);  // queued on `side`, then synchronised
  const double want = 2.0 * n() * (n() + 1) / 2;
  EXPECT_TRUE(same(host, at::full({1 << 20}, want, at::kDouble))) << "rank " << r();
}

TEST_F(TorchCuda, OtherCollectivesReturnTensorsOnTheDevice) {
  const auto dev = device();
  const auto opts = at::TensorOptions(dev).dtype(at::kFloat);
  // allgather: rank q sends q + 1 rows of 3 values, each q.
  at::Tensor g = ht::allgather(at::full({r() + 1, 3}, r(), opts), "torch_cuda.allgather");
  EXPECT_EQ(g.device(), dev);
  std::vector<at::Tensor> parts;
  for (int q = 0; q < n(); ++q) parts.push_back(at::full({q + 1, 3}, q, at::kDouble));
  EXPECT_TRUE(same(g, at::cat(parts))) << "allgather on rank " << r();
  // broadcast from the last rank, in place and not.
  const int root = n() - 1;
  at::Tensor b = at::full({5}, r() * 10.0, opts);
  at::Tensor b2 = ht::broadcast(b, root, "torch_cuda.broadcast");
  EXPECT_EQ(b2.device(), dev);
  EXPECT_TRUE(same(b2, at::full({5}, root * 10.0, at::kDouble))) << "broadcast on rank " << r();
  ht::broadcast_(b, root, "torch_cuda.broadcast_");
  EXPECT_TRUE(same(b, at::full({5}, root * 10.0, at::kDouble))) << "broadcast_ on rank " << r();
  // alltoall: rank q sends one row [q, k] to each rank k.
  at::Tensor rows = at::stack({at::full({n()}, r(), at::kDouble), at::arange(n(), at::kDouble)}, 1);
  at::Tensor a = ht::alltoall(rows.to(dev, at::kFloat), {}, "torch_cuda.alltoall");
  EXPECT_EQ(a.device(), dev);
  at::Tensor want_a =
      at::stack({at::arange(n(), at::kDouble), at::full({n()}, r(), at::kDouble)}, 1);
  EXPECT_TRUE(same(a, want_a)) << "alltoall on rank " << r();
  // reducescatter: 2 rows per rank, row i holds i + rank; rank q keeps rows 2q, 2q+1 summed.
  at::Tensor rs_in = (at::arange(2 * n(), at::kDouble).unsqueeze(1) + r()).expand({2 * n(), 4});
  at::Tensor rs = ht::reducescatter(rs_in.contiguous().to(dev, at::kFloat), "torch_cuda.rs",
                                    hvd::ReduceOp::kSum);
  EXPECT_EQ(rs.device(), dev);
  at::Tensor want_rs =
      (at::arange(2 * r(), 2 * r() + 2, at::kDouble).unsqueeze(1) * n() + n() * (n() - 1) / 2)
          .expand({2, 4});
  EXPECT_TRUE(same(rs, want_rs)) << "reducescatter on rank " << r();
}

// make_model and local_loss (on the model's device): tests/torch/torch_test_util.h.

TEST_F(TorchCuda, DistributedOptimizerMatchesTheGlobalBatch) {
  const auto dev = device();
  for (bool overlap : {true, false}) {
    torch::nn::Sequential model = make_model(dev), ref = make_model(dev);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    ht::DistributedOptimizer opt(sgd, model->named_parameters(), {.overlap = overlap});
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      local_loss(model, r(), s, 0).backward();
      opt.step();
      ref_sgd.zero_grad();
      torch::Tensor total = torch::zeros({}, torch::TensorOptions(dev).dtype(torch::kDouble));
      for (int q = 0; q < n(); ++q) total = total + local_loss(ref, q, s, 0);
      (total / n()).backward();
      ref_sgd.step();
    }
    auto a = model->named_parameters();
    auto b = ref->named_parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].value().is_cuda()) << a[i].key();
      EXPECT_TRUE(torch::allclose(a[i].value().cpu(), b[i].value().cpu(), 1e-10, 1e-9))
          << (overlap ? "hooks " : "after backward ") << a[i].key() << " on rank " << r()
          << ": distributed\n"
          << a[i].value().cpu() << "\nreference\n"
          << b[i].value().cpu();
    }
  }
}

// Linear(4, 3) and its Adam after two steps on `dev`.
struct AdamModel {
  explicit AdamModel(const at::Device& dev, double lr = 0.01)
      : model(placed(torch::nn::Linear(4, 3), dev)),
        adam(model->parameters(), torch::optim::AdamOptions(lr)) {}
  static torch::nn::Linear placed(torch::nn::Linear m, const at::Device& dev) {
    m->to(dev);
    return m;
  }
  // Two steps on a loss scaled by `factor`.
  void train(const at::Device& dev, double factor = 1.0) {
    for (int s = 0; s < 2; ++s) {
      adam.zero_grad();
      (model->forward(torch::ones({2, 4}, torch::TensorOptions(dev))) * factor).sum().backward();
      adam.step();
    }
  }
  // The parameters, then each one's exp_avg and exp_avg_sq (state_of), where they live.
  std::vector<at::Tensor> tensors() {
    std::vector<at::Tensor> v;
    for (const auto& p : model->parameters()) v.push_back(p.detach());
    for (const auto& t : state_of(adam, {"exp_avg", "exp_avg_sq"})) v.push_back(t);
    return v;
  }
  std::vector<at::Tensor> on_cpu() {
    std::vector<at::Tensor> v;
    for (const auto& t : tensors()) v.push_back(t.cpu());
    return v;
  }
  void expect_state(bool cuda, int64_t step, const char* what) {
    for (const auto& p : model->parameters()) EXPECT_EQ(p.is_cuda(), cuda) << what;
    const std::vector<at::Tensor> st = state_of(adam, {"exp_avg", "step"});
    ASSERT_EQ(st.size(), 2 * model->parameters().size()) << what << ": a parameter has no state";
    for (std::size_t i = 0; i < st.size(); i += 2) {
      EXPECT_EQ(st[i].is_cuda(), cuda) << what;
      EXPECT_EQ(st[i + 1].item<double>(), static_cast<double>(step)) << what;
    }
  }
  torch::nn::Linear model;
  torch::optim::Adam adam;
};

// broadcast_parameters and broadcast_optimizer_state of a CUDA model and its Adam state: every
// rank ends with rank 0's values, on the device. (Kept apart from the Checkpointer tests below,
// which train the same model, so that a failure is placed.)
TEST_F(TorchCuda, BroadcastsACudaModelAndItsAdamState) {
  const auto dev = device();
  torch::manual_seed(5 + r());  // other weights on every rank
  AdamModel m(dev);
  m.train(dev, r() + 1);
  ht::broadcast_parameters(m.model->named_parameters(), 0);
  ht::broadcast_optimizer_state(m.adam, 0);
  m.expect_state(true, 2, "after the broadcast");
  const std::vector<at::Tensor> all = m.tensors();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const at::Tensor& t = all[i];
    EXPECT_TRUE(t.is_cuda()) << "tensor " << i;
    const std::string name = std::to_string(i);
    const at::Tensor hi = ht::allreduce(t, "bcast.check.max." + name, hvd::ReduceOp::kMax);
    const at::Tensor lo = ht::allreduce(t, "bcast.check.min." + name, hvd::ReduceOp::kMin);
    EXPECT_TRUE(at::equal(hi.cpu(), t.cpu()) && at::equal(lo.cpu(), t.cpu()))
        << "tensor " << i << " differs between the ranks after the broadcast (rank " << r() << ")";
  }
}

// hvd::torch::Checkpointer and CUDA tensors, in three tests so that a failure is placed: a save and
// a save_async of a CUDA model (hvd built with CUDA stages the tensors through pinned memory after
// the current stream's work; save_async returns once they are copied, so an in-place change queued
// right after it never reaches the file), each read back into a CPU model (the CPU path, which
// test_torch checks), and a restore into a CUDA model of what a CPU model saved.

// A directory for every rank (rank 0's pid), removed by the destructor after a barrier.
struct CheckpointDir {
  explicit CheckpointDir(const std::string& name) {
    at::Tensor pid = ht::broadcast(at::full({1}, static_cast<int64_t>(getpid()), at::kLong), 0,
                                   "ckpt.pid." + name);
    path = (std::filesystem::temp_directory_path() /
            ("hvd-torch-ckpt-" + name + "-" + std::to_string(pid.item<int64_t>())))
               .string();
  }
  ~CheckpointDir() {
    hvd::barrier();
    if (r() == 0) remove_tree(path);
  }
  std::string path;
};

void expect_same(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(at::equal(got[i], want[i])) << what << ": tensor " << i << " on rank " << r();
}

// Model and Adam trained on `dev`, the same on every rank; `want` gets their values on the CPU.
std::unique_ptr<AdamModel> trained(const at::Device& dev, std::vector<at::Tensor>* want) {
  torch::manual_seed(5);
  auto m = std::make_unique<AdamModel>(dev);
  m->train(dev);
  *want = m->on_cpu();
  return m;
}

// A CPU model of other values on every rank, restored from `ckpt`: step `step`, values `want`.
void expect_restored_on_cpu(ht::Checkpointer& ckpt, int64_t step,
                            const std::vector<at::Tensor>& want, const char* what) {
  torch::manual_seed(900 + r());
  AdamModel back(at::kCPU, 0.5);
  EXPECT_EQ(ckpt.restore_latest(back.model, back.adam), std::optional<int64_t>(step)) << what;
  back.expect_state(false, 2, what);
  expect_same(back.on_cpu(), want, what);
}

TEST_F(TorchCuda, CheckpointerSavesACudaModelAndAdamState) {
  CheckpointDir dir("save");
  std::vector<at::Tensor> want;
  auto m = trained(device(), &want);
  ht::Checkpointer ckpt(dir.path);
  ckpt.save(7, m->model, m->adam);
  expect_restored_on_cpu(ckpt, 7, want, "save of a CUDA model, read back on the CPU");
}

TEST_F(TorchCuda, CheckpointerSaveAsyncCopiesTheCudaTensorsBeforeItReturns) {
  CheckpointDir dir("save_async");
  std::vector<at::Tensor> want;
  auto m = trained(device(), &want);
  ht::Checkpointer ckpt(dir.path);
  ckpt.save_async(8, m->model, m->adam);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : m->model->parameters()) p.add_(100.0);  // queued at once, on the same stream
  }
  ckpt.wait();
  expect_restored_on_cpu(ckpt, 8, want, "save_async of a CUDA model, read back on the CPU");
}

TEST_F(TorchCuda, CheckpointerRestoresIntoACudaModelAndAdamState) {
  CheckpointDir dir("restore");
  std::vector<at::Tensor> want;
  auto m = trained(at::kCPU, &want);
  ht::Checkpointer ckpt(dir.path);
  ckpt.save(9, m->model, m->adam);
  torch::manual_seed(900 + r());
  AdamModel back(device(), 0.5);
  EXPECT_EQ(ckpt.restore_latest(back.model, back.adam), std::optional<int64_t>(9));
  back.expect_state(true, 2, "restored on the device");
  expect_same(back.on_cpu(), want, "a CPU model's checkpoint restored into a CUDA model");
}

// The scaler's finite check runs on the gradients' device (one read back per step) and the ranks
// agree through one all-reduce of the flag. Powers of two scale and unscale exactly, so the scaled
// trainer's weights equal the unscaled one's bit for bit; the unscaled trainer sits out the step
// that the scaled one skips.
TEST_F(TorchCuda, GradScalerSkipsAnOverflowOnEveryRankAlike) {
  const auto dev = device();
  torch::nn::Sequential plain = make_model(dev), scaled = make_model(dev);
  torch::optim::SGD plain_sgd(plain->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD scaled_sgd(scaled->parameters(), torch::optim::SGDOptions(0.1));
  ht::DistributedOptimizer plain_opt(plain_sgd, plain->named_parameters(),
                                     {.name_prefix = "scaler.plain."});
  ht::DistributedOptimizer scaled_opt(scaled_sgd, scaled->named_parameters(),
                                      {.name_prefix = "scaler.scaled."});
  ht::GradScaler scaler({.initial_scale = 1024});
  const int bad_rank = n() - 1;
  auto weights = [](torch::nn::Sequential& m) {
    std::vector<at::Tensor> out;
    for (const auto& p : m->parameters()) out.push_back(p.detach().cpu());
    return out;
  };
  for (int s = 0; s < 4; ++s) {
    if (s != 1) {
      plain_opt.zero_grad();
      local_loss(plain, r(), s, 0).backward();
      plain_opt.step();
    }
    const auto before = weights(scaled);
    scaled_opt.zero_grad();
    scaler.scale(local_loss(scaled, r(), s, 0)).backward();
    scaled_opt.synchronize();  // the Inf after the all-reduce: on one rank only
    if (s == 1 && r() == bad_rank) {
      torch::NoGradGuard no_grad;
      scaled->parameters()[0].mutable_grad().view(-1)[0] = std::numeric_limits<double>::infinity();
    }
    const bool stepped = scaler.step(scaled_opt);
    scaler.update();
    EXPECT_EQ(stepped, s != 1) << "step " << s << " on rank " << r();
    if (s == 1) {
      EXPECT_EQ(scaler.last_step().overflow_ranks, 1) << "rank " << r();
      const auto after = weights(scaled);
      for (std::size_t i = 0; i < after.size(); ++i)
        EXPECT_TRUE(at::equal(before[i], after[i])) << "a skipped step changed parameter " << i;
    }
    const auto a = weights(plain), b = weights(scaled);
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(scaled->parameters()[i].is_cuda()) << i;
      EXPECT_TRUE(at::equal(a[i], b[i]))
          << "step " << s << ", parameter " << i << " on rank " << r() << ": unscaled\n"
          << a[i] << "\nscaled\n"
          << b[i];
    }
  }
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

}  // namespace
