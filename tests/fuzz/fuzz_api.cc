// libFuzzer target: the public API (include/hvd/collectives.h) on one rank, driven with arbitrary
// argument combinations: every entry point (async, grouped, the std::vector forms, barrier, join),
// null and non-null pointers, any dtype value, devices (CPU, CUDA with any index), shapes with
// negative, zero and huge dimensions, names (empty, 1024/1025 bytes, NUL bytes, reserved, arbitrary
// bytes), roots, splits, reduce ops, scale factors, in == out, overlapping buffers, several
// operations in flight at once (duplicate names included).
//
// hvd::init() runs once, in LLVMFuzzerInitialize, as an MPI singleton (no mpirun); the whole
// runtime is compiled into this binary with ASan + UBSan and coverage (tests/fuzz/CMakeLists.txt).
//
// Properties checked on every input:
//  - every call returns normally or throws hvd::Error (from the call or from Handle::wait());
//    never a crash, a sanitizer report, another exception, or a hang (libFuzzer's -timeout);
//  - the error is InvalidArgumentError, or a plain Error, with a non-empty message: never
//    CommunicationError or InternalError (one rank, no network: those are hvd bugs);
//  - the message repeats no prefix ("<op> of '<name>' failed:" or "rank <r>:" twice) and matches
//    exactly one row of docs/errors.md (tests/support/error_catalogue.h);
//  - a valid operation's buffers stay inside the ones the harness gave it (ASan), and afterwards
//    a plain allreduce still works and gives the right sum;
//  - no leak, when run_fuzz.sh runs it with HVD_FUZZ_LEAKS=1 (Open MPI's own allocations are
//    suppressed only with the slow unwinder, 7x slower, so not in the default 10 s run).
// HVD_FUZZ_TRACE=1 prints each call, to read what a saved input does.
//
// The harness never passes a non-null pointer that is too small for a shape the API would accept:
// hvd cannot check what a pointer points to, so such a call would be the caller's bug, not hvd's.
// Non-null pointers point into one 64 KiB arena, so inputs and outputs overlap as the fuzzer likes.

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hvd/hvd.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/support/error_catalogue.h"

namespace {

using hvd::DataType;
using hvd::Device;
using hvd::ReduceOp;
using hvd::TensorRef;

constexpr size_t kArenaBytes = 64 * 1024;
alignas(64) unsigned char g_arena[kArenaBytes];

const std::vector<hvdtest::CatalogueRow>& catalogue() {
  static const std::vector<hvdtest::CatalogueRow> rows = [] {
    std::string error;
    auto r = hvdtest::load_catalogue(HVD_ERRORS_MD, &error);
    if (!error.empty()) hvd::fuzz::fail(__FILE__, __LINE__, error);
    return r;
  }();
  return rows;
}

// Bytes of a tensor as the API would accept it, or -1 (unknown dtype, a negative dimension, or
// the non-zero dimensions times the element size overflow: the API must reject it before touching
// the pointer).
int64_t accepted_bytes(const TensorRef& t) {
  const int d = static_cast<int>(t.dtype());
  if (d < 0 || d > static_cast<int>(DataType::kFloat64)) return -1;
  int64_t bound = static_cast<int64_t>(hvd::dtype_size(t.dtype()));
  bool empty = false;
  for (int64_t x : t.shape()) {
    if (x < 0) return -1;
    if (x == 0)
      empty = true;
    else if (__builtin_mul_overflow(bound, x, &bound))
      return -1;
  }
  return empty ? 0 : bound;
}

int64_t pick_dim(FuzzedDataProvider& in) {
  static const int64_t kDims[] = {0,
                                  1,
                                  2,
                                  3,
                                  4,
                                  5,
                                  7,
                                  8,
                                  16,
                                  -1,
                                  -7,
                                  INT64_MIN,
                                  INT64_MAX,
                                  int64_t{1} << 31,
                                  int64_t{1} << 40,
                                  int64_t{1} << 62,
                                  4096};
  if (in.ConsumeBool()) return kDims[in.ConsumeIntegralInRange<size_t>(0, std::size(kDims) - 1)];
  return in.ConsumeIntegral<int64_t>();
}

// A tensor: dtype, device, shape and a pointer (null, or into the arena when the tensor fits).
TensorRef pick_tensor(FuzzedDataProvider& in) {
  const auto dtype = static_cast<DataType>(in.ConsumeIntegralInRange<int>(-1, 9));
  Device device;
  // (Device::Kind has two values: any other is undefined behaviour in the caller, not tried here.)
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 5:
      device = Device::cuda(in.ConsumeIntegralInRange<int>(-2, 3));
      break;
    case 6:
      device = Device::cuda(in.ConsumeIntegral<int>());
      break;
    default:
      break;  // mostly CPU
  }
  std::vector<int64_t> shape(in.ConsumeIntegralInRange<size_t>(0, 4));
  for (auto& d : shape)
    d = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 9) : pick_dim(in);
  const size_t offset = in.ConsumeIntegralInRange<size_t>(0, 64) * (in.ConsumeBool() ? 1 : 4);
  void* p = in.ConsumeIntegralInRange<int>(0, 5) == 0 ? nullptr : g_arena + offset;
  TensorRef probe(p, dtype, shape, device);
  const int64_t bytes = accepted_bytes(probe);
  // A shape the API accepts with more bytes than the arena holds from `offset`: pass no pointer.
  if (p != nullptr && bytes >= 0 && static_cast<uint64_t>(bytes) > kArenaBytes - offset)
    p = nullptr;
  return TensorRef(p, dtype, std::move(shape), device);
}

