// The public API (hvd/hvd.h, hvd/collectives.h, hvd/process_set.h): argument checks on the
// caller's thread, then a hand-off to the Runtime and the process set the call runs on. The one
// Runtime instance lives here, behind a mutex (docs/architecture.md, "Threads, and who owns what",
// lists the other process-wide state).
//
// Local checks that only this rank can see (bad splits, an out-of-range root, a null pointer) do
// not throw here: they travel in the request's `error` field, so that rank 0 fails the operation on
// EVERY rank with one message instead of this rank failing alone while the others wait forever.
// Only a bad name (empty, too long, with a NUL byte, reserved: no other rank could match it) and a
// name already in flight on this rank throw at once (the first operation with that name is
// unaffected and completes everywhere). Every check is in runtime/arg_checks.h.
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
#include "common/ranks.h"
#include "hvd/error.h"
#include "hvd/hvd.h"
#include "hvd/stop.h"
#include "runtime/arg_checks.h"
#include "runtime/group_unit.h"
#include "runtime/runtime.h"
#include "runtime/spares.h"
#include "runtime/stop_state.h"
#include "runtime/terminate_handler.h"

namespace hvd {
namespace {

using namespace arg_checks;  // NOLINT: the checks are this file's vocabulary

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

// The process set a call runs on: the global one (the free functions) or a ProcessSet's, which
// `keep` keeps alive for the call.
struct Target {
  Runtime& rt;
  ProcessSetState& set;
  std::shared_ptr<ProcessSetState> keep;
  bool global() const { return keep == nullptr; }
};

Request make_request(const Target& t, RequestType type, const std::string& name,
                     const TensorRef& tensor, std::string error = "") {
  Request r;
  r.rank = t.set.rank();
  r.type = type;
  detail::Spares::take_name(name, &r.name);  // buffers left by earlier tensors (runtime/spares.h)
  r.dtype = tensor.dtype();
  r.device = tensor.device();
  detail::Spares::take_shape(tensor.shape(), &r.shape);
  r.deterministic = type == RequestType::kAllreduce && t.rt.deterministic();
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
Handle submit(const Target& t, RequestType type, const std::string& name, TensorRef in,
              TensorRef out, Request&& req, std::vector<int64_t> splits = {},
              std::shared_ptr<detail::HandleState> state = nullptr) {
  if (!state) state = detail::make_handle_state(1);
  TensorTableEntry entry = make_entry(type, name, std::move(in), std::move(out), state);
  entry.splits = std::move(splits);
  return t.rt.enqueue_one(t.set, std::move(entry), std::move(req), std::move(state));
}

// ---- The operations, on a process set ----------------------------------------------------------

// `in` and `out` are the public call's own by-value parameters, taken by reference: passing them on
// by value cost two more TensorRef moves (~60 instructions a tensor, scripts/instructions).
Handle allreduce_on(const Target& t, TensorRef& in, TensorRef& out, const std::string& name,
                    ReduceOp op, double prescale, double postscale) {
  // The name is checked below, unless a lane takes the tensor: a lane's name is a name that
  // passed check_name() when it was first negotiated, so an equal name is valid (the reserved
  // prefix, which hvd's own operations use, never goes to a lane). An invalid name finds no lane,
  // and then fails exactly as before: the tensor checks only collect their errors, and
  // check_name() throws first.
  Checks c{t.rt.gpu_assignment(), {}};
  const int64_t in_bytes = c.tensor(in, "the input");
  const int64_t out_bytes = c.tensor(out, "the output");
  c.output_matches(in, out, "the input", "the output", in_bytes, out_bytes);
  c.on_this_gpu(in);
  c.reduce_op(op);
  c.scales(prescale, postscale);
  c.no_overlap_pair(in, out, in_bytes, out_bytes);
  std::shared_ptr<detail::HandleState> state;
  if (t.global() && c.error.empty() && !name.starts_with(kReservedNamePrefix)) {
    // A tensor whose response is cached (every step's gradients from the second on) goes into
    // its lane, with no request and no entry (runtime/lanes.h).
    state = detail::make_handle_state(1);
    if (t.rt.enqueue_lane(name, in, out, op, prescale, postscale, state))
      return Handle(std::move(state));
  }
  check_name(name, "allreduce");
  Request req = make_request(t, RequestType::kAllreduce, name, in, std::move(c.error));
  req.reduce_op = op;
  req.prescale = prescale;
  req.postscale = postscale;
  return submit(t, RequestType::kAllreduce, name, std::move(in), std::move(out), std::move(req), {},
                std::move(state));
}

Handle grouped_allreduce_on(const Target& t, std::vector<TensorRef> in, std::vector<TensorRef> out,
                            const std::string& name, ReduceOp op) {
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
  Checks group{t.rt.gpu_assignment(), {}};
  if (in.size() != out.size()) group.fail(count_error);
  group.reduce_op(op);
  out.resize(in.size());  // after a count mismatch: members without an output fail anyway
  std::vector<std::string> member_errors(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    Checks c{t.rt.gpu_assignment(), group.error};
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
      group_unit::make(t.set.rank(), name, op, t.rt.deterministic(), std::move(in), std::move(out),
                       state, &req, &entry);
      return t.rt.enqueue_one(t.set, std::move(entry), std::move(req), std::move(state));
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
        make_request(t, RequestType::kAllreduce, member, in[i], std::move(member_errors[i]));
    req.reduce_op = op;
    req.group = name;
    req.group_size = static_cast<int32_t>(in.size());
    entries.push_back(
        make_entry(RequestType::kAllreduce, member, std::move(in[i]), std::move(out[i]), state));
    requests.push_back(std::move(req));
  }
  return t.rt.enqueue(t.set, std::move(entries), std::move(requests), state);
}

Handle allgather_on(const Target& t, TensorRef in, const std::string& name) {
  check_name(name, "allgather");
  Checks c{t.rt.gpu_assignment(), {}};
  c.tensor(in, "the input");
  c.on_this_gpu(in);
  c.first_dimension(in, "gather");
  Request req = make_request(t, RequestType::kAllgather, name, in, std::move(c.error));
  return submit(t, RequestType::kAllgather, name, in, in, std::move(req));
}

Handle broadcast_on(const Target& t, TensorRef inout, int root, const std::string& name) {
  check_name(name, "broadcast");
  Checks c{t.rt.gpu_assignment(), {}};
  c.tensor(inout, "the tensor");
  c.on_this_gpu(inout);
  int set_root = root;
  if (t.global())
    c.root(root, t.set.size());
  else
    set_root = c.member_root(root, t.set.id(), t.set.ranks());
  Request req = make_request(t, RequestType::kBroadcast, name, inout, std::move(c.error));
  req.root = set_root;
  return submit(t, RequestType::kBroadcast, name, inout, inout, std::move(req));
}

Handle alltoall_on(const Target& t, TensorRef in, std::vector<int64_t> splits,
                   const std::string& name) {
  check_name(name, "alltoall");
  Checks c{t.rt.gpu_assignment(), {}};
  c.tensor(in, "the input");
  c.on_this_gpu(in);
  c.first_dimension(in, "split");
  c.splits(splits, in, t.set.size());
  Request req = make_request(t, RequestType::kAlltoall, name, in, std::move(c.error));
  return submit(t, RequestType::kAlltoall, name, in, in, std::move(req), std::move(splits));
}

Handle reducescatter_on(const Target& t, TensorRef in, const std::string& name, ReduceOp op) {
  check_name(name, "reducescatter");
  Checks c{t.rt.gpu_assignment(), {}};
  c.tensor(in, "the input");
  c.on_this_gpu(in);
  c.first_dimension(in, "scatter");
  c.reduce_op(op);
  Request req = make_request(t, RequestType::kReducescatter, name, in, std::move(c.error));
  req.reduce_op = op;
  return submit(t, RequestType::kReducescatter, name, in, in, std::move(req));
}

// A send (`sending`) or a receive of `tensor` between this rank and `peer` (ranks of the set). The
// two ends name the exchange alike: global sender and receiver, tag, and its number among this
// rank's exchanges with the same three (kSendRecvPrefix).
Handle exchange_on(const Target& t, TensorRef tensor, int peer, int tag, bool sending) {
  const char* what = sending ? "send" : "recv";
  const int me = t.set.rank();
  if (peer < 0 || peer >= t.set.size() || peer == me)
    throw InvalidArgumentError(
        std::string(what) + (sending ? " to rank " : " from rank ") + std::to_string(peer) +
        " failed: " +
        (peer == me ? std::string("that is this rank; pass another rank.")
                    : "there are " + std::to_string(t.set.size()) + " ranks" +
                          (t.global() ? std::string("")
                                      : " in process set " + std::to_string(t.set.id())) +
                          ": pass a rank from 0 to " + std::to_string(t.set.size() - 1) + "."));
  Checks c{t.rt.gpu_assignment(), {}};
  c.tensor(tensor, sending ? "the input" : "the output");
  c.on_this_gpu(tensor);
  const int from = sending ? me : peer, to = sending ? peer : me;
  const int gfrom = t.set.ranks()[static_cast<size_t>(from)],
            gto = t.set.ranks()[static_cast<size_t>(to)];
  const std::string name = std::string(kSendRecvPrefix) + std::to_string(gfrom) + ">" +
                           std::to_string(gto) + "." + std::to_string(tag) + "." +
                           std::to_string(t.set.next_exchange(gfrom, gto, tag));
  Request req = make_request(t, RequestType::kSendRecv, name, tensor, std::move(c.error));
  req.root = from;
  req.peer = to;
  return submit(t, RequestType::kSendRecv, name, tensor, tensor, std::move(req));
}

void barrier_on(const Target& t) {
  // The caller's reference keeps the set's barrier mutex alive while this thread waits (a
  // shutdown() meanwhile fails the barrier's handle).
  // One name for every barrier, as in Horovod: a per-rank counter in the name would drift apart
  // when a barrier completes on some ranks only (the others had joined), and every later barrier
  // would then wait for a name the other ranks never send. Barriers of several user threads of
  // one rank take turns (one name can be in flight once per rank).
  std::lock_guard<std::mutex> turn(t.set.barrier_mutex());
  const std::string name = kBarrierName;
  Handle h;
  {
    Using rt("barrier()");
    Request req = make_request(t, RequestType::kBarrier, name,
                               TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}));
    h = submit(t, RequestType::kBarrier, name, {}, {}, std::move(req));
  }
  h.wait();
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

void set_deterministic(bool on) { Using("set_deterministic()")->set_deterministic(on); }
bool deterministic() { return Using("deterministic()")->deterministic(); }
// The wait for the latest release's measure is outside Using's count (no call blocks while it
// counts): the window and the wake signal are shared, and this call keeps them.
StragglerReport straggler_report() {
  std::shared_ptr<StragglerWindow> window;
  std::shared_ptr<detail::WakeSignal> wake;
  StragglerReport empty;
  {
    Using rt("straggler_report()");
    window = rt->straggler_window();
    wake = rt->wake_signal();
    empty.threshold_ms = rt->config().straggler_threshold_ms;
  }
  if (!window) return empty;
  return window->take(std::chrono::seconds(1), [&wake] { wake->want_report_cycle(); });
}

TuningReport tuning_report() {
  Using rt("tuning_report()");
  if (const auto tuner = rt->tuner()) return tuner->report();
  TuningReport r;
  const ParameterValues now = rt->parameters().values();
  r.fusion_threshold_bytes = now.fusion_threshold_bytes;
  r.cycle_time_ms = now.cycle_time_ms;
  r.fusion_window_us = now.fusion_window_us;
  r.state = !rt->config().autotune ? "off (HVD_AUTOTUNE=0)"
                                   : "off: a job of one rank has nothing to negotiate";
  return r;
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
  return allreduce_on({*rt, rt->world(), nullptr}, in, out, name, op, prescale, postscale);
}

Handle grouped_allreduce_async(std::vector<TensorRef> in, std::vector<TensorRef> out,
                               const std::string& name, ReduceOp op) {
  Using rt("grouped_allreduce_async()");
  return grouped_allreduce_on({*rt, rt->world(), nullptr}, std::move(in), std::move(out), name, op);
}

Handle allgather_async(TensorRef in, const std::string& name) {
  Using rt("allgather_async()");
  return allgather_on({*rt, rt->world(), nullptr}, std::move(in), name);
}

Handle broadcast_async(TensorRef inout, int root, const std::string& name) {
  Using rt("broadcast_async()");
  return broadcast_on({*rt, rt->world(), nullptr}, std::move(inout), root, name);
}

Handle alltoall_async(TensorRef in, std::vector<int64_t> splits, const std::string& name) {
  Using rt("alltoall_async()");
  return alltoall_on({*rt, rt->world(), nullptr}, std::move(in), std::move(splits), name);
}

Handle reducescatter_async(TensorRef in, const std::string& name, ReduceOp op) {
  Using rt("reducescatter_async()");
  return reducescatter_on({*rt, rt->world(), nullptr}, std::move(in), name, op);
}

Handle send_async(TensorRef in, int dst, int tag) {
  Using rt("send_async()");
  return exchange_on({*rt, rt->world(), nullptr}, std::move(in), dst, tag, true);
}

Handle recv_async(TensorRef out, int src, int tag) {
  Using rt("recv_async()");
  return exchange_on({*rt, rt->world(), nullptr}, std::move(out), src, tag, false);
}

void send(TensorRef in, int dst, int tag) { send_async(std::move(in), dst, tag).wait(); }
void recv(TensorRef out, int src, int tag) { recv_async(std::move(out), src, tag).wait(); }

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
  // The reference keeps the runtime (and the global set's barrier mutex) alive while this thread
  // waits; the submission itself is a Using.
  const std::shared_ptr<Runtime> owner = get("barrier()");
  barrier_on({*owner, owner->world(), nullptr});
}

int join() {
  const std::string name = kJoinName;
  auto state = detail::make_handle_state(1);
  Handle h;
  {
    Using rt("join()");
    Request req = make_request({*rt, rt->world(), nullptr}, RequestType::kJoin, name,
                               TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}));
    h = rt->enqueue_one(rt->world(), make_entry(RequestType::kJoin, name, {}, {}, state),
                        std::move(req), state);
  }
  h.wait();
  return state->join_result;
}

