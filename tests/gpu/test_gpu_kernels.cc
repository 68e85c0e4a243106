// The GPU kernels against CPU references: the batched copy kernel (pack and unpack of 1..500
// tensors of odd sizes, aligned and misaligned, in one launch), and common/cuda/device_math.h's
// element-wise math, which the data path and the training layer share: scale for every dtype
// (bit-identical to the CPU path's scale_copy), the fp32 <-> fp16/bf16 casts (compression, the
// 16-bit gradient wire dtype), accumulate (bit-identical to reduce_buffers kSum) and
// scale_and_check (the loss scaler's unscale: values as the CPU's, the flag on Inf/NaN only).
// Runs in one process on device 0; skipped without a device (gpu_test_main.cc).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/cuda/device_math.h"
#include "ops/cuda/device_layout.h"
#include "ops/cuda/kernels.h"
#include "common/dtype_math.h"
#include "hvd/error.h"

namespace hvd::ops::cuda {
namespace {

#define EXPECT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

struct DeviceMem {
  explicit DeviceMem(size_t bytes) { cudaMalloc(&p, bytes ? bytes : 1); }
  ~DeviceMem() { cudaFree(p); }
  char* get() { return static_cast<char*>(p); }
  void* p = nullptr;
};

// Packs `sizes` byte ranges from a source arena (at `src_skew`-misaligned offsets) into a fusion
// layout with one launch, unpacks them into a destination arena with one launch, and compares
// both steps with memcpy on the CPU.
void round_trip(const std::vector<int64_t>& sizes, int64_t src_skew) {
  std::mt19937 rng(static_cast<unsigned>(sizes.size() * 131 + static_cast<size_t>(src_skew)));
  std::vector<int64_t> src_off;
  int64_t arena = 0;
  for (int64_t s : sizes) {
    src_off.push_back(arena + src_skew);
    arena += s + src_skew + 3;  // odd gaps: ranges start at every alignment
  }
  arena += 16;
  const auto layout = device_fusion_layout(sizes, 1);
  std::vector<unsigned char> host_src(static_cast<size_t>(arena));
  for (auto& b : host_src) b = static_cast<unsigned char>(rng());
  DeviceMem src(static_cast<size_t>(arena)), fused(static_cast<size_t>(layout.bytes + 1)),
      dst(static_cast<size_t>(arena)), descs(sizes.size() * sizeof(CopyDescriptor) + 1);
  EXPECT_CUDA(cudaMemcpy(src.get(), host_src.data(), host_src.size(), cudaMemcpyHostToDevice));
  EXPECT_CUDA(cudaMemset(dst.get(), 0xee, static_cast<size_t>(arena)));

  std::vector<CopyDescriptor> pack, unpack;
  int64_t max_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    pack.push_back({src.get() + src_off[i], fused.get() + layout.layout.offsets[i], sizes[i]});
    unpack.push_back({fused.get() + layout.layout.offsets[i], dst.get() + src_off[i], sizes[i]});
    max_bytes = std::max(max_bytes, sizes[i]);
  }
  auto* d = reinterpret_cast<CopyDescriptor*>(descs.get());
  EXPECT_CUDA(
      cudaMemcpy(d, pack.data(), pack.size() * sizeof(CopyDescriptor), cudaMemcpyHostToDevice));
  batched_copy(d, static_cast<int>(pack.size()), max_bytes, nullptr);
  EXPECT_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned char> host_fused(static_cast<size_t>(layout.bytes));
  EXPECT_CUDA(
      cudaMemcpy(host_fused.data(), fused.get(), host_fused.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizes.size(); ++i)
    ASSERT_EQ(std::memcmp(host_fused.data() + layout.layout.offsets[i],
                          host_src.data() + src_off[i], static_cast<size_t>(sizes[i])),
              0)
        << "pack: tensor " << i << " of " << sizes.size() << " (" << sizes[i] << " bytes, skew "
        << src_skew << ")";

  EXPECT_CUDA(
      cudaMemcpy(d, unpack.data(), unpack.size() * sizeof(CopyDescriptor), cudaMemcpyHostToDevice));
  batched_copy(d, static_cast<int>(unpack.size()), max_bytes, nullptr);
  EXPECT_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned char> host_dst(static_cast<size_t>(arena));
  EXPECT_CUDA(cudaMemcpy(host_dst.data(), dst.get(), host_dst.size(), cudaMemcpyDeviceToHost));
  // CPU reference: the destination arena is 0xee except for the copied ranges.
  std::vector<unsigned char> want(static_cast<size_t>(arena), 0xee);
  for (size_t i = 0; i < sizes.size(); ++i)
    std::memcpy(want.data() + src_off[i], host_src.data() + src_off[i],
                static_cast<size_t>(sizes[i]));
  ASSERT_EQ(host_dst, want) << "unpack of " << sizes.size() << " tensors, skew " << src_skew;
}

TEST(BatchedCopy, PackAndUnpackMatchCpuForOneTo500TensorsOfOddSizes) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (int count : {1, 2, 3, 7, 64, 255, 500}) {
    std::vector<int64_t> sizes;
    for (int i = 0; i < count; ++i)
      sizes.push_back((i * 7919 + count) % 4099 + (i % 5 == 0 ? 0 : 1));
    for (int64_t skew : {0, 1, 4, 16}) round_trip(sizes, skew);
  }
}

TEST(BatchedCopy, LargeAndEmptyTensorsInOneLaunch) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  round_trip({1000003 * 4, 0, 1, 7 * 2, 1000003}, 0);
  round_trip({0}, 0);
  round_trip({1}, 3);
}