std::string pick_name(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0:
      return "";
    case 1:
      return std::string(hvd::kMaxNameBytes, 'n');
    case 2:
      return std::string(hvd::kMaxNameBytes + 1, 'n');
    case 3:
      return std::string("a\0b", 3);
    case 4:
      return "__hvd.barrier";
    case 5:
      return "__hvd.join";
    case 6:
      return "__hvd.shutdown";
    case 7:
      return in.ConsumeRandomLengthString(1100);
    default:
      return std::string(
          1, static_cast<char>('a' + in.ConsumeIntegralInRange<int>(0, 3)));  // collide often
  }
}

ReduceOp pick_op(FuzzedDataProvider& in) {
  return static_cast<ReduceOp>(in.ConsumeIntegralInRange<int>(-1, 6));
}

double pick_scale(FuzzedDataProvider& in) {
  static const double kScales[] = {1.0,
                                   0.5,
                                   2.0,
                                   0.0,
                                   -1.0,
                                   1e308,
                                   1e-320,
                                   std::numeric_limits<double>::quiet_NaN(),
                                   std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity()};
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) return 1.0;
  return kScales[in.ConsumeIntegralInRange<size_t>(0, std::size(kScales) - 1)];
}

int pick_root(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      return 1;
    case 1:
      return -1;
    case 2:
      return in.ConsumeIntegral<int>();
    default:
      return 0;
  }
}

std::vector<int64_t> pick_splits(FuzzedDataProvider& in, const TensorRef& t) {
  std::vector<int64_t> s;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return s;  // equal parts
    case 1:
      if (!t.shape().empty()) s.push_back(t.shape()[0]);  // the right splits for one rank
      return s;
    default:
      s.resize(in.ConsumeIntegralInRange<size_t>(0, 3));
      for (auto& x : s) x = pick_dim(in);
      return s;
  }
}

// The message with the name taken out: every quoted occurrence of the name (or of the form in
// which runtime/api.cc shows a bad name: NUL bytes as \0, at most 64 bytes, then "..."), alone or
// as a group's "<name>.<i>", becomes N. A fuzzed name may hold any text, "allreduce of 'x' failed:"
// or a whole catalogue sentence included: the checks below look at what hvd wrote around it.
// With `first_only`, only the earliest occurrence (where "<op> of '<name>'" puts it) is taken out:
// for a name that is also text hvd writes itself, such as '__hvd.' in the reserved-name message.
std::string without_name(std::string m, const std::string& name, bool first_only = false) {
  std::string shown;
  for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  if (shown.size() > 64) shown = shown.substr(0, 64) + "...";
  std::vector<std::pair<std::string, std::string>> forms;  // what, with
  for (const std::string& form : {name, shown}) {
    if (form.empty()) continue;
    forms.emplace_back("'" + form + "'", "'N'");
    forms.emplace_back("'" + form + ".", "'N.");
  }
  if (first_only) {
    size_t first = std::string::npos;
    const std::pair<std::string, std::string>* which = nullptr;
    for (const auto& f : forms) {
      const size_t at = m.find(f.first);
      if (at < first) {
        first = at;
        which = &f;
      }
    }
    if (which != nullptr) m.replace(first, which->first.size(), which->second);
    return m;
  }
  for (const auto& [what, with] : forms)
    for (size_t at = m.find(what); at != std::string::npos; at = m.find(what, at + with.size()))
      m.replace(at, what.size(), with);
  return m;
}

