// The public API (hvd/hvd.h, hvd/collectives.h): argument checks on the caller's thread, then a
// hand-off to the Runtime. The one Runtime instance lives here, behind a mutex; this is the only
// process-wide mutable state besides the log settings.
//
// Local checks that only this rank can see (bad splits, an out-of-range root, a null pointer) do
// not throw here: they travel in the request's `error` field, so that rank 0 fails the operation on
// EVERY rank with one message instead of this rank failing alone while the others wait forever.
// Only a bad name (empty, too long, with a NUL byte, reserved: no other rank could match it) and a
// name already in flight on this rank throw at once (the first operation with that name is
// unaffected and completes everywhere). Every check is in the "Argument checks" section below.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "hvd/error.h"
#include "hvd/hvd.h"
#include "hvd/stop.h"
#include "runtime/group_unit.h"
#include "runtime/runtime.h"
#include "runtime/spares.h"
#include "runtime/stop_state.h"
#include "runtime/terminate_handler.h"

namespace hvd {
namespace {

struct Instance {
  std::mutex mu;  // init(), shutdown(), and the owner below
  std::shared_ptr<Runtime> runtime;
  bool was_shut_down = false;
  // The running runtime for the calls (Using), published by init() and withdrawn by shutdown(),
  // and how many calls are using it now: shutdown() tears the runtime down only once none is.
  std::atomic<Runtime*> live{nullptr};
  std::atomic<int64_t> users{0};
};

Instance& instance() {
  static Instance inst;
  return inst;
}

std::shared_ptr<Runtime> get(const char* what) {
  Instance& inst = instance();
  std::lock_guard<std::mutex> lock(inst.mu);
  if (!inst.runtime) {
    if (inst.was_shut_down)
      throw InvalidArgumentError(std::string("hvd::") + what +
                                 " called after hvd::shutdown(): hvd is no longer running.");
    throw InvalidArgumentError(std::string("hvd::") + what +
                               " called before hvd::init(): call hvd::init() first.");
  }
  return inst.runtime;
}

// A public call's use of the runtime, for as long as the call submits (not while it waits on a
// handle): shutdown() on another thread waits until no call uses the runtime before it frees the
// communicators. (A call that had taken a reference before shutdown() could use them after: a
// one-rank job's inline all-reduce ran on a freed communicator and crashed the process;
// Lifecycle.ShutdownWhileThreadsSubmit.) Two atomic operations on one counter, where a mutex and a
// shared_ptr copy took four. Throws as get() does when hvd is not running.
class Using {
 public:
  explicit Using(const char* what) {
    Instance& inst = instance();
    // Sequentially consistent on both sides: either this call sees the runtime withdrawn, or
    // shutdown() sees this call's count and waits for it.
    inst.users.fetch_add(1);
    while ((rt_ = inst.live.load()) == nullptr) {
      inst.users.fetch_sub(1);
      (void)get(what);          // throws: before init() or after shutdown()
      inst.users.fetch_add(1);  // init() ran meanwhile: look again
    }
  }
  ~Using() { instance().users.fetch_sub(1, std::memory_order_release); }
  Using(const Using&) = delete;
  Using& operator=(const Using&) = delete;
  Runtime& operator*() const { return *rt_; }
  Runtime* operator->() const { return rt_; }