// Device scale vs the CPU path's scale_copy, bit for bit, for every dtype and a few factors.
TEST(ScaleKernel, BitIdenticalToCpuForEveryDtype) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const DataType types[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                            DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                            DataType::kFloat32, DataType::kFloat64};
  for (DataType t : types) {
    for (double factor : {0.5, 1.0 / 3.0, 3.0, -2.5, 1e10}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000003}}) {
        const size_t bytes = static_cast<size_t>(n) * dtype_size(t);
        std::vector<unsigned char> in(bytes), want(bytes), got(bytes);
        std::mt19937 rng(static_cast<unsigned>(n) + static_cast<unsigned>(t) * 7u);
        for (auto& b : in) b = static_cast<unsigned char>(rng());
        if (t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
            t == DataType::kFloat64) {
          // Finite values: refill through float so that NaN payloads do not make bit compares moot.
          for (int64_t i = 0; i < n; ++i) {
            const double v = static_cast<double>(static_cast<int>(rng() % 20001) - 10000) / 64.0;
            switch (t) {
              case DataType::kFloat16: {
                uint16_t h = float_to_half(static_cast<float>(v));
                std::memcpy(&in[i * 2], &h, 2);
                break;
              }
              case DataType::kBFloat16: {
                uint16_t h = float_to_bfloat16(static_cast<float>(v));
                std::memcpy(&in[i * 2], &h, 2);
                break;
              }
              case DataType::kFloat32: {
                float f = static_cast<float>(v);
                std::memcpy(&in[i * 4], &f, 4);
                break;
              }
              default:
                std::memcpy(&in[i * 8], &v, 8);
                break;
            }
          }
        }
        scale_copy(t, in.data(), want.data(), static_cast<size_t>(n), factor);
        DeviceMem d_in(bytes), d_out(bytes);
        EXPECT_CUDA(cudaMemcpy(d_in.get(), in.data(), bytes, cudaMemcpyHostToDevice));
        device_math::scale(t, d_in.get(), d_out.get(), n, factor, nullptr);
        EXPECT_CUDA(cudaMemcpy(got.data(), d_out.get(), bytes, cudaMemcpyDeviceToHost));
        ASSERT_EQ(got, want) << dtype_name(t) << " x " << factor << ", n " << n;
        // In place gives the same.
        device_math::scale(t, d_in.get(), d_in.get(), n, factor, nullptr);
        EXPECT_CUDA(cudaMemcpy(got.data(), d_in.get(), bytes, cudaMemcpyDeviceToHost));
        ASSERT_EQ(got, want) << "in place: " << dtype_name(t) << " x " << factor << ", n " << n;
      }
    }
  }
}