// Each kind of message is matched against the catalogue once per process (std::regex is slow):
// the key is the message without its name, every digit run as 0.
std::string message_kind(const std::string& m) {
  std::string out;
  for (char c : m) {
    const bool digit = c >= '0' && c <= '9';
    if (!digit)
      out += c;
    else if (out.empty() || out.back() != '#')
      out += '#';
  }
  return out;
}

void check_error(const hvd::Error& e, const std::string& name) {
  const std::string m = e.what();
  HVD_FUZZ_CHECK(!m.empty(), "hvd::Error with an empty message");
  HVD_FUZZ_CHECK(dynamic_cast<const hvd::CommunicationError*>(&e) == nullptr,
                 "CommunicationError on one rank: " + m);
  HVD_FUZZ_CHECK(dynamic_cast<const hvd::InternalError*>(&e) == nullptr, "InternalError: " + m);
  const std::string canonical = without_name(m, name);
  HVD_FUZZ_CHECK(hvdtest::repeated_prefix(canonical).empty(), "a repeated prefix: " + m);
  static std::set<std::string> checked;
  if (checked.insert(message_kind(canonical)).second) {
    std::string why = hvdtest::catalogue_mismatch(catalogue(), canonical);
    if (!why.empty() &&
        hvdtest::catalogue_mismatch(catalogue(), without_name(m, name, true)).empty())
      why.clear();
    HVD_FUZZ_CHECK(why.empty(), why + "\n  (as emitted: " + m + ")");
  }
}

// HVD_FUZZ_TRACE=1: one line per call on stderr (to read what a saved input does).
bool tracing() {
  static const bool on = std::getenv("HVD_FUZZ_TRACE") != nullptr;
  return on;
}

std::string describe(const TensorRef& t) {
  return std::to_string(static_cast<int>(t.dtype())) + ":" + hvd::shape_string(t.shape()) + "@" +
         (t.data() ? "+" + std::to_string(static_cast<const unsigned char*>(t.data()) - g_arena)
                   : "null") +
         (t.device().kind == Device::kCUDA ? " cuda:" + std::to_string(t.device().index) : "");
}

struct InFlight {
  hvd::Handle handle;
  std::string name;
};

// Runs `call`: an hvd::Error is checked; anything else is a finding (fuzz_common.h).
template <class F>
void attempt(const std::string& name, F&& call) {
  try {
    call();
  } catch (const hvd::Error& e) {
    if (tracing()) std::fprintf(stderr, "  error: %s\n", e.what());
    check_error(e, name);
  } catch (const std::exception& e) {
    hvd::fuzz::fail(__FILE__, __LINE__, std::string("not an hvd::Error: ") + e.what());
  }
}

void wait_all(std::vector<InFlight>& flying) {
  for (auto& f : flying) {
    if (tracing()) std::fprintf(stderr, "wait for '%s'\n", f.name.substr(0, 40).c_str());
    attempt(f.name, [&] { f.handle.wait(); });
  }
  flying.clear();
}

// A vector of `t`'s element type and size for the std::vector forms (CPU, valid sizes only).
template <class T>
std::vector<T> vector_like(const TensorRef& t) {
  const int64_t bytes = accepted_bytes(t);
  const size_t n = bytes < 0 ? 0 : static_cast<size_t>(std::min<int64_t>(bytes, 4096)) / sizeof(T);
  return std::vector<T>(n, T{1});
}