// ---- Process sets (hvd/process_set.h) ----------------------------------------------------------

namespace {

// The target of a ProcessSet's call `what` (the global set's, as the free functions', for id 0).
Target set_target(Runtime& rt, const std::shared_ptr<const detail::ProcessSetInfo>& info,
                  const char* what) {
  if (!info)
    throw InvalidArgumentError(std::string("hvd::ProcessSet::") + what +
                               " failed: this ProcessSet is empty (default-constructed); get one "
                               "from hvd::add_process_set() or hvd::global_process_set().");
  if (info->id == 0) return {rt, rt.world(), nullptr};
  std::shared_ptr<ProcessSetState> keep = rt.process_sets().find(info->id, what);
  return {rt, *keep, keep};
}

// A process set change (add: `ranks`, remove: `remove_id`), negotiated on the global set like any
// operation: every rank applies it at the same place (ProcessSetTable::apply,
// runtime/process_set.h).
// Returns the set's id; throws the change's error, the same on every rank.
int change_sets(const char* what, std::vector<int64_t> ranks, int remove_id, std::string error) {
  const std::shared_ptr<Runtime> owner = get(what);
  auto state = detail::make_handle_state(1);
  Handle h;
  {
    Using rt(what);
    const Target t{*rt, rt->world(), nullptr};
    const std::string name =
        std::string(kProcessSetPrefix) + std::to_string(rt->process_sets().next_change());
    Request req = make_request(t, RequestType::kProcessSet, name,
                               TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}),
                               std::move(error));
    req.root = remove_id;
    if (req.error.empty()) req.shape = std::move(ranks);
    h = rt->enqueue_one(rt->world(), make_entry(RequestType::kProcessSet, name, {}, {}, state),
                        std::move(req), state);
  }
  h.wait();
  return state->join_result;
}

}  // namespace

