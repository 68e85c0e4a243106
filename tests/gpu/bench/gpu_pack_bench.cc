// gpu_pack_bench: the batched copy kernel that packs a fused GPU batch into the device fusion
// buffer and unpacks it (ops/cuda/kernels.h, batched_copy) against cudaMemcpyAsync
// device-to-device of the same bytes, measured in this process on the same buffers.
//
//   gpu_pack_bench [--tensors 1,10,100,1000] [--total 4M,64M,256M] [-n iters] [-w warmup]
//                  [--skew BYTES] [--csv FILE]
//
// For each (K tensors, total bytes): K tensors of total/K bytes (rounded down to whole floats)
// lie in a source arena at cudaMalloc-like 256-byte aligned offsets (plus --skew bytes), with a
// gap between them; the fusion buffer has hvd's layout (ops/cuda/device_layout.h). Timed with CUDA
// events on one stream, each the mean over the iterations:
//   memcpy x1   one cudaMemcpyAsync of the packed bytes (contiguous to contiguous): the ceiling
//   memcpy xK   K cudaMemcpyAsync, one per tensor (what the kernel replaces)
//   pack        one batched_copy launch, descriptors already on the device
//   pack+desc   the runtime's pack: the descriptor upload (pageable cudaMemcpyAsync) + the launch
//   unpack      one batched_copy launch, fusion buffer -> a destination arena like the source
// Bandwidth counts the packed bytes once (like cudaMemcpy figures; reads + writes are twice that).
// The ratio is memcpy_x1_time / kernel_time = kernel bandwidth / memcpy bandwidth (target >= 0.8).
// The unpacked arena is compared with the source byte for byte: a difference is an error (exit 1).
//
// Exit status: 0 ok, 1 wrong bytes, 2 bad usage, 3 CUDA error, 77 no CUDA device (skipped).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cuda/device_layout.h"
#include "ops/cuda/kernels.h"
#include "tests/gpu/bench/bench_util.h"