TEST(CastKernels, Fp16CompressionRoundTripMatchesCpuRounding) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const int64_t n = 100003;
  std::vector<float> in(static_cast<size_t>(n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.f, 70000.f);
  for (auto& v : in) v = dist(rng);
  in[0] = 0.f;
  in[1] = 1e-8f;  // subnormal in fp16
  in[2] = 1e6f;   // overflows to inf
  DeviceMem d_in(static_cast<size_t>(n) * 4), d_half(static_cast<size_t>(n) * 2),
      d_out(static_cast<size_t>(n) * 4);
  EXPECT_CUDA(
      cudaMemcpy(d_in.get(), in.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  device_math::cast(DataType::kFloat32, DataType::kFloat16, d_in.get(), d_half.get(), n, 0.5,
                    nullptr);
  device_math::cast(DataType::kFloat16, DataType::kFloat32, d_half.get(), d_out.get(), n, 4.0,
                    nullptr);
  std::vector<uint16_t> half(static_cast<size_t>(n));
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_CUDA(
      cudaMemcpy(half.data(), d_half.get(), static_cast<size_t>(n) * 2, cudaMemcpyDeviceToHost));
  EXPECT_CUDA(
      cudaMemcpy(out.data(), d_out.get(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t want = float_to_half(in[static_cast<size_t>(i)] * 0.5f);
    ASSERT_EQ(half[static_cast<size_t>(i)], want)
        << "element " << i << " = " << in[static_cast<size_t>(i)];
    ASSERT_EQ(out[static_cast<size_t>(i)], half_to_float(want) * 4.0f) << "element " << i;
  }
}

TEST(CastKernels, Bf16RoundTripMatchesCpuCompression) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const int64_t n = 65537;
  std::vector<float> in(static_cast<size_t>(n));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1e30f, 1e30f);
  for (auto& v : in) v = dist(rng) * (rng() % 2 ? 1e-35f : 1.f);
  DeviceMem d_in(static_cast<size_t>(n) * 4), d_half(static_cast<size_t>(n) * 2),
      d_out(static_cast<size_t>(n) * 4);
  EXPECT_CUDA(
      cudaMemcpy(d_in.get(), in.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  device_math::cast(DataType::kFloat32, DataType::kBFloat16, d_in.get(), d_half.get(), n, 0.5,
                    nullptr);
  device_math::cast(DataType::kBFloat16, DataType::kFloat32, d_half.get(), d_out.get(), n, 1.0,
                    nullptr);
  std::vector<uint16_t> half(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  std::vector<float> out(static_cast<size_t>(n)), want_out(static_cast<size_t>(n));
  EXPECT_CUDA(
      cudaMemcpy(half.data(), d_half.get(), static_cast<size_t>(n) * 2, cudaMemcpyDeviceToHost));
  EXPECT_CUDA(
      cudaMemcpy(out.data(), d_out.get(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost));
  // The CPU's 16-bit gradient wire format (hvd::Strategy's gradient_dtype on the CPU).
  compress_copy(DataType::kFloat32, DataType::kBFloat16, in.data(), want.data(),
                static_cast<size_t>(n), 0.5);
  decompress_copy(DataType::kBFloat16, DataType::kFloat32, want.data(), want_out.data(),
                  static_cast<size_t>(n), 1.0);
  ASSERT_EQ(half, want);
  ASSERT_EQ(out, want_out);
  // A pair without a conversion is refused by name.
  EXPECT_THROW(device_math::cast(DataType::kFloat64, DataType::kFloat16, d_in.get(), d_half.get(),
                                 n, 1.0, nullptr),
               InvalidArgumentError);
}

TEST(AccumulateKernel, MatchesCpuSumForEveryDtype) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (DataType t :
       {DataType::kUInt8, DataType::kInt8, DataType::kInt32, DataType::kInt64, DataType::kFloat16,
        DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000003}}) {
      const size_t bytes = static_cast<size_t>(n) * dtype_size(t);
      std::vector<unsigned char> a(bytes), b(bytes), got(bytes);
      std::mt19937 rng(static_cast<unsigned>(n) * 3u + static_cast<unsigned>(t));
      std::vector<double> values(static_cast<size_t>(n) * 2);
      for (auto& v : values) v = static_cast<double>(static_cast<int>(rng() % 2001) - 1000) / 8.0;
      // Small finite values for the float types (integers wrap: any bytes do).
      auto fill = [&](std::vector<unsigned char>& buf, size_t first) {
        for (int64_t i = 0; i < n; ++i) {
          const double v = values[first + static_cast<size_t>(i)];
          const float f = static_cast<float>(v);
          uint16_t h = 0;
          switch (t) {
            case DataType::kFloat16:
              h = float_to_half(f);
              std::memcpy(&buf[i * 2], &h, 2);
              break;
            case DataType::kBFloat16:
              h = float_to_bfloat16(f);
              std::memcpy(&buf[i * 2], &h, 2);
              break;
            case DataType::kFloat32:
              std::memcpy(&buf[i * 4], &f, 4);
              break;
            case DataType::kFloat64:
              std::memcpy(&buf[i * 8], &v, 8);
              break;
            default:
              for (size_t k = 0; k < dtype_size(t); ++k)
                buf[static_cast<size_t>(i) * dtype_size(t) + k] = static_cast<unsigned char>(rng());
          }
        }
      };
      fill(a, 0);
      fill(b, static_cast<size_t>(n));
      std::vector<unsigned char> want = b;
      reduce_buffers(t, ReduceOp::kSum, a.data(), want.data(), static_cast<size_t>(n));
      DeviceMem d_a(bytes), d_b(bytes);
      EXPECT_CUDA(cudaMemcpy(d_a.get(), a.data(), bytes, cudaMemcpyHostToDevice));
      EXPECT_CUDA(cudaMemcpy(d_b.get(), b.data(), bytes, cudaMemcpyHostToDevice));
      device_math::accumulate(t, d_a.get(), d_b.get(), n, nullptr);
      EXPECT_CUDA(cudaMemcpy(got.data(), d_b.get(), bytes, cudaMemcpyDeviceToHost));
      ASSERT_EQ(got, want) << dtype_name(t) << ", n " << n;
    }
  }
}

TEST(ScaleAndCheckKernel, UnscalesAsTheCpuAndFlagsOnlyInfAndNan) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const int64_t n = 100003;
  DeviceMem d_x(static_cast<size_t>(n) * 4), d_flag(4);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 997) - 498.f;
  for (int bad : {0, 1, 2}) {  // none, an Inf, a NaN (the last element)
    std::vector<float> in = x;
    if (bad == 1) in.back() = INFINITY;
    if (bad == 2) in.back() = NAN;
    EXPECT_CUDA(
        cudaMemcpy(d_x.get(), in.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
    EXPECT_CUDA(cudaMemset(d_flag.get(), 0, 4));
    device_math::scale_and_check(DataType::kFloat32, d_x.get(), n, 1.0 / 1024,
                                 reinterpret_cast<int32_t*>(d_flag.get()), nullptr);
    std::vector<float> got(static_cast<size_t>(n));
    int32_t flag = -1;
    EXPECT_CUDA(
        cudaMemcpy(got.data(), d_x.get(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost));
    EXPECT_CUDA(cudaMemcpy(&flag, d_flag.get(), 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(flag, bad ? 1 : 0) << "case " << bad;
    for (int64_t i = 0; i + 1 < n; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], in[static_cast<size_t>(i)] * (1.0f / 1024)) << i;
  }
  // A large finite value times a factor that overflows float: flagged as well.
  const float big = 3e38f;
  EXPECT_CUDA(cudaMemcpy(d_x.get(), &big, 4, cudaMemcpyHostToDevice));
  EXPECT_CUDA(cudaMemset(d_flag.get(), 0, 4));
  device_math::scale_and_check(DataType::kFloat32, d_x.get(), 1, 4.0,
                               reinterpret_cast<int32_t*>(d_flag.get()), nullptr);
  int32_t flag = 0;
  EXPECT_CUDA(cudaMemcpy(&flag, d_flag.get(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(flag, 1);
  EXPECT_THROW(device_math::scale_and_check(DataType::kInt32, d_x.get(), 1, 0.5,
                                            reinterpret_cast<int32_t*>(d_flag.get()), nullptr),
               InvalidArgumentError);
}

}  // namespace
}  // namespace hvd::ops::cuda