ProcessSet::ProcessSet(std::shared_ptr<const detail::ProcessSetInfo> info)
    : info_(std::move(info)) {}
int ProcessSet::id() const { return info_ ? info_->id : -1; }
bool ProcessSet::included() const { return info_ && info_->rank >= 0; }
int ProcessSet::rank() const { return info_ ? info_->rank : -1; }
int ProcessSet::size() const { return info_ ? static_cast<int>(info_->ranks.size()) : 0; }
const std::vector<int>& ProcessSet::ranks() const {
  static const std::vector<int> none;
  return info_ ? info_->ranks : none;
}

Handle ProcessSet::allreduce_async(TensorRef in, TensorRef out, const std::string& name,
                                   ReduceOp op, double prescale, double postscale) const {
  Using rt("ProcessSet::allreduce_async()");
  return allreduce_on(set_target(*rt, info_, "allreduce_async()"), in, out, name, op, prescale,
                      postscale);
}

Handle ProcessSet::grouped_allreduce_async(std::vector<TensorRef> in, std::vector<TensorRef> out,
                                           const std::string& name, ReduceOp op) const {
  Using rt("ProcessSet::grouped_allreduce_async()");
  return grouped_allreduce_on(set_target(*rt, info_, "grouped_allreduce_async()"), std::move(in),
                              std::move(out), name, op);
}

