// Every collective on CUDA tensors x float32/float16/bfloat16/int32 x sizes 0, 1, 7, 1000003,
// through the public API. ctest runs it with 1 rank on NCCL, with 2 ranks sharing one GPU with
// HVD_GPU_OPERATIONS=MPI (host staging), and with 2 and 3 ranks sharing one GPU on NCCL
// (HVD_NCCL_SHARED_GPU=1). Each rank computes its own expected values.
// Also: a tensor produced by a slow kernel on the user's stream is reduced only after that kernel
// (fails if the NCCL stream does not wait for the user's stream); send/recv around the ring and a
// process set's collectives on device tensors (2 ranks and more).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

cudaError_t launch_slow_fill(float* data, int64_t n, float value, double ms, cudaStream_t stream);

namespace hvdtest {
namespace {

const std::vector<DataType>& gpu_dtypes() {
  static const std::vector<DataType> v = {DataType::kFloat32, DataType::kFloat16,
                                          DataType::kBFloat16, DataType::kInt32};
  return v;
}

int my_device() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return hvd::local_rank() % n;
}

// A device copy of a host Buffer.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const Buffer& host) : host_(host) {
    bytes_ = static_cast<size_t>(host.size()) * elem_size(host.dtype());
    cudaMalloc(&data_, bytes_ + 8);
    cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  hvd::TensorRef ref(std::vector<int64_t> shape, void* stream = nullptr) {
    return hvd::TensorRef(data_, host_.dtype(), std::move(shape), hvd::Device::cuda(my_device()),
                          stream);
  }
  // The device contents, as a host Buffer.
  Buffer fetch() const {
    Buffer b(host_.dtype(), host_.size());
    cudaMemcpy(b.data(), data_, bytes_, cudaMemcpyDeviceToHost);
    return b;
  }