void one_call(FuzzedDataProvider& in, std::vector<InFlight>& flying) {
  const std::string name = pick_name(in);
  const int which = in.ConsumeIntegralInRange<int>(0, 13);
  TensorRef a = pick_tensor(in);
  // The output: the input itself (in place), or another tensor (possibly overlapping it).
  TensorRef b = in.ConsumeBool() ? a : pick_tensor(in);
  if (tracing())
    std::fprintf(stderr, "call %d name '%s' (%zu bytes) a=%s b=%s\n", which,
                 name.substr(0, 40).c_str(), name.size(), describe(a).c_str(), describe(b).c_str());
  auto launch = [&](auto make) {
    attempt(name, [&] {
      hvd::Handle h = make();
      if (in.ConsumeBool()) {
        flying.push_back({h, name});  // waited for later: more operations in flight at once
        if (tracing()) std::fprintf(stderr, "  in flight\n");
      } else {
        h.wait();
      }
    });
  };
  switch (which) {
    case 0:
      launch([&] {
        return hvd::allreduce_async(a, b, name, pick_op(in), pick_scale(in), pick_scale(in));
      });
      break;
    case 1: {
      std::vector<TensorRef> ins(in.ConsumeIntegralInRange<size_t>(0, 4)), outs;
      for (auto& t : ins) t = pick_tensor(in);
      const int mode = in.ConsumeIntegralInRange<int>(0, 3);
      if (mode == 0)
        outs = ins;  // in place
      else if (mode == 1)
        for (const auto& t : ins) outs.push_back(in.ConsumeBool() ? t : pick_tensor(in));
      else
        for (size_t k = in.ConsumeIntegralInRange<size_t>(0, 4); k > 0; --k)
          outs.push_back(pick_tensor(in));
      if (tracing()) {
        for (const auto& t : ins) std::fprintf(stderr, "  in  %s\n", describe(t).c_str());
        for (const auto& t : outs) std::fprintf(stderr, "  out %s\n", describe(t).c_str());
      }
      launch([&] { return hvd::grouped_allreduce_async(ins, outs, name, pick_op(in)); });
      break;
    }
    case 2:
      launch([&] { return hvd::allgather_async(a, name); });
      break;
    case 3:
      launch([&] { return hvd::broadcast_async(a, pick_root(in), name); });
      break;
    case 4:
      launch([&] { return hvd::alltoall_async(a, pick_splits(in, a), name); });
      break;
    case 5:
      launch([&] { return hvd::reducescatter_async(a, name, pick_op(in)); });
      break;
    case 6: {
      std::vector<float> v = vector_like<float>(a);
      launch([&] { return hvd::allreduce_async(std::span<float>(v), name, pick_op(in)); });
      wait_all(flying);  // v dies here
      break;
    }
    case 7: {
      std::vector<int32_t> v = vector_like<int32_t>(a);
      attempt(name, [&] { hvd::allreduce(v, name, pick_op(in)); });
      break;
    }
    case 8: {
      std::vector<double> v = vector_like<double>(a);
      attempt(name, [&] { hvd::broadcast(v, pick_root(in), name); });
      break;
    }
    case 9: {
      std::vector<uint8_t> v = vector_like<uint8_t>(a);
      attempt(name, [&] { (void)hvd::allgather(v, name); });
      break;
    }
    case 10: {
      std::vector<int64_t> v = vector_like<int64_t>(a);
      TensorRef shape_of_v(v.data(), DataType::kInt64, {static_cast<int64_t>(v.size())});
      attempt(name, [&] { (void)hvd::alltoall(v, pick_splits(in, shape_of_v), name); });
      break;
    }
    case 11: {
      std::vector<int8_t> v = vector_like<int8_t>(a);
      attempt(name, [&] { (void)hvd::reducescatter(v, name, pick_op(in)); });
      break;
    }
    case 12:
      attempt("barrier", [] { hvd::barrier(); });
      break;
    default:
      attempt("join", [] { HVD_FUZZ_CHECK(hvd::join() == 0, "join() on one rank returns 0"); });
      break;
  }
}

// After every input: the runtime still works.
void expect_usable() {
  std::vector<int32_t> v = {1, 2, 3};
  try {
    hvd::allreduce(v, "fuzz.check", ReduceOp::kSum);
  } catch (const std::exception& e) {
    hvd::fuzz::fail(__FILE__, __LINE__,
                    std::string("the runtime is not usable after this input: ") + e.what());
  }
  HVD_FUZZ_CHECK((v == std::vector<int32_t>{1, 2, 3}), "a one-rank sum changed the values");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Short negotiation cycles: every operation waits for one. Quiet logs.
  setenv("HVD_CYCLE_TIME", "0.1", 0);
  setenv("HVD_LOG_LEVEL", "error", 0);
  // Open MPI's own handlers for SIGABRT, SIGBUS, SIGFPE and SIGSEGV would replace libFuzzer's,
  // which save the input of a finding: keep them out.
  setenv("OMPI_MCA_opal_signal", "", 0);
  (void)catalogue();
  try {
    hvd::init();
  } catch (const std::exception& e) {
    hvd::fuzz::fail(__FILE__, __LINE__, std::string("hvd::init() failed: ") + e.what());
  }
  HVD_FUZZ_CHECK(hvd::size() == 1, "fuzz_api runs on one rank (no mpirun)");
  std::atexit([] { hvd::shutdown(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<InFlight> flying;
  for (int calls = 0; calls < 8 && in.remaining_bytes() > 0; ++calls) one_call(in, flying);
  wait_all(flying);
  expect_usable();
  return 0;
}