Handle ProcessSet::allgather_async(TensorRef in, const std::string& name) const {
  Using rt("ProcessSet::allgather_async()");
  return allgather_on(set_target(*rt, info_, "allgather_async()"), std::move(in), name);
}

Handle ProcessSet::broadcast_async(TensorRef inout, int root, const std::string& name) const {
  Using rt("ProcessSet::broadcast_async()");
  return broadcast_on(set_target(*rt, info_, "broadcast_async()"), std::move(inout), root, name);
}

Handle ProcessSet::alltoall_async(TensorRef in, std::vector<int64_t> splits,
                                  const std::string& name) const {
  Using rt("ProcessSet::alltoall_async()");
  return alltoall_on(set_target(*rt, info_, "alltoall_async()"), std::move(in), std::move(splits),
                     name);
}

Handle ProcessSet::reducescatter_async(TensorRef in, const std::string& name, ReduceOp op) const {
  Using rt("ProcessSet::reducescatter_async()");
  return reducescatter_on(set_target(*rt, info_, "reducescatter_async()"), std::move(in), name, op);
}

Handle ProcessSet::send_async(TensorRef in, int dst, int tag) const {
  Using rt("ProcessSet::send_async()");
  return exchange_on(set_target(*rt, info_, "send_async()"), std::move(in), dst, tag, true);
}