 private:
  Buffer host_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

std::string tag(const char* what, DataType t, int64_t n) {
  return std::string("gpu.") + what + "." + type_str(t) + "." + std::to_string(n);
}

class GpuCollectives : public HvdTest {
 protected:
  void SetUp() override {
    HvdTest::SetUp();
    cudaSetDevice(my_device());
  }
};

TEST_F(GpuCollectives, AllreduceEveryOpDtypeAndSize) {
  for (ReduceOp op : all_ops()) {
    for (DataType t : gpu_dtypes()) {
      for (int64_t n : all_sizes()) {
        const std::string name = tag("allreduce", t, n) + "." + op_str(op);
        Buffer in(t, n);
        in.fill([&](int64_t i) { return reduce_contrib(op, t, rank_, size_, i); });
        DeviceBuffer d(in);
        Watchdog w(name);
        hvd::Handle h =
            enqueue([&] { return hvd::allreduce_async(d.ref({n}), d.ref({n}), name, op); }, name);
        if (!wait_ok(h, name)) continue;
        const double tol = (op == ReduceOp::kAverage && is_16bit_float(t)) ? 1e-3 : 0.0;
        check_values(
            d.fetch(), [&](int64_t i) { return reduce_expected(op, t, size_, i, 1.0, 1.0); }, name,
            tol);
      }
    }
  }
}

TEST_F(GpuCollectives, FusedGroupedAllreduceWithScaling) {
  // Many tensors of odd sizes in one group: the device fusion buffer and the batched copy kernel.
  for (DataType t : gpu_dtypes()) {
    std::vector<Buffer> host;
    std::vector<std::unique_ptr<DeviceBuffer>> dev;
    std::vector<hvd::TensorRef> refs;
    for (int k = 0; k < 37; ++k) {
      const int64_t n = (k * 13) % 29 + (k % 4 == 0 ? 0 : 1);
      host.emplace_back(t, n);
      host.back().fill(
          [&](int64_t i) { return reduce_contrib(ReduceOp::kSum, t, rank_, size_, i + k); });
      dev.push_back(std::make_unique<DeviceBuffer>(host.back()));
      refs.push_back(dev.back()->ref({n}));
    }
    const std::string name = tag("grouped", t, 37);
    Watchdog w(name);
    hvd::Handle h = enqueue(
        [&] { return hvd::grouped_allreduce_async(refs, refs, name, ReduceOp::kSum); }, name);
    if (!wait_ok(h, name)) continue;
    for (int k = 0; k < 37; ++k)
      check_values(
          dev[k]->fetch(),
          [&](int64_t i) { return reduce_expected(ReduceOp::kSum, t, size_, i + k, 1.0, 1.0); },
          name + "[" + std::to_string(k) + "]");
  }
  // Prescale and postscale on one tensor (exact in every dtype: x2 then x0.5).
  for (DataType t : gpu_dtypes()) {
    Buffer in(t, 7);
    in.fill([&](int64_t i) { return reduce_contrib(ReduceOp::kSum, t, rank_, size_, i); });
    DeviceBuffer d(in);
    const std::string name = tag("scaled", t, 7);
    Watchdog w(name);
    hvd::Handle h = enqueue(
        [&] {
          return hvd::allreduce_async(d.ref({7}), d.ref({7}), name, ReduceOp::kSum, 2.0, 0.5);
        },
        name);
    if (!wait_ok(h, name)) continue;
    check_values(
        d.fetch(),
        [&](int64_t i) { return reduce_expected(ReduceOp::kSum, t, size_, i, 2.0, 0.5); }, name);
  }
}

TEST_F(GpuCollectives, BroadcastFromEveryRoot) {
  for (DataType t : gpu_dtypes()) {
    for (int64_t n : all_sizes()) {
      for (int root = 0; root < size_; ++root) {
        const std::string name = tag("broadcast", t, n) + ".root" + std::to_string(root);
        Buffer b(t, n);
        b.fill(
            [&](int64_t i) { return rank_ == root ? static_cast<double>(i % 7 + root + 1) : 0.0; });
        DeviceBuffer d(b);
        Watchdog w(name);
        hvd::Handle h = enqueue([&] { return hvd::broadcast_async(d.ref({n}), root, name); }, name);
        if (!wait_ok(h, name)) continue;
        check_values(
            d.fetch(), [&](int64_t i) { return static_cast<double>(i % 7 + root + 1); }, name);
      }
    }
  }
}

// send/recv of device tensors around the ring (NCCL's pair communicators, NcclContext::pair, or
// host-staged MPI): every rank sends to the next and receives from the one before, both in flight
// at once; the received values are the sender's.
TEST_F(GpuCollectives, SendRecvRing) {
  if (size_ < 2) GTEST_SKIP() << "send/recv needs 2 ranks";
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  for (DataType t : gpu_dtypes()) {
    for (int64_t n : all_sizes()) {
      const std::string name = tag("ring", t, n);
      Buffer mine(t, n), got(t, n);
      mine.fill([&](int64_t i) { return static_cast<double>(i % 5 + rank_ + 1); });
      got.fill([](int64_t) { return 0.0; });
      DeviceBuffer out(mine), in(got);
      Watchdog w(name);
      hvd::Handle s = hvd::send_async(out.ref({n}), next);
      hvd::Handle r = hvd::recv_async(in.ref({n}), prev);
      if (!wait_ok(s, name + ".send") || !wait_ok(r, name + ".recv")) continue;
      check_values(
          in.fetch(), [&](int64_t i) { return static_cast<double>(i % 5 + prev + 1); }, name);
    }
  }
}

// Collectives of a process set on device tensors (the set's own NCCL communicators,
// GpuBackend::set_nccl, or host-staged MPI): the set of every rank but the last all-reduces and
// broadcasts; the last rank takes no part.
TEST_F(GpuCollectives, ProcessSetOnDeviceTensors) {
  if (size_ < 2) GTEST_SKIP() << "a set other than the global one needs 2 ranks";
  std::vector<int> members;
  for (int r = 0; r + 1 < size_; ++r) members.push_back(r);
  hvd::ProcessSet set = hvd::add_process_set(members);
  if (set.included()) {
    const int m = set.size();
    for (DataType t : gpu_dtypes()) {
      for (int64_t n : all_sizes()) {
        const std::string name = tag("set.allreduce", t, n);
        Buffer b(t, n);
        b.fill([&](int64_t i) { return static_cast<double>(i % 3 + rank_); });
        DeviceBuffer d(b);
        Watchdog w(name);
        hvd::Handle h = set.allreduce_async(d.ref({n}), d.ref({n}), name, hvd::ReduceOp::kSum);
        if (!wait_ok(h, name)) continue;
        // The sum over members 0..m-1 of (i % 3 + rank).
        check_values(
            d.fetch(),
            [&](int64_t i) { return static_cast<double>(m * (i % 3) + m * (m - 1) / 2); }, name);
        const std::string bname = tag("set.broadcast", t, n);
        Buffer c(t, n);
        c.fill([&](int64_t i) { return rank_ == 0 ? static_cast<double>(i % 4 + 2) : 0.0; });
        DeviceBuffer e(c);
        hvd::Handle g = set.broadcast_async(e.ref({n}), 0, bname);
        if (!wait_ok(g, bname)) continue;
        check_values(
            e.fetch(), [](int64_t i) { return static_cast<double>(i % 4 + 2); }, bname);
      }
    }
  }
  hvd::barrier();
  hvd::remove_process_set(set);
}

TEST_F(GpuCollectives, AllgatherWithDifferentFirstDimensions) {
  for (DataType t : gpu_dtypes()) {
    for (int64_t n : all_sizes()) {
      const std::string name = tag("allgather", t, n);
      // Rank r sends n + r rows (n == 0: only ranks > 0 send), values (i % 7) + r.
      const int64_t mine = n + rank_;
      Buffer in(t, mine);
      in.fill([&](int64_t i) { return static_cast<double>(i % 7 + rank_); });
      DeviceBuffer d(in);
      Watchdog w(name);
      hvd::Handle h = enqueue([&] { return hvd::allgather_async(d.ref({mine}), name); }, name);
      if (!wait_ok(h, name)) continue;
      std::vector<double> want;
      for (int r = 0; r < size_; ++r)
        for (int64_t i = 0; i < n + r; ++i) want.push_back(static_cast<double>(i % 7 + r));
      hvd::Tensor& out = h.output();
      ASSERT_EQ(out.num_elements(), static_cast<int64_t>(want.size())) << name;
      check_values(
          t, out.data(), out.num_elements(),
          [&](int64_t i) { return want[static_cast<size_t>(i)]; }, name);
    }
  }
}

TEST_F(GpuCollectives, AlltoallUnevenSplits) {
  for (DataType t : gpu_dtypes()) {
    for (int64_t n : all_sizes()) {
      const std::string name = tag("alltoall", t, n);
      // Every rank sends n rows, the first n % size destinations one row more.
      std::vector<int64_t> splits, offsets;
      int64_t off = 0;
      for (int q = 0; q < size_; ++q) {
        splits.push_back(n / size_ + (q < n % size_ ? 1 : 0));
        offsets.push_back(off);
        off += splits.back();
      }
      Buffer in(t, n);
      in.fill([&](int64_t i) { return static_cast<double>(i % 5 + rank_); });
      DeviceBuffer d(in);
      Watchdog w(name);
      hvd::Handle h = enqueue([&] { return hvd::alltoall_async(d.ref({n}), splits, name); }, name);
      if (!wait_ok(h, name)) continue;
      std::vector<double> want;
      for (int q = 0; q < size_; ++q)
        for (int64_t j = 0; j < splits[rank_]; ++j)
          want.push_back(static_cast<double>((offsets[rank_] + j) % 5 + q));
      hvd::Tensor& out = h.output();
      ASSERT_EQ(out.num_elements(), static_cast<int64_t>(want.size())) << name;
      check_values(
          t, out.data(), out.num_elements(),
          [&](int64_t i) { return want[static_cast<size_t>(i)]; }, name);
    }
  }
}

TEST_F(GpuCollectives, ReducescatterUnevenBlocks) {
  for (DataType t : gpu_dtypes()) {
    for (int64_t n : all_sizes()) {
      const std::string name = tag("reducescatter", t, n);
      Buffer in(t, n);
      in.fill([&](int64_t i) { return static_cast<double>(i % 5 + rank_); });
      DeviceBuffer d(in);
      Watchdog w(name);
      hvd::Handle h =
          enqueue([&] { return hvd::reducescatter_async(d.ref({n}), name, ReduceOp::kSum); }, name);
      if (!wait_ok(h, name)) continue;
      int64_t off = 0;
      for (int r = 0; r < rank_; ++r) off += n / size_ + (r < n % size_ ? 1 : 0);
      const int64_t block = n / size_ + (rank_ < n % size_ ? 1 : 0);
      hvd::Tensor& out = h.output();
      ASSERT_EQ(out.num_elements(), block) << name;
      check_values(
          t, out.data(), block,
          [&](int64_t j) {
            double s = 0;
            for (int r = 0; r < size_; ++r) s += static_cast<double>((off + j) % 5 + r);
            return s;
          },
          name);
    }
  }
}

TEST_F(GpuCollectives, WaitsForTheKernelThatProducesTheTensor) {
  // The tensor holds zeros; a kernel on the user's (non-blocking) stream spins ~300 ms and then
  // writes rank+1 everywhere. hvd must reduce the written values: without the event wait its
  // stream would read the zeros (or a mixture) long before the kernel finishes.
  const int64_t n = 1 << 20;
  Buffer zeros(DataType::kFloat32, n);
  DeviceBuffer d(zeros);
  cudaStream_t user = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(launch_slow_fill(static_cast<float*>(d.ref({n}).data()), n,
                             static_cast<float>(rank_ + 1), 300.0, user),
            cudaSuccess);
  const std::string name = "gpu.readiness";
  {
    Watchdog w(name);
    hvd::Handle h = enqueue(
        [&] {
          return hvd::allreduce_async(d.ref({n}, user), d.ref({n}, user), name, ReduceOp::kSum);
        },
        name);
    wait_ok(h, name);
  }
  cudaStreamSynchronize(user);
  const double want = static_cast<double>(size_) * (size_ + 1) / 2;
  check_values(
      d.fetch(), [&](int64_t) { return want; }, name);
  cudaStreamDestroy(user);
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

// HVD_NCCL_SHARED_GPU=1 with several ranks on one GPU: hvd kept NCCL and made NCCL accept this
// rank (NCCL would refuse a second rank on the device otherwise, and the collectives above would
// have failed): NCCL_MULTI_RANK_GPU_ENABLE=1 from NCCL 2.30, else a NCCL host of its own
// (NCCL_HOSTID ending in .hvd-rank<r>). Without it, NCCL_HOSTID stays as the launcher left it.
TEST_F(GpuCollectives, SharedGpuRanksAreAcceptedByNccl) {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  const bool shared = hvd::local_size() > devices;
  int version = 0;
  ncclGetVersion(&version);
  const char* id = std::getenv("NCCL_HOSTID");
  const std::string suffix = ".hvd-rank" + std::to_string(rank_);
  if (env_is("HVD_NCCL_SHARED_GPU", "1") && !env_is("HVD_GPU_OPERATIONS", "MPI") && shared) {
    if (version >= 23000) {
      EXPECT_TRUE(env_is("NCCL_MULTI_RANK_GPU_ENABLE", "1")) << "rank " << rank_;
      return;
    }
    ASSERT_NE(id, nullptr) << "rank " << rank_ << ": hvd did not set NCCL_HOSTID (NCCL " << version
                           << ")";
    const std::string s(id);
    EXPECT_TRUE(s.size() > suffix.size() &&
                s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
        << "rank " << rank_ << ": NCCL_HOSTID=" << s;
  } else {
    EXPECT_TRUE(id == nullptr || std::string(id).find(".hvd-rank") == std::string::npos)
        << "rank " << rank_ << ": NCCL_HOSTID=" << id;
  }
}

TEST_F(GpuCollectives, CompletionIsOrderedOnTheOutputStream) {
  // The input is written by a ~600 ms kernel on the user's stream; the all-reduce is out of place
  // into zeros with postscale 2, and the result is read back by a copy queued on the same stream.
  // Without HVD_ENABLE_ASYNC_COMPLETION wait() returns once the GPU work is done, so the user's
  // stream is idle by then. With it, on the NCCL path, wait() returns while the kernel still runs
  // (nothing of hvd's waits on the host), and the copy must still read the result: it reads zeros
  // (or the unscaled input on 1 rank) if the stream was not made to wait for hvd's work. The
  // host-staged path waits on the host for its device-to-host copies, so there only the values
  // are checked.
  const bool async = env_is("HVD_ENABLE_ASYNC_COMPLETION", "1");
  const bool nccl = !env_is("HVD_GPU_OPERATIONS", "MPI");
  const int64_t n = 1 << 20;
  Buffer zeros(DataType::kFloat32, n);
  DeviceBuffer in(zeros), out(zeros);
  cudaStream_t user = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  {
    // NCCL's communicator is made at the first GPU batch, which must not eat into the kernel.
    const std::string warm = "gpu.ordered.warmup";
    Watchdog w(warm);
    hvd::Handle h = enqueue(
        [&] { return hvd::allreduce_async(out.ref({n}), out.ref({n}), warm, ReduceOp::kSum); },
        warm);
    wait_ok(h, warm);
    cudaDeviceSynchronize();
  }
  ASSERT_EQ(launch_slow_fill(static_cast<float*>(in.ref({n}).data()), n,
                             static_cast<float>(rank_ + 1), 600.0, user),
            cudaSuccess);
  const std::string name = "gpu.ordered";
  cudaError_t query = cudaSuccess;
  {
    Watchdog w(name);
    hvd::Handle h = enqueue(
        [&] {
          return hvd::allreduce_async(in.ref({n}, user), out.ref({n}, user), name, ReduceOp::kSum,
                                      1.0, 2.0);
        },
        name);
    wait_ok(h, name);
    query = cudaStreamQuery(user);
  }
  if (!async) {
    EXPECT_EQ(query, cudaSuccess) << "wait() returned before the GPU work was done (rank " << rank_
                                  << ")";
  } else if (nccl) {
    EXPECT_EQ(query, cudaErrorNotReady)
        << "with HVD_ENABLE_ASYNC_COMPLETION=1, wait() waited for the GPU (rank " << rank_ << ")";
  }
  Buffer got(DataType::kFloat32, n);
  EXPECT_EQ(cudaMemcpyAsync(got.data(), out.ref({n}).data(), n * sizeof(float),
                            cudaMemcpyDeviceToHost, user),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(user), cudaSuccess);
  const double want = 2.0 * static_cast<double>(size_) * (size_ + 1) / 2;
  check_values(
      got, [&](int64_t) { return want; }, name);
  cudaStreamDestroy(user);
}

// HVD_SINGLE_RANK_INLINE_GPU=1 in a job of one rank on NCCL (the .inline.np1 and .inline_async.np1
// runs): a device all-reduce or broadcast is launched from the calling thread at submission, also
// the second time under the same name (a cached response, which would otherwise take its lane to
// the background thread). With async completion the handle is then complete when the call
// returns; either way the values are right and the caller's current device is the one it set.
TEST_F(GpuCollectives, OneRankLaunchesFromTheCallersThread) {
  const bool launches_here = size_ == 1 && env_is("HVD_SINGLE_RANK_INLINE_GPU", "1") &&
                             !env_is("HVD_GPU_OPERATIONS", "MPI") &&
                             !env_is("HVD_SINGLE_RANK_INLINE", "0");
  const bool async = env_is("HVD_ENABLE_ASYNC_COMPLETION", "1");
  const int64_t n = 1000;
  Buffer host(DataType::kFloat32, n);
  for (int64_t i = 0; i < n; ++i) host.set(i, static_cast<double>(i % 13));
  DeviceBuffer in(host), out(host);
  int before = -1;
  ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
  for (int round = 0; round < 2; ++round) {
    const std::string name = "gpu.inline.allreduce";
    hvd::Handle h = hvd::allreduce_async(in.ref({n}), out.ref({n}), name, ReduceOp::kAverage, 2.0);
    if (launches_here && async) {
      EXPECT_TRUE(h.ready()) << name << " round " << round << ": not launched at submission";
    }
    wait_ok(h, name);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    check_values(
        out.fetch(), [&](int64_t i) { return 2.0 * static_cast<double>(i % 13); }, name);
  }
  Buffer mine(DataType::kFloat32, n);  // rank r holds (r + 1) * (i % 13); root 0's is i % 13
  for (int64_t i = 0; i < n; ++i) mine.set(i, static_cast<double>((rank_ + 1) * (i % 13)));
  DeviceBuffer bd(mine);
  const std::string bname = "gpu.inline.broadcast";
  hvd::Handle b = hvd::broadcast_async(bd.ref({n}), 0, bname);
  if (launches_here && async) {
    EXPECT_TRUE(b.ready()) << bname << ": not launched at submission";
  }
  wait_ok(b, bname);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  check_values(
      bd.fetch(), [&](int64_t i) { return static_cast<double>(i % 13); }, bname);
  int after = -1;
  ASSERT_EQ(cudaGetDevice(&after), cudaSuccess);
  EXPECT_EQ(after, before) << "the caller's current device changed (rank " << rank_ << ")";
}

}  // namespace
}  // namespace hvdtest
