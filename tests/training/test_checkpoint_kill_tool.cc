// The program test_checkpoint_kill.sh kills. Two modes:
//   save DIR    resume from the newest good checkpoint in DIR (if any), then save steps forever,
//               printing "pid N" (rank 0's) first and "saved S" after each save returns (the file
//               is then durable); the script SIGKILLs it at a random moment.
//   check DIR MIN_STEP
//               restore_latest must find a checkpoint of step >= MIN_STEP (the last one reported
//               saved) whose values are those of its step, and every ckpt-*.safetensors file in
//               DIR must be complete and verify (a torn file may only ever be a temporary one).
// Exit status 0 when all is well, 1 with a message otherwise.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvd/checkpoint.h"
#include "hvd/hvd.h"
#include "training/checkpoint_io.h"

namespace {

// About 6 MiB per checkpoint, so that a random kill often lands inside a save.
struct State {
  std::vector<float> w;      // F32 [1024, 257]
  std::vector<double> big;   // F64 [655361]
  std::vector<int64_t> b;    // I64 [3]
  std::vector<uint16_t> h;   // BF16 [7]
  std::vector<float> empty;  // F32 [0]

  explicit State(int64_t step) : w(1024 * 257), big(655361), b(3), h(7) {
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>((step * 131 + static_cast<int64_t>(i)) % 100003);
    for (std::size_t i = 0; i < big.size(); ++i)
      big[i] = static_cast<double>(step) * 1e6 + static_cast<double>(i);
    b = {step, -step, step * step};
    for (std::size_t i = 0; i < h.size(); ++i)
      h[i] = static_cast<uint16_t>((step + static_cast<int64_t>(i)) & 0x7F7F);
  }
  std::vector<hvd::NamedTensor> tensors() {
    using hvd::DataType;
    return {{"w", hvd::TensorRef(w.data(), DataType::kFloat32, {1024, 257})},
            {"big", hvd::TensorRef(big.data(), DataType::kFloat64, {655361})},
            {"b", hvd::TensorRef(b.data(), DataType::kInt64, {3})},
            {"h", hvd::TensorRef(h.data(), DataType::kBFloat16, {7})},
            {"empty", hvd::TensorRef(empty.data(), DataType::kFloat32, {0})}};
  }
  bool operator==(const State& o) const { return w == o.w && big == o.big && b == o.b && h == o.h; }
};

int save_forever(const std::string& dir) {
  if (hvd::rank() == 0) {
    std::printf("pid %d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
  }
  hvd::Checkpointer ck(dir, 3);
  State st(0);
  int64_t step = 1;
  if (auto s = ck.restore_latest(st.tensors())) {
    if (!(st == State(*s))) {
      std::fprintf(stderr, "kill_tool: resumed from step %lld with wrong values\n",
                   static_cast<long long>(*s));
      return 1;
    }
    step = *s + 1;
  }
  for (;; ++step) {
    State next(step);
    ck.save(step, next.tensors(), {{"writer", "kill_tool"}});
    if (hvd::rank() == 0) {
      std::printf("saved %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
  }
}

int check(const std::string& dir, int64_t min_step) {
  hvd::Checkpointer ck(dir, 3);
  State st(-1);
  auto step = ck.restore_latest(st.tensors());
  if (!step) {
    std::fprintf(stderr, "kill_tool: no good checkpoint in %s (expected step >= %lld)\n",
                 dir.c_str(), static_cast<long long>(min_step));
    return 1;
  }
  if (*step < min_step) {
    std::fprintf(stderr,
                 "kill_tool: restored step %lld, but step %lld was reported saved (not durable?)\n",
                 static_cast<long long>(*step), static_cast<long long>(min_step));
    return 1;
  }
  if (!(st == State(*step))) {
    std::fprintf(stderr, "kill_tool: step %lld restored with wrong values\n",
                 static_cast<long long>(*step));
    return 1;
  }
  if (hvd::rank() == 0) {
    // No visible checkpoint may be torn: each one verifies and holds its own step's values.
    int files = 0;
    for (const auto& f : hvd::training::list_checkpoints(dir)) {
      try {
        const auto header = hvd::training::read_verified_header(f.path);
        State got(-1);
        std::vector<hvd::training::TensorBytes> targets;
        for (auto& t : got.tensors())
          targets.push_back({t.name, t.tensor.dtype(), t.tensor.shape(), t.tensor.data()});
        hvd::training::load_tensors(f.path, header, targets);
        if (!(got == State(f.step))) throw std::runtime_error("values differ from its step's");
        ++files;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kill_tool: visible checkpoint %s is bad: %s\n", f.path.c_str(),
                     e.what());
        return 1;
      }
    }
    std::printf("restored step %lld (>= %lld); %d visible checkpoints verified\n",
                static_cast<long long>(*step), static_cast<long long>(min_step), files);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "save" && argc == 3) || (mode == "check" && argc == 4))) {
    std::fprintf(stderr, "usage: %s save DIR | check DIR MIN_STEP\n", argv[0]);
    return 2;
  }
  int rc = 1;
  try {
    hvd::init();
    rc = mode == "save" ? save_forever(argv[2]) : check(argv[2], std::atoll(argv[3]));
    hvd::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kill_tool: %s\n", e.what());
    return 1;
  }
  return rc;
}