Handle ProcessSet::recv_async(TensorRef out, int src, int tag) const {
  Using rt("ProcessSet::recv_async()");
  return exchange_on(set_target(*rt, info_, "recv_async()"), std::move(out), src, tag, false);
}

void ProcessSet::allreduce(TensorRef inout, const std::string& name, ReduceOp op, double prescale,
                           double postscale) const {
  allreduce_async(inout, inout, name, op, prescale, postscale).wait();
}

void ProcessSet::allreduce(TensorRef in, TensorRef out, const std::string& name, ReduceOp op,
                           double prescale, double postscale) const {
  allreduce_async(std::move(in), std::move(out), name, op, prescale, postscale).wait();
}

void ProcessSet::grouped_allreduce(std::vector<TensorRef> inout, const std::string& name,
                                   ReduceOp op) const {
  std::vector<TensorRef> out = inout;
  grouped_allreduce_async(std::move(inout), std::move(out), name, op).wait();
}

void ProcessSet::grouped_allreduce(std::vector<TensorRef> in, std::vector<TensorRef> out,
                                   const std::string& name, ReduceOp op) const {
  grouped_allreduce_async(std::move(in), std::move(out), name, op).wait();
}

void ProcessSet::broadcast(TensorRef inout, int root, const std::string& name) const {
  broadcast_async(std::move(inout), root, name).wait();
}

