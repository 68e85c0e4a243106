// The training layer on CUDA tensors (training/device.h), each against the same facility on CPU
// tensors with the same values on the same rank: gradient accumulation and the 16-bit gradient
// wire dtype (hvd::Strategy), unscaling with an agreed overflow (hvd::LossScaler), and checkpoints
// of device tensors (hvd::Checkpointer, save and save_async). The values are multiples of 1/2 no
// larger than 15.5, so every sum the strategy makes (up to 4 micro-steps, a prescale of 1/2 or
// 1/4, up to 4 ranks, in float32, float16 or bfloat16) is exact in any order: NCCL's ring and MPI
// add the ranks in different orders, and the device and CPU results must still be bitwise equal
// (the average's one division rounds alike on both: ops/nccl/allreduce.cc). Every
// device call goes on a stream of the test's own (not the default stream). ctest runs it with 1
// rank (NCCL), with 2 ranks sharing one GPU (HVD_GPU_OPERATIONS=MPI), and with 2 and 3 ranks
// sharing it on NCCL (HVD_NCCL_SHARED_GPU=1); skipped without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/dtype_math.h"
#include "hvd/checkpoint.h"
#include "hvd/error.h"
#include "hvd/loss_scaler.h"
#include "hvd/strategy.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

int my_device() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return hvd::local_rank() % n;
}

// Bytes on the device, copied from and to host vectors.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) { cudaMalloc(&data_, bytes ? bytes : 1); }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <class T>
  void upload(const std::vector<T>& v, cudaStream_t s) {
    cudaMemcpyAsync(data_, v.data(), bytes_, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
  }
  template <class T>
  std::vector<T> download(cudaStream_t s) const {
    std::vector<T> v(bytes_ / sizeof(T));
    cudaStreamSynchronize(s);
    cudaMemcpy(v.data(), data_, bytes_, cudaMemcpyDeviceToHost);
    return v;
  }
  void* get() { return data_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// Value i of gradient g at micro-step s on rank r: a multiple of 1/2 in [-15.5, 15.5]. With 4
// ranks, a 16-bit sum of prescaled values is at most 62 in quarters (248 of them, within the 8
// significant bits of bfloat16).
float value(int g, int s, int r, int64_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + g * 13 + s * 29 + r * 31) % 63) - 31) / 2.0f;
}

class TrainingOnDevice : public HvdTest {
 protected:
  void SetUp() override {
    HvdTest::SetUp();
    cudaSetDevice(my_device());
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  }
  void TearDown() override { cudaStreamDestroy(stream_); }
  hvd::TensorRef on_device(DeviceBytes& d, hvd::DataType t, int64_t n) {
    return hvd::TensorRef(d.get(), t, {n}, hvd::Device::cuda(my_device()), stream_);
  }
  void compare_with_cpu(const hvd::StrategyOptions& options);
  cudaStream_t stream_ = nullptr;
};