 private:
  Runtime* rt_ = nullptr;
};

// ---- Argument checks ---------------------------------------------------------------------------
// Every public entry point checks its arguments here, in one place and one order: the name first
// (check_name() throws at once: without a valid name no other rank can tell which operation this
// is), then each tensor, input/output agreement, the operation's own parameters (reduce op, scale
// factors, first dimension, root, splits) and last overlapping buffers. The first failure wins.
// (allreduce_async runs the tensor checks first, which only collect their errors, and checks the
// name only when no lane takes the tensor: a lane's name was checked when it was negotiated. What
// is thrown, and in which order, is the same.)
// A failure is the reason alone ("the input has 4 elements but a null data pointer."): it travels
// in the request's `error` field, and rank 0 fails the operation on every rank with
// "<op> of '<name>' failed: rank <r>: <reason>" (runtime/controller.cc). docs/errors.md has one row
// per reason; tests/mpi/test_validation.cc triggers each and matches the text against that row.

// A name as check_name()'s messages show it: NUL bytes as \0, at most 64 bytes, then "...".
std::string shown(const std::string& name) {
  std::string s;
  for (char c : name) s += c == '\0' ? std::string("\\0") : std::string(1, c);
  return s.size() <= 64 ? s : s.substr(0, 64) + "...";
}

std::string fmt_double(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Thrown at once on this rank: a name that no rank can match.
void check_name(const std::string& name, const char* op) {
  if (name.empty())
    throw InvalidArgumentError(
        std::string(op) + " needs a tensor name: every rank must pass the same non-empty name.");
  if (name.size() > kMaxNameBytes)
    throw InvalidArgumentError(std::string(op) + " of '" + shown(name) + "' failed: the name has " +
                               std::to_string(name.size()) + " bytes; names may have at most " +
                               std::to_string(kMaxNameBytes) + " bytes.");
  if (const size_t nul = name.find('\0'); nul != std::string::npos)
    throw InvalidArgumentError(std::string(op) + " of '" + shown(name) +
                               "' failed: the name has a NUL byte at offset " +
                               std::to_string(nul) + "; names may not contain NUL bytes.");
  if (name.starts_with(kReservedNamePrefix))
    throw InvalidArgumentError(std::string(op) + " of '" + shown(name) +
                               "' failed: names starting with '" + kReservedNamePrefix +
                               "' are reserved for hvd's own operations; choose another name.");
}

bool known_dtype(DataType t) {
  const int v = static_cast<int>(t);
  return v >= static_cast<int>(DataType::kUInt8) && v <= static_cast<int>(DataType::kFloat64);
}

bool known_op(ReduceOp op) {
  const int v = static_cast<int>(op);
  return v >= static_cast<int>(ReduceOp::kAverage) && v <= static_cast<int>(ReduceOp::kProduct);
}

bool known_device(const Device& d) {
  return d.kind == Device::kCPU || (d.kind == Device::kCUDA && d.index >= 0);
}

// The tensor's size in bytes, or -1 when the dtype is unknown, a dimension negative, or the
// product of the non-zero dimensions times the element size overflows int64. (That bound keeps
// every product hvd forms from a shape in range: the element count as TensorRef::num_elements()
// multiplies it out left to right, a row's bytes for allgather and alltoall, the total bytes.)
int64_t byte_size(const TensorRef& t) {
  if (!known_dtype(t.dtype())) return -1;
  int64_t bound = static_cast<int64_t>(dtypes::find(t.dtype())->size);
  bool empty = false;
  for (int64_t d : t.shape()) {
    if (d < 0) return -1;
    if (d == 0)
      empty = true;
    else if (__builtin_mul_overflow(bound, d, &bound))
      return -1;
  }
  return empty ? 0 : bound;
}

// Which tensor a check is about, as its message names it: "the input", or "input 3" of a group.
// The text is built only when a check fails (a group of 1000 members would otherwise format 4000
// role names per call that no message uses).
struct Role {
  Role(const char* word) : word(word) {}  // NOLINT: implicit, "the input"
  Role(const char* word, size_t index) : word(word), index(static_cast<int64_t>(index)) {}
  std::string str() const {
    return index < 0 ? std::string(word) : std::string(word) + " " + std::to_string(index);
  }
  const char* word;
  int64_t index = -1;
};

struct Checks {
  const Runtime& rt;
  std::string error;  // the first failure, "" while every check passed

  bool failed() const { return !error.empty(); }
  void fail(std::string why) {
    if (error.empty()) error = std::move(why);
  }

  // One tensor on its own: dtype, device, shape, size, data pointer. Returns its size in bytes
  // (byte_size()), or -1 when this or an earlier check failed.
  int64_t tensor(const TensorRef& t, const Role& role) {
    if (failed()) return -1;
    if (!known_dtype(t.dtype()))
      return fail_size(role.str() + " has dtype " + std::to_string(static_cast<int>(t.dtype())) +
                       ", which is not a DataType: pass one of uint8, int8, int32, int64, float16, "
                       "bfloat16, float32, "
                       "float64.");
    if (!known_device(t.device()))
      return fail_size(
          role.str() + " is on " + device_name(t.device()) +
          ", which is not a device: pass Device::cpu() or Device::cuda(i) with i >= 0.");
    // Elements there are exactly when the size is above 0 (a zero dimension makes both 0).
    const int64_t bytes = byte_size(t);
    if (bytes < 0) {
      for (int64_t d : t.shape())
        if (d < 0)
          return fail_size(role.str() + " has shape " + shape_string(t.shape()) +
                           " with a negative dimension.");
      return fail_size(
          role.str() + " has shape " + shape_string(t.shape()) + " of " + dtype_name(t.dtype()) +
          ": the product of its non-zero dimensions and the element size does not fit in 64 bits.");
    }
    if (bytes > 0 && t.data() == nullptr)
      return fail_size(role.str() + " has " + std::to_string(t.num_elements()) +
                       " elements but a null data pointer.");
    // hvd's own element-wise code (scaling, averaging, fusion) reads through typed pointers.
    const std::size_t esize = dtypes::find(t.dtype())->size;
    if (bytes > 0 && reinterpret_cast<uintptr_t>(t.data()) % esize != 0)
      return fail_size(role.str() + "'s data pointer is not a multiple of " +
                       std::to_string(esize) + " bytes, the size of its " + dtype_name(t.dtype()) +
                       " elements: pass aligned memory.");
    return bytes;
  }
  int64_t fail_size(std::string why) {
    fail(std::move(why));
    return -1;
  }

  // A CUDA tensor must be on this rank's GPU (after output_matches(): an output is on its input's
  // device).
  void on_this_gpu(const TensorRef& t) {
    if (t.device().kind == Device::kCPU) return;
    if (!failed()) fail(cluster::cuda_tensor_problem(rt.gpu_assignment(), t.device()));
  }

  // An output of the input's dtype, size and device (after tensor() of both, which returned their
  // sizes in bytes: of one dtype, the same bytes are the same number of elements).
  void output_matches(const TensorRef& in, const TensorRef& out, const Role& in_role,
                      const Role& out_role, int64_t in_bytes, int64_t out_bytes) {
    if (failed()) return;
    if (out.dtype() != in.dtype() || out_bytes != in_bytes)
      return fail(
          out_role.str() + " (" + dtype_name(out.dtype()) + " " + shape_string(out.shape()) +
          ") does not match " + in_role.str() + " (" + dtype_name(in.dtype()) + " " +
          shape_string(in.shape()) +
          "): pass an output of the same dtype and number of elements, or the input itself.");
    if (!(out.device() == in.device()))
      fail(in_role.str() + " is on " + device_name(in.device()) + " but " + out_role.str() +
           " on " + device_name(out.device()) + ": pass both on the same device.");
  }

  void reduce_op(ReduceOp op) {
    if (!failed() && !known_op(op))
      fail("reduce op " + std::to_string(static_cast<int>(op)) +
           " is not a ReduceOp: pass one of average, sum, min, max, product.");
  }

  void scales(double prescale, double postscale) {
    if (!failed() && !(std::isfinite(prescale) && std::isfinite(postscale)))
      fail("prescale " + fmt_double(prescale) + " and postscale " + fmt_double(postscale) +
           " must both be finite numbers.");
  }

  // allgather, alltoall, reducescatter work along the first dimension.
  void first_dimension(const TensorRef& t, const char* verb) {
    if (!failed() && t.shape().empty())
      fail(std::string("a scalar has no first dimension to ") + verb +
           " along; pass shape {1} instead of {}.");
  }

  void root(int root, int size) {
    if (!failed() && (root < 0 || root >= size))
      fail("root " + std::to_string(root) + " is out of range for " + std::to_string(size) +
           " ranks: pass a root from 0 to " + std::to_string(size - 1) + ".");
  }

  // Fills in equal parts when `splits` is empty.
  void splits(std::vector<int64_t>& splits, const TensorRef& t, int size) {
    if (failed()) return;
    const int64_t rows = t.shape()[0];
    if (splits.empty()) {
      if (rows % size != 0)
        return fail("no splits were given and the first dimension " + std::to_string(rows) +
                    " does not divide evenly among " + std::to_string(size) +
                    " ranks; pass splits.");
      splits.assign(static_cast<size_t>(size), rows / size);
    }
    if (splits.size() != static_cast<size_t>(size))
      return fail("it gave " + std::to_string(splits.size()) + " splits for " +
                  std::to_string(size) + " ranks: pass one split per rank.");
    for (int64_t s : splits)
      if (s < 0)
        return fail("it gave a negative split " + shape_string(splits) + ": pass splits >= 0.");
    int64_t sum = 0;
    bool overflow = false;
    for (int64_t s : splits) overflow = overflow || __builtin_add_overflow(sum, s, &sum);
    if (overflow || sum != rows)
      fail("its splits " + shape_string(splits) + " add up to " +
           (overflow ? "more than " + std::to_string(INT64_MAX) : std::to_string(sum)) +
           ", but its tensor has " + std::to_string(rows) + " rows in its first dimension.");
  }

  // no_overlap() for one input and one output, without building vectors (the hot path of
  // allreduce_async): the output may be exactly the input, or share no byte with it.
  // in_bytes, out_bytes: their sizes (what tensor() returned).
  void no_overlap_pair(const TensorRef& in, const TensorRef& out, int64_t in_bytes,
                       int64_t out_bytes) {
    if (failed()) return;
    if (in_bytes <= 0 || out_bytes <= 0 || !(in.device() == out.device())) return;
    if (in.data() == out.data() && in_bytes == out_bytes) return;  // in place
    const auto ib = reinterpret_cast<uintptr_t>(in.data()),
               ob = reinterpret_cast<uintptr_t>(out.data());
    const uintptr_t ie = ib + static_cast<uintptr_t>(in_bytes),
                    oe = ob + static_cast<uintptr_t>(out_bytes);
    if (oe <= ib || ie <= ob) return;
    fail(overlap_message("the output", "the input", std::min(oe, ie) - std::max(ob, ib)));
  }

  static std::string overlap_message(const std::string& out_role, const std::string& in_role,
                                     uintptr_t common) {
    return out_role + " overlaps " + in_role + " (" + std::to_string(common) +
           " bytes in common) without being the same buffer: pass the same buffer as input "
           "and output for "
           "an in-place allreduce, or buffers that do not overlap.";
  }

  // Outputs must not overlap each other or any input, except that output i may be exactly input i
  // (in place). Inputs may overlap each other (they are only read). After tensor() of all.
  void no_overlap(const std::vector<TensorRef>& in, const std::vector<TensorRef>& out,
                  bool grouped) {
    if (failed()) return;
    auto role = [&](bool is_out, size_t i) {
      return grouped ? std::string(is_out ? "output " : "input ") + std::to_string(i)
                     : std::string(is_out ? "the output" : "the input");
    };
    // Spans ordered by (device, begin); the device as one key (kind, index), so that ordering a
    // group of 1000 outputs compares two integers, not a tuple.
    struct Span {
      uint64_t device;
      uintptr_t begin, end;
      size_t index;
    };
    auto device_key = [](const Device& d) {
      return uint64_t{static_cast<uint32_t>(d.kind)} << 32 | static_cast<uint32_t>(d.index);
    };
    auto before = [](const Span& a, const Span& b) {
      return a.device != b.device ? a.device < b.device : a.begin < b.begin;
    };
    std::vector<int64_t> out_bytes(out.size());
    std::vector<Span> outs;
    outs.reserve(out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      out_bytes[i] = byte_size(out[i]);
      if (out_bytes[i] <= 0) continue;
      const auto begin = reinterpret_cast<uintptr_t>(out[i].data());
      outs.push_back(Span{device_key(out[i].device()), begin,
                          begin + static_cast<uintptr_t>(out_bytes[i]), i});
    }
    // Buffers are usually allocated in the order they are passed: then no sort is needed.
    if (!std::is_sorted(outs.begin(), outs.end(), before))
      std::sort(outs.begin(), outs.end(), before);
    for (size_t k = 1; k < outs.size(); ++k)
      if (outs[k - 1].device == outs[k].device && outs[k].begin < outs[k - 1].end)
        return fail(role(true, std::min(outs[k - 1].index, outs[k].index)) + " and " +
                    role(true, std::max(outs[k - 1].index, outs[k].index)) +
                    " overlap in memory: give every output its own buffer.");
    // The outputs are disjoint and sorted: an input can only overlap the last one starting before
    // its end.
    for (size_t j = 0; j < in.size(); ++j) {
      const int64_t bytes = byte_size(in[j]);
      if (bytes <= 0) continue;
      if (j < out.size() && out[j].data() == in[j].data() && out[j].device() == in[j].device() &&
          out_bytes[j] == bytes)
        continue;  // in place
      const auto begin = reinterpret_cast<uintptr_t>(in[j].data());
      const Span s{device_key(in[j].device()), begin, begin + static_cast<uintptr_t>(bytes), j};
      auto it = std::lower_bound(outs.begin(), outs.end(), Span{s.device, s.end, s.end, 0}, before);
      if (it == outs.begin()) continue;
      const Span& o = *std::prev(it);
      if (o.device != s.device || o.end <= s.begin) continue;
      const uintptr_t common = std::min(o.end, s.end) - std::max(o.begin, s.begin);
      return fail(overlap_message(role(true, o.index), role(false, j), common));
    }
  }
};

Request make_request(const Runtime& rt, RequestType type, const std::string& name,
                     const TensorRef& t, std::string error = "") {
  Request r;
  r.rank = rt.topology().rank;
  r.type = type;
  detail::Spares::take_name(name, &r.name);  // buffers left by earlier tensors (runtime/spares.h)
  r.dtype = t.dtype();
  r.device = t.device();
  detail::Spares::take_shape(t.shape(), &r.shape);
  r.error = std::move(error);
  if (!r.error.empty()) {
    // Rank 0 fails the operation without looking further, but the request's shape, dtype and device
    // still travel to rank 0 and into the error response, where the runtime multiplies the shape
    // out (with the response's own dtype): send no shape, and only valid values.
    r.shape.clear();
    if (!known_dtype(r.dtype)) r.dtype = DataType::kUInt8;
    if (!known_device(r.device)) r.device = Device::cpu();
  }
  return r;
}

TensorTableEntry make_entry(RequestType type, const std::string& name, TensorRef in, TensorRef out,
                            const std::shared_ptr<detail::HandleState>& state) {
  TensorTableEntry e;
  detail::Spares::take_name(name, &e.name);
  e.type = type;
  e.input = std::move(in);
  e.output = std::move(out);
  e.handle = state;
  return e;
}

// One tensor's operation (every collective but grouped allreduce): one entry, one request.
// The request and the entry are passed on by reference, not by value: a Request (three strings, a
// shape, ~250 bytes) moved at every call on the way cost ~120 instructions per move.
// `state`: the operation's handle, when the caller made it already (else a new one).
Handle submit(Runtime& rt, RequestType type, const std::string& name, TensorRef in, TensorRef out,
              Request&& req, std::vector<int64_t> splits = {},
              std::shared_ptr<detail::HandleState> state = nullptr) {
  if (!state) state = detail::make_handle_state(1);
  TensorTableEntry entry = make_entry(type, name, std::move(in), std::move(out), state);
  entry.splits = std::move(splits);
  return rt.enqueue_one(std::move(entry), std::move(req), std::move(state));
}

// hvd::set_peer_loss_handler(): read when the watchdog declares a peer loss (its own thread).
struct PeerLossSlot {
  std::mutex mu;
  PeerLossHandler handler;
};

PeerLossSlot& peer_loss_slot() {
  static PeerLossSlot slot;
  return slot;
}

PeerLossHandler current_peer_loss_handler() {
  std::lock_guard<std::mutex> lock(peer_loss_slot().mu);
  return peer_loss_slot().handler;
}

}  // namespace

void set_peer_loss_handler(PeerLossHandler handler) {
  std::lock_guard<std::mutex> lock(peer_loss_slot().mu);
  peer_loss_slot().handler = std::move(handler);
}

void init() {
  Instance& inst = instance();
  std::lock_guard<std::mutex> lock(inst.mu);
  if (inst.runtime) return;
  Config config = load_config(process_env_lookup());
  // A thread's note of an agreed stop belongs to the runtime it was made in (hvd/stop.h).
  detail::StopState::get().generation.fetch_add(1, std::memory_order_relaxed);
  inst.runtime = std::make_shared<Runtime>(config, current_peer_loss_handler);
  inst.live.store(inst.runtime.get());
  inst.was_shut_down = false;
  if (config.terminate_handler) detail::install_terminate_handler(inst.runtime->topology().rank);
}

void shutdown() {
  Instance& inst = instance();
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(inst.mu);
    if (!inst.runtime) return;
    rt = std::move(inst.runtime);
    inst.live.store(nullptr);
    inst.was_shut_down = true;
  }
  // Calls that took the runtime before it was withdrawn finish their submission first (no call
  // blocks while it uses it: waits on handles come after).
  while (inst.users.load() != 0) std::this_thread::yield();
  rt->shutdown();
  // The request lasts until shutdown(): a later init() starts without one.
  detail::StopState::get().requested.store(0, std::memory_order_relaxed);
}

bool initialized() {
  Instance& inst = instance();
  std::lock_guard<std::mutex> lock(inst.mu);
  return inst.runtime != nullptr;
}

int rank() { return Using("rank()")->topology().rank; }
int size() { return Using("size()")->topology().size; }
int local_rank() { return Using("local_rank()")->topology().local_rank; }
int local_size() { return Using("local_size()")->topology().local_size; }
int cross_rank() { return Using("cross_rank()")->topology().cross_rank; }
int cross_size() { return Using("cross_size()")->topology().cross_size; }
bool is_homogeneous() { return Using("is_homogeneous()")->topology().homogeneous; }

bool stop_agreed() {
  // One rank agrees with itself (its inline operations run in no cycle).
  if (Using("stop_agreed()")->topology().size == 1) return stop_requested();
  return detail::stop_seen_by_this_thread();
}

Handle allreduce_async(TensorRef in, TensorRef out, const std::string& name, ReduceOp op,
                       double prescale, double postscale) {
  Using rt("allreduce_async()");
  // The name is checked below, unless a lane takes the tensor: a lane's name is a name that
  // passed check_name() when it was first negotiated, so an equal name is valid (the reserved
  // prefix, which hvd's own operations use, never goes to a lane). An invalid name finds no lane,
  // and then fails exactly as before: the tensor checks only collect their errors, and
  // check_name() throws first.
  Checks c{*rt, {}};
  const int64_t in_bytes = c.tensor(in, "the input");
  const int64_t out_bytes = c.tensor(out, "the output");
  c.output_matches(in, out, "the input", "the output", in_bytes, out_bytes);
  c.on_this_gpu(in);
  c.reduce_op(op);
  c.scales(prescale, postscale);
  c.no_overlap_pair(in, out, in_bytes, out_bytes);
  std::shared_ptr<detail::HandleState> state;
  if (c.error.empty() && !name.starts_with(kReservedNamePrefix)) {
    // A tensor whose response is cached (every step's gradients from the second on) goes into
    // its lane, with no request and no entry (runtime/tensor_queue.h, "Lanes").
    state = detail::make_handle_state(1);
    if (rt->enqueue_lane(name, in, out, op, prescale, postscale, state))
      return Handle(std::move(state));
  }
  check_name(name, "allreduce");
  Request req = make_request(*rt, RequestType::kAllreduce, name, in, std::move(c.error));
  req.reduce_op = op;
  req.prescale = prescale;
  req.postscale = postscale;
  return submit(*rt, RequestType::kAllreduce, name, std::move(in), std::move(out), std::move(req),
                {}, std::move(state));
}

Handle grouped_allreduce_async(std::vector<TensorRef> in, std::vector<TensorRef> out,
                               const std::string& name, ReduceOp op) {
  Using rt("grouped_allreduce_async()");
  check_name(name, "grouped_allreduce");
  const std::string count_error = std::to_string(in.size()) + " inputs but " +
                                  std::to_string(out.size()) +
                                  " outputs; pass one output per input.";
  if (in.empty()) {
    // No member names to fail on the other ranks: an empty group is complete at once.
    if (!out.empty())
      throw InvalidArgumentError("grouped_allreduce of '" + name + "' failed: " + count_error);
    auto state = detail::make_handle_state(1);
    state->complete_one();
    return Handle(state);
  }
  // Checks of the group as a whole fail every member; a member's own checks fail that member (and
  // with it, on rank 0, the whole group).
  Checks group{*rt, {}};
  if (in.size() != out.size()) group.fail(count_error);
  group.reduce_op(op);
  out.resize(in.size());  // after a count mismatch: members without an output fail anyway
  std::vector<std::string> member_errors(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    Checks c{*rt, group.error};
    const Role input("input", i), output("output", i);
    const int64_t in_bytes = c.tensor(in[i], input);
    const int64_t out_bytes = c.tensor(out[i], output);
    c.output_matches(in[i], out[i], input, output, in_bytes, out_bytes);
    c.on_this_gpu(in[i]);
    member_errors[i] = std::move(c.error);
  }
  if (std::all_of(member_errors.begin(), member_errors.end(),
                  [](const std::string& e) { return e.empty(); })) {
    group.no_overlap(in, out, true);
    if (!group.failed()) {
      // The group as one unit: one request, one entry (runtime/group_unit.h).
      auto state = detail::make_handle_state(1);
      Request req;
      TensorTableEntry entry;
      group_unit::make(rt->topology().rank, name, op, std::move(in), std::move(out), state, &req,
                       &entry);
      return rt->enqueue_one(std::move(entry), std::move(req), std::move(state));
    }
    member_errors.assign(in.size(), group.error);
  }
  // A member failed a check: every member goes to rank 0, which fails the group on every rank.
  auto state = detail::make_handle_state(static_cast<int>(in.size()));
  std::vector<TensorTableEntry> entries;
  std::vector<Request> requests;
  entries.reserve(in.size());
  requests.reserve(in.size());
  std::string member;  // "<name>.<i>"
  for (size_t i = 0; i < in.size(); ++i) {
    group_unit::member_name(name, i, &member);
    Request req =
        make_request(*rt, RequestType::kAllreduce, member, in[i], std::move(member_errors[i]));
    req.reduce_op = op;
    req.group = name;
    req.group_size = static_cast<int32_t>(in.size());
    entries.push_back(
        make_entry(RequestType::kAllreduce, member, std::move(in[i]), std::move(out[i]), state));
    requests.push_back(std::move(req));
  }
  return rt->enqueue(std::move(entries), std::move(requests), state);
}

Handle allgather_async(TensorRef in, const std::string& name) {
  Using rt("allgather_async()");
  check_name(name, "allgather");
  Checks c{*rt, {}};
  c.tensor(in, "the input");
  c.on_this_gpu(in);
  c.first_dimension(in, "gather");
  Request req = make_request(*rt, RequestType::kAllgather, name, in, std::move(c.error));
  return submit(*rt, RequestType::kAllgather, name, in, in, std::move(req));
}

Handle broadcast_async(TensorRef inout, int root, const std::string& name) {
  Using rt("broadcast_async()");
  check_name(name, "broadcast");
  Checks c{*rt, {}};
  c.tensor(inout, "the tensor");
  c.on_this_gpu(inout);
  c.root(root, rt->topology().size);
  Request req = make_request(*rt, RequestType::kBroadcast, name, inout, std::move(c.error));
  req.root = root;
  return submit(*rt, RequestType::kBroadcast, name, inout, inout, std::move(req));
}

Handle alltoall_async(TensorRef in, std::vector<int64_t> splits, const std::string& name) {
  Using rt("alltoall_async()");
  check_name(name, "alltoall");
  Checks c{*rt, {}};
  c.tensor(in, "the input");
  c.on_this_gpu(in);
  c.first_dimension(in, "split");
  c.splits(splits, in, rt->topology().size);
  Request req = make_request(*rt, RequestType::kAlltoall, name, in, std::move(c.error));
  return submit(*rt, RequestType::kAlltoall, name, in, in, std::move(req), std::move(splits));
}

Handle reducescatter_async(TensorRef in, const std::string& name, ReduceOp op) {
  Using rt("reducescatter_async()");
  check_name(name, "reducescatter");
  Checks c{*rt, {}};
  c.tensor(in, "the input");
  c.on_this_gpu(in);
  c.first_dimension(in, "scatter");
  c.reduce_op(op);
  Request req = make_request(*rt, RequestType::kReducescatter, name, in, std::move(c.error));
  req.reduce_op = op;
  return submit(*rt, RequestType::kReducescatter, name, in, in, std::move(req));
}

// ---- Blocking forms on a TensorRef (hvd/collectives.h): the async call, then wait() ------------

void allreduce(TensorRef inout, const std::string& name, ReduceOp op, double prescale,
               double postscale) {
  allreduce_async(inout, inout, name, op, prescale, postscale).wait();
}

void allreduce(TensorRef in, TensorRef out, const std::string& name, ReduceOp op, double prescale,
               double postscale) {
  allreduce_async(std::move(in), std::move(out), name, op, prescale, postscale).wait();
}

void grouped_allreduce(std::vector<TensorRef> inout, const std::string& name, ReduceOp op) {
  std::vector<TensorRef> out = inout;
  grouped_allreduce_async(std::move(inout), std::move(out), name, op).wait();
}

void grouped_allreduce(std::vector<TensorRef> in, std::vector<TensorRef> out,
                       const std::string& name, ReduceOp op) {
  grouped_allreduce_async(std::move(in), std::move(out), name, op).wait();
}

void broadcast(TensorRef inout, int root, const std::string& name) {
  broadcast_async(std::move(inout), root, name).wait();
}

Tensor allgather(TensorRef in, const std::string& name) {
  Handle h = allgather_async(std::move(in), name);
  h.wait();
  return std::move(h.output());
}

Tensor alltoall(TensorRef in, std::vector<int64_t> splits, const std::string& name,
                std::vector<int64_t>* received_splits) {
  Handle h = alltoall_async(std::move(in), std::move(splits), name);
  h.wait();
  if (received_splits != nullptr) *received_splits = h.received_splits();
  return std::move(h.output());
}

Tensor reducescatter(TensorRef in, const std::string& name, ReduceOp op) {
  Handle h = reducescatter_async(std::move(in), name, op);
  h.wait();
  return std::move(h.output());
}

void barrier() {
  // The reference keeps the runtime's barrier mutex alive while this thread waits (a shutdown()
  // meanwhile fails the barrier's handle); the submission itself is a Using.
  const std::shared_ptr<Runtime> owner = get("barrier()");
  // One name for every barrier, as in Horovod: a per-rank counter in the name would drift apart
  // when a barrier completes on some ranks only (the others had joined), and every later barrier
  // would then wait for a name the other ranks never send. Barriers of several user threads of
  // one rank take turns (one name can be in flight once per rank).
  std::lock_guard<std::mutex> turn(owner->barrier_mutex());
  const std::string name = kBarrierName;
  Handle h;
  {
    Using rt("barrier()");
    Request req = make_request(*rt, RequestType::kBarrier, name,
                               TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}));
    h = submit(*rt, RequestType::kBarrier, name, {}, {}, std::move(req));
  }
  h.wait();
}

int join() {
  const std::string name = kJoinName;
  auto state = detail::make_handle_state(1);
  Handle h;
  {
    Using rt("join()");
    Request req = make_request(*rt, RequestType::kJoin, name,
                               TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}));
    h = rt->enqueue_one(make_entry(RequestType::kJoin, name, {}, {}, state), std::move(req), state);
  }
  h.wait();
  return state->join_result;
}

}  // namespace hvd
