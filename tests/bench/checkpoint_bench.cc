// How long a training step waits for a checkpoint: hvd::Checkpointer::save (the file durable on
// return) against save_async (the copy taken on return; the file written by rank 0's thread), for
// a model state of --mib MiB of float32 in --tensors tensors, in interleaved rounds in one process:
//  - save: the call's time on every rank (max over the ranks);
//  - save_async: the call's time (what the step waits for), then the time until wait() returns
//    (the rest of the write), and the step's time when a step of --step-ms of work runs between
//    save_async and wait (does the write overlap it?).
// Every round restores the last checkpoint and checks every value ("wrong values: 0" at the end;
// anything else fails the run). The directory (--dir, default a new one under /tmp) is removed.
//
//   mpirun --oversubscribe --bind-to none -np 2 build/tests/bench/checkpoint_bench --mib 256
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "hvd/checkpoint.h"
#include "hvd/hvd.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The slowest rank's value (a collective).
double max_over_ranks(double v) {
  hvd::allreduce(hvd::as_tensor(std::span<double>(&v, 1)), "bench.ckpt.max", hvd::ReduceOp::kMax);
  return v;
}

// A step of `ms` of work on this thread (a busy loop: the write must overlap it on other cores).
void work_for(double ms) {
  const auto t0 = Clock::now();
  volatile double x = 1;
  while (ms_since(t0) < ms) x = x * 1.0000001 + 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mib = 64;
  int tensors = 16, rounds = 3;
  double step_ms = 200;
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--mib") mib = std::max<int64_t>(1, std::stoll(v));
    if (a == "--tensors") tensors = std::max(1, std::stoi(v));
    if (a == "--rounds") rounds = std::max(1, std::stoi(v));
    if (a == "--step-ms") step_ms = std::max(0.0, std::stod(v));
    if (a == "--dir") dir = v;
  }
  hvd::init();
  const int me = hvd::rank();
  std::vector<uint8_t> name(256, 0);
  if (me == 0) {
    std::string d = dir;
    if (d.empty()) {
      char tmpl[] = "/tmp/hvd_ckpt_bench_XXXXXX";
      if (!::mkdtemp(tmpl)) return 1;
      d = tmpl;
    }
    std::memcpy(name.data(), d.data(), std::min<size_t>(d.size(), 255));
  }
  hvd::broadcast(name, 0, "bench.ckpt.dir");
  dir = reinterpret_cast<const char*>(name.data());

  const int64_t per = mib * (int64_t{1} << 20) / 4 / tensors;
  std::vector<std::vector<float>> data(static_cast<size_t>(tensors), std::vector<float>(per));
  std::vector<hvd::NamedTensor> state;
  for (int t = 0; t < tensors; ++t)
    state.push_back({"t" + std::to_string(t), hvd::as_tensor(std::span<float>(data[t]))});
  auto fill = [&](int64_t step) {
    for (int t = 0; t < tensors; ++t)
      for (int64_t i = 0; i < per; ++i)
        data[t][i] = static_cast<float>((step * 7 + t * 131 + i) % 1000003);
  };

  long wrong = 0;
  hvd::Checkpointer ck(dir, 2);
  std::vector<double> sync_ms, async_ms, rest_ms, alone_ms, overlapped_ms;
  int64_t step = 0;
  for (int r = 0; r < rounds; ++r) {
    fill(++step);
    auto t0 = Clock::now();
    ck.save(step, state);
    sync_ms.push_back(max_over_ranks(ms_since(t0)));

    fill(++step);
    t0 = Clock::now();
    ck.save_async(step, state);
    async_ms.push_back(max_over_ranks(ms_since(t0)));
    fill(step + 100);  // the next steps change the tensors at once
    t0 = Clock::now();
    ck.wait();
    rest_ms.push_back(max_over_ranks(ms_since(t0)));

    // A step of work with and without a write in the background.
    t0 = Clock::now();
    work_for(step_ms);
    alone_ms.push_back(max_over_ranks(ms_since(t0)));
    fill(++step);
    t0 = Clock::now();
    ck.save_async(step, state);
    work_for(step_ms);
    overlapped_ms.push_back(max_over_ranks(ms_since(t0)));
    ck.wait();

    // The last checkpoint holds the values of its call.
    fill(-1);
    if (ck.restore_latest(state) != step) ++wrong;
    for (int t = 0; t < tensors; ++t)
      for (int64_t i = 0; i < per; ++i)
        if (data[t][i] != static_cast<float>((step * 7 + t * 131 + i) % 1000003)) ++wrong;
  }
  double w = static_cast<double>(wrong);
  hvd::allreduce(hvd::as_tensor(std::span<double>(&w, 1)), "bench.ckpt.wrong", hvd::ReduceOp::kSum);
  if (me == 0) {
    std::printf("checkpoint of %lld MiB in %d tensors, %d ranks, median of %d rounds:\n",
                static_cast<long long>(mib), tensors, hvd::size(), rounds);
    std::printf("  save                      %9.1f ms (the file durable)\n", median(sync_ms));
    std::printf("  save_async                %9.1f ms (the copy taken), ratio to save %.3f\n",
                median(async_ms), median(async_ms) / median(sync_ms));
    std::printf("  then wait()               %9.1f ms (the rest of the write)\n", median(rest_ms));
    std::printf("  a %.0f ms step alone       %9.1f ms\n", step_ms, median(alone_ms));
    std::printf("  save_async + the step     %9.1f ms, ratio to the step alone %.3f\n",
                median(overlapped_ms), median(overlapped_ms) / median(alone_ms));
    std::printf("wrong values: %.0f\n", w);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  hvd::shutdown();
  return w == 0 ? 0 : 1;
}