// Runs k micro-steps of two float32 gradients through a strategy with these options, on the
// device and on the CPU, and compares what each holds after the communicating step.
void TrainingOnDevice::compare_with_cpu(const hvd::StrategyOptions& options) {
  const int rank = rank_;
  cudaStream_t stream = stream_;
  const std::vector<int64_t> sizes = {1000003, 7};
  hvd::MirroredStrategy cpu(options), gpu(options);
  std::vector<std::vector<float>> host(sizes.size());
  std::vector<std::unique_ptr<DeviceBytes>> dev;
  for (size_t g = 0; g < sizes.size(); ++g)
    dev.push_back(std::make_unique<DeviceBytes>(static_cast<size_t>(sizes[g]) * 4));
  for (int s = 0; s < options.accumulation_steps; ++s) {
    for (size_t g = 0; g < sizes.size(); ++g) {
      host[g].resize(static_cast<size_t>(sizes[g]));
      for (int64_t i = 0; i < sizes[g]; ++i)
        host[g][static_cast<size_t>(i)] = value(static_cast<int>(g), s, rank, i);
      dev[g]->upload(host[g], stream);
    }
    cpu.begin_step();
    for (size_t g = 0; g < sizes.size(); ++g)
      cpu.gradient_ready("g" + std::to_string(g), hvd::as_tensor(std::span<float>(host[g])));
    const bool cpu_steps = cpu.synchronize_gradients();
    gpu.begin_step();
    for (size_t g = 0; g < sizes.size(); ++g)
      gpu.gradient_ready("g" + std::to_string(g),
                         on_device(*dev[g], hvd::DataType::kFloat32, sizes[g]));
    const bool gpu_steps = gpu.synchronize_gradients();
    ASSERT_EQ(gpu_steps, cpu_steps) << "micro-step " << s;
    ASSERT_EQ(gpu_steps, s == options.accumulation_steps - 1) << "micro-step " << s;
  }
  for (size_t g = 0; g < sizes.size(); ++g) {
    const auto got = dev[g]->download<float>(stream);
    ASSERT_EQ(got, host[g]) << "gradient " << g << " (accumulation_steps "
                            << options.accumulation_steps << ", gradient_dtype "
                            << hvd::dtype_name(options.gradient_dtype) << ")";
  }
}

// 3 micro-steps prescale by 1/3, which rounds: the prescaled values then sum exactly only on 1
// or 2 ranks (a + b = b + a), so 3 is checked there; 2 and 4 everywhere.
TEST_F(TrainingOnDevice, AccumulationMatchesTheCpuStrategy) {
  for (int k : {2, 3, 4})
    if (k != 3 || size_ <= 2) compare_with_cpu({.accumulation_steps = k});
}

TEST_F(TrainingOnDevice, SixteenBitWireMatchesTheCpuStrategy) {
  for (hvd::DataType wire : {hvd::DataType::kFloat16, hvd::DataType::kBFloat16})
    for (int k : {1, 2}) compare_with_cpu({.accumulation_steps = k, .gradient_dtype = wire});
}

TEST_F(TrainingOnDevice, LossScalerUnscalesOnTheDeviceAndAgreesOnOverflow) {
  const int64_t n = 100003;
  const hvd::DataType types[] = {hvd::DataType::kFloat32, hvd::DataType::kFloat16,
                                 hvd::DataType::kBFloat16};
  hvd::LossScaler cpu({.initial_scale = 1024, .name = "cpu"}), gpu({.initial_scale = 1024});
  for (int step = 0; step < 2; ++step) {
    // Step 1: the last rank's float16 gradient holds an Inf; every rank must skip.
    const bool inject = step == 1 && rank_ == size_ - 1;
    std::vector<std::vector<uint8_t>> host;
    std::vector<std::unique_ptr<DeviceBytes>> dev;
    std::vector<hvd::TensorRef> cpu_grads, gpu_grads;
    for (hvd::DataType t : types) {
      const size_t es = hvd::dtype_size(t);
      std::vector<uint8_t> bytes(static_cast<size_t>(n) * es);
      for (int64_t i = 0; i < n; ++i) {
        float v = value(static_cast<int>(t), step, rank_, i) * 1024;
        if (inject && t == hvd::DataType::kFloat16 && i == n / 2) v = INFINITY;
        uint16_t h =
            t == hvd::DataType::kFloat16 ? hvd::float_to_half(v) : hvd::float_to_bfloat16(v);
        if (t == hvd::DataType::kFloat32)
          std::memcpy(&bytes[static_cast<size_t>(i) * 4], &v, 4);
        else
          std::memcpy(&bytes[static_cast<size_t>(i) * 2], &h, 2);
      }
      dev.push_back(std::make_unique<DeviceBytes>(bytes.size()));
      dev.back()->upload(bytes, stream_);
      host.push_back(std::move(bytes));
    }
    for (size_t g = 0; g < host.size(); ++g) {
      cpu_grads.emplace_back(host[g].data(), types[g], hvd::Shape{n});
      gpu_grads.push_back(on_device(*dev[g], types[g], n));
    }
    const bool cpu_steps = cpu.unscale_and_update(cpu_grads);
    const hvd::LossScaleStep d = gpu.update(gpu.unscale(gpu_grads));
    EXPECT_EQ(!d.skipped, cpu_steps) << "step " << step;
    EXPECT_EQ(d.skipped, step == 1) << "step " << step;
    EXPECT_EQ(d.overflow_ranks, step == 1 ? 1 : 0) << "step " << step;
    EXPECT_EQ(gpu.scale(), cpu.scale());
    for (size_t g = 0; g < host.size(); ++g)
      ASSERT_EQ(dev[g]->download<uint8_t>(stream_), host[g])
          << hvd::dtype_name(types[g]) << ", step " << step;
  }
}