namespace {

using gpubench::check;
using hvd::ops::cuda::CopyDescriptor;

struct Options {
  std::vector<int64_t> tensors{1, 10, 100, 1000};
  std::vector<int64_t> totals{4ll << 20, 64ll << 20, 256ll << 20};
  int iters = 50;
  int warmup = 5;
  int64_t skew = 0;
  std::string csv;
};

Options parse(int argc, char** argv) {
  Options o;
  gpubench::Args a(argc, argv, "gpu_pack_bench");
  while (a.next()) {
    if (a.is("--tensors"))
      o.tensors = gpubench::parse_list(a.flag(), a.value(), 1, 1 << 20);
    else if (a.is("--total"))
      o.totals = gpubench::parse_list(a.flag(), a.value(), 4, int64_t{16} << 30);
    else if (a.is("-n", "--iters"))
      o.iters = static_cast<int>(gpubench::parse_size(a.flag(), a.value(), 1, 1 << 20));
    else if (a.is("-w", "--warmup"))
      o.warmup = static_cast<int>(gpubench::parse_size(a.flag(), a.value(), 0, 1 << 20));
    else if (a.is("--skew"))
      o.skew = gpubench::parse_size(a.flag(), a.value(), 0, 255);
    else if (a.is("--csv"))
      o.csv = a.value();
    else
      a.unknown();
  }
  return o;
}

struct DeviceArena {
  explicit DeviceArena(size_t bytes) {
    check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  }
  ~DeviceArena() { cudaFree(p); }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  char* get() const { return static_cast<char*>(p); }
  void* p = nullptr;
};

// Mean milliseconds of one call of f over o.iters calls after o.warmup untimed ones.
template <class F>
double time_ms(const Options& o, cudaStream_t s, cudaEvent_t a, cudaEvent_t b, F&& f) {
  for (int i = 0; i < o.warmup; ++i) f();
  check(cudaEventRecord(a, s), "cudaEventRecord");
  for (int i = 0; i < o.iters; ++i) f();
  check(cudaEventRecord(b, s), "cudaEventRecord");
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return static_cast<double>(ms) / o.iters;
}

struct Row {
  int64_t k = 0, total = 0, per_tensor = 0;
  double memcpy1 = 0, memcpyk = 0, pack = 0, pack_desc = 0, unpack = 0;  // ms
  int64_t wrong = 0;
};

Row run_case(const Options& o, int64_t k, int64_t total, cudaStream_t s, cudaEvent_t ea,
             cudaEvent_t eb) {
  Row r;
  r.k = k;
  r.total = total;
  r.per_tensor = std::max<int64_t>(4, total / k / 4 * 4);
  const std::vector<int64_t> sizes(static_cast<size_t>(k), r.per_tensor);
  const auto layout = hvd::ops::cuda::device_fusion_layout(sizes, 4);
  // Source and destination arenas: tensor i at a 256-byte boundary + skew, 256 bytes of gap after.
  std::vector<int64_t> off;
  int64_t arena = 0;
  for (int64_t sz : sizes) {
    off.push_back(arena + o.skew);
    arena += (sz + o.skew + 255) / 256 * 256 + 256;
  }
  DeviceArena src(static_cast<size_t>(arena)), dst(static_cast<size_t>(arena)),
      fused(static_cast<size_t>(layout.bytes)), flat(static_cast<size_t>(layout.bytes)),
      descs(2 * sizes.size() * sizeof(CopyDescriptor));
  // A byte pattern that differs per position (bytes of a counter), so a misplaced range shows.
  {
    std::vector<uint32_t> host(static_cast<size_t>(arena / 4 + 1));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
    check(cudaMemcpy(src.get(), host.data(), static_cast<size_t>(arena), cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
  check(cudaMemset(dst.get(), 0, static_cast<size_t>(arena)), "cudaMemset");
  std::vector<CopyDescriptor> pack, unpack;
  for (size_t i = 0; i < sizes.size(); ++i) {
    pack.push_back({src.get() + off[i], fused.get() + layout.layout.offsets[i], sizes[i]});
    unpack.push_back({fused.get() + layout.layout.offsets[i], dst.get() + off[i], sizes[i]});
  }
  auto* dpack = reinterpret_cast<CopyDescriptor*>(descs.get());
  auto* dunpack = dpack + sizes.size();
  const size_t dbytes = sizes.size() * sizeof(CopyDescriptor);
  check(cudaMemcpy(dpack, pack.data(), dbytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(dunpack, unpack.data(), dbytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  const int count = static_cast<int>(k);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the setup ran on the legacy stream

  // The tensors' bytes exactly (not the fusion buffer's alignment gaps), contiguous to contiguous.
  const size_t tensor_bytes = static_cast<size_t>(r.per_tensor) * static_cast<size_t>(k);
  r.memcpy1 = time_ms(o, s, ea, eb, [&] {
    check(cudaMemcpyAsync(flat.get(), fused.get(), tensor_bytes, cudaMemcpyDeviceToDevice, s),
          "cudaMemcpyAsync");
  });
  r.memcpyk = time_ms(o, s, ea, eb, [&] {
    for (const auto& d : pack)
      check(
          cudaMemcpyAsync(d.dst, d.src, static_cast<size_t>(d.bytes), cudaMemcpyDeviceToDevice, s),
          "cudaMemcpyAsync");
  });
  r.pack =
      time_ms(o, s, ea, eb, [&] { hvd::ops::cuda::batched_copy(dpack, count, r.per_tensor, s); });
  // As ops/nccl/allreduce.cc does it: a pageable upload of the descriptors, then the launch. The
  // upload goes to a scratch copy so that the resident descriptors stay valid.
  DeviceArena scratch(dbytes);
  r.pack_desc = time_ms(o, s, ea, eb, [&] {
    check(cudaMemcpyAsync(scratch.get(), pack.data(), dbytes, cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync");
    hvd::ops::cuda::batched_copy(reinterpret_cast<CopyDescriptor*>(scratch.get()), count,
                                 r.per_tensor, s);
  });
  r.unpack =
      time_ms(o, s, ea, eb, [&] { hvd::ops::cuda::batched_copy(dunpack, count, r.per_tensor, s); });
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");

  // Check: every tensor went source -> fusion buffer -> destination unchanged.
  std::vector<unsigned char> hs(static_cast<size_t>(arena)), hd(static_cast<size_t>(arena));
  check(cudaMemcpy(hs.data(), src.get(), hs.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(hd.data(), dst.get(), hd.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (size_t i = 0; i < sizes.size(); ++i)
    if (std::memcmp(hs.data() + off[i], hd.data() + off[i], static_cast<size_t>(sizes[i])) != 0)
      ++r.wrong;
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);  // bad flags exit 2 even without a device
  if (int rc = gpubench::skip_without_device("gpu_pack_bench")) return rc;
  gpubench::print_device_header(
      "gpu_pack_bench: batched pack/unpack kernel vs cudaMemcpyAsync D2D");
  std::printf(
      "# iters %d  warmup %d  skew %lld; bandwidth = packed bytes / time (count once); "
      "ratio = memcpy x1 time / kernel time (target >= 0.80)\n",
      o.iters, o.warmup, static_cast<long long>(o.skew));
  std::printf("# %6s %12s %12s | %10s %10s %10s %10s %10s | %8s %8s %8s %9s | %6s\n", "K",
              "total(B)", "tensor(B)", "memcpy1us", "memcpyKus", "pack_us", "pack+d_us",
              "unpack_us", "memcpyGB/s", "packGB/s", "pack/mc", "unpack/mc", "#wrong");
  cudaStream_t s;
  cudaEvent_t ea, eb;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&ea), "cudaEventCreate");
  check(cudaEventCreate(&eb), "cudaEventCreate");
  gpubench::Csv csv(
      o.csv,
      "k,total_bytes,tensor_bytes,memcpy1_us,memcpyk_us,pack_us,pack_desc_us,unpack_us,"
      "pack_ratio,pack_desc_ratio,unpack_ratio,wrong");
  int64_t wrong = 0;
  for (int64_t total : o.totals) {
    for (int64_t k : o.tensors) {
      const Row r = run_case(o, k, total, s, ea, eb);
      const double bytes = static_cast<double>(r.per_tensor) * static_cast<double>(r.k);
      auto gbs = [&](double ms) { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0; };
      auto ratio = [&](double ms) { return ms > 0 ? r.memcpy1 / ms : 0.0; };
      std::printf(
          "  %6lld %12lld %12lld | %10.2f %10.2f %10.2f %10.2f %10.2f | %8.1f %8.1f %8.3f %9.3f | "
          "%6lld\n",
          static_cast<long long>(r.k), static_cast<long long>(r.total),
          static_cast<long long>(r.per_tensor), r.memcpy1 * 1e3, r.memcpyk * 1e3, r.pack * 1e3,
          r.pack_desc * 1e3, r.unpack * 1e3, gbs(r.memcpy1), gbs(r.pack), ratio(r.pack),
          ratio(r.unpack), static_cast<long long>(r.wrong));
      std::fflush(stdout);
      csv.row({std::to_string(r.k), std::to_string(r.total), std::to_string(r.per_tensor),
               gpubench::fmt(r.memcpy1 * 1e3), gpubench::fmt(r.memcpyk * 1e3),
               gpubench::fmt(r.pack * 1e3), gpubench::fmt(r.pack_desc * 1e3),
               gpubench::fmt(r.unpack * 1e3), gpubench::fmt(ratio(r.pack)),
               gpubench::fmt(ratio(r.pack_desc)), gpubench::fmt(ratio(r.unpack)),
               std::to_string(r.wrong)});
      wrong += r.wrong;
    }
  }
  std::printf("# wrong tensors after pack + unpack: %lld: %s\n", static_cast<long long>(wrong),
              wrong ? "FAILED" : "OK");
  cudaEventDestroy(ea);
  cudaEventDestroy(eb);
  cudaStreamDestroy(s);
  return wrong ? 1 : 0;
} catch (const gpubench::UsageError& e) {
  std::fprintf(stderr, "gpu_pack_bench: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpu_pack_bench: %s\n", e.what());
  return 3;
}