Tensor ProcessSet::allgather(TensorRef in, const std::string& name) const {
  Handle h = allgather_async(std::move(in), name);
  h.wait();
  return std::move(h.output());
}

Tensor ProcessSet::alltoall(TensorRef in, std::vector<int64_t> splits, const std::string& name,
                            std::vector<int64_t>* received_splits) const {
  Handle h = alltoall_async(std::move(in), std::move(splits), name);
  h.wait();
  if (received_splits != nullptr) *received_splits = h.received_splits();
  return std::move(h.output());
}

Tensor ProcessSet::reducescatter(TensorRef in, const std::string& name, ReduceOp op) const {
  Handle h = reducescatter_async(std::move(in), name, op);
  h.wait();
  return std::move(h.output());
}

void ProcessSet::send(TensorRef in, int dst, int tag) const {
  send_async(std::move(in), dst, tag).wait();
}

void ProcessSet::recv(TensorRef out, int src, int tag) const {
  recv_async(std::move(out), src, tag).wait();
}

void ProcessSet::barrier() const {
  const std::shared_ptr<Runtime> owner = get("ProcessSet::barrier()");
  barrier_on(set_target(*owner, info_, "barrier()"));
}

ProcessSet global_process_set() {
  return ProcessSet(Using("global_process_set()")->world().info());
}

ProcessSet add_process_set(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  const std::vector<int64_t> list(ranks.begin(), ranks.end());
  const int size = Using("add_process_set()")->topology().size;
  const int me = Using("add_process_set()")->topology().rank;
  const std::string call =
      "add_process_set(" + shape_string(list) + ") failed on rank " + std::to_string(me) + ": ";
  std::string error;
  if (ranks.empty()) error = call + "a process set needs at least one rank.";
  for (size_t i = 0; i < ranks.size() && error.empty(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size)
      error = call + "rank " + std::to_string(ranks[i]) + " is out of range for " +
              std::to_string(size) + " ranks: pass global ranks from 0 to " +
              std::to_string(size - 1) + ".";
    else if (i > 0 && ranks[i] == ranks[i - 1])
      error = call + "rank " + std::to_string(ranks[i]) + " is listed twice; list each rank once.";
  }
  const int id = change_sets("add_process_set()", list, -1, std::move(error));
  for (auto& info : Using("add_process_set()")->process_sets().infos())
    if (info->id == id) return ProcessSet(info);
  throw InternalError("add_process_set(): process set " + std::to_string(id) +
                      " is not in the table after it was added; please report this bug.");
}

void remove_process_set(const ProcessSet& set) {
  if (set.id() < 0)
    throw InvalidArgumentError(
        "remove_process_set() failed: this ProcessSet is empty (default-constructed).");
  if (set.id() == 0)
    throw InvalidArgumentError(
        "remove_process_set() failed: the global process set cannot be removed.");
  bool there = false;
  for (auto& info : Using("remove_process_set()")->process_sets().infos())
    there |= info->id == set.id();
  if (!there)
    throw InvalidArgumentError("remove_process_set() failed: process set " +
                               std::to_string(set.id()) + " was removed already.");
  change_sets("remove_process_set()", {}, set.id(), "");
}

std::vector<ProcessSet> process_sets() {
  std::vector<ProcessSet> out;
  for (auto& info : Using("process_sets()")->process_sets().infos()) out.emplace_back(info);
  return out;
}

}  // namespace hvd