TEST_F(TrainingOnDevice, CheckpointerSavesAndRestoresDeviceTensors) {
  // One directory for every rank (rank 0's pid), removed at the end.
  std::vector<int64_t> pid = {static_cast<int64_t>(getpid())};
  hvd::broadcast(pid, 0, "test.ckpt.dir");
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hvd_training_device." + std::to_string(pid[0])))
          .string();
  const int64_t n = 1000003;
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = value(0, 0, 0, i);
  std::vector<int32_t> counts = {1, 2, 3, 4, 5, 6, 7};
  DeviceBytes dw(w.size() * 4), dc(counts.size() * 4);
  dw.upload(w, stream_);
  dc.upload(counts, stream_);
  std::vector<hvd::NamedTensor> tensors = {{"w", on_device(dw, hvd::DataType::kFloat32, n)},
                                           {"counts", on_device(dc, hvd::DataType::kInt32, 7)}};
  hvd::Checkpointer ckpt(dir, 2);
  ckpt.save(5, tensors, {{"note", "device"}});
  // Cleared on the device, then restored there.
  cudaMemsetAsync(dw.get(), 0, w.size() * 4, stream_);
  cudaMemsetAsync(dc.get(), 0, counts.size() * 4, stream_);
  ASSERT_EQ(ckpt.restore_latest(tensors), std::optional<int64_t>(5));
  EXPECT_EQ(dw.download<float>(stream_), w);
  EXPECT_EQ(dc.download<int32_t>(stream_), counts);
  EXPECT_EQ(ckpt.last_metadata().at("note"), "device");
  // The file is the one a CPU save of the same values writes: a CPU restore reads the same values.
  std::vector<float> w_host(w.size(), -1.f);
  std::vector<int32_t> c_host(counts.size(), -1);
  std::vector<hvd::NamedTensor> host = {{"w", hvd::as_tensor(std::span<float>(w_host))},
                                        {"counts", hvd::as_tensor(std::span<int32_t>(c_host))}};
  ASSERT_EQ(ckpt.restore_latest(host), std::optional<int64_t>(5));
  EXPECT_EQ(w_host, w);
  EXPECT_EQ(c_host, counts);
  // save_async: the pinned copies are taken before the call returns, so the kernels queued on the
  // stream right after it (the next step's) do not reach the file.
  ckpt.save_async(6, tensors);
  cudaMemsetAsync(dw.get(), 0, w.size() * 4, stream_);
  cudaMemsetAsync(dc.get(), 0, counts.size() * 4, stream_);
  ckpt.wait();
  std::fill(w_host.begin(), w_host.end(), -1.f);
  ASSERT_EQ(ckpt.restore_latest(host), std::optional<int64_t>(6));
  EXPECT_EQ(w_host, w);
  ASSERT_EQ(ckpt.restore_latest(tensors), std::optional<int64_t>(6));
  EXPECT_EQ(dc.download<int32_t>(stream_), counts);
  hvd::barrier();
  if (rank_ == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hvdtest
