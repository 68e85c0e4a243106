// The public API (hvd/hvd.h, hvd/collectives.h): argument checks on the caller's thread, then a
// hand-off to the Runtime. The one Runtime instance lives here, behind a mutex; this is the only
// process-wide mutable state besides the log settings.
//
// Local checks that only this rank can see (bad splits, an out-of-range root, a null pointer) do
// not throw here: they travel in the request's `error` field, so that rank 0 fails the operation on
// EVERY rank with one message instead of this rank failing alone while the others wait forever.
// Only a name already in flight on this rank throws at once (the first operation with that name
// is unaffected and completes everywhere).
#include <memory>
#include <mutex>

#include "hvd/error.h"
#include "hvd/hvd.h"
#include "runtime/runtime.h"
#include "runtime/terminate_handler.h"

namespace hvd {
namespace {

struct Instance {
  std::mutex mu;
  std::shared_ptr<Runtime> runtime;
  bool was_shut_down = false;
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
      throw InvalidArgumentError(std::string("hvd::") + what + " called after hvd::shutdown(): hvd is no longer running.");
    throw InvalidArgumentError(std::string("hvd::") + what + " called before hvd::init(): call hvd::init() first.");
  }
  return inst.runtime;
}

std::string check_tensor(const TensorRef& t, const char* role) {
  for (int64_t d : t.shape())
    if (d < 0) return std::string(role) + " has shape " + shape_string(t.shape()) + " with a negative dimension.";
  if (t.num_elements() > 0 && t.data() == nullptr)
    return std::string(role) + " has " + std::to_string(t.num_elements()) + " elements but a null data pointer.";
  return "";
}

Request make_request(const Runtime& rt, RequestType type, const std::string& name, const TensorRef& t) {
  Request r;
  r.rank = rt.topology().rank;
  r.type = type;
  r.name = name;
  r.dtype = t.dtype();
  r.device = t.device();
  r.shape = t.shape();
  if (t.device().kind == Device::kCUDA) {
    try {
      cluster::check_cuda_tensor(rt.gpu_assignment(), t.device(), std::string(request_type_name(type)) + " of '" + name + "'");
    } catch (const Error& e) {
      r.error = e.what();
    }
  }
  return r;
}

TensorTableEntry make_entry(RequestType type, const std::string& name, const TensorRef& in, const TensorRef& out,
                            const std::shared_ptr<detail::HandleState>& state) {
  TensorTableEntry e;
  e.name = name;
  e.type = type;
  e.input = in;
  e.output = out;
  e.handle = state;
  e.enqueued = std::chrono::steady_clock::now();
  return e;
}

void check_name(const std::string& name, const char* op) {
  if (name.empty())
    throw InvalidArgumentError(std::string(op) + " needs a tensor name: every rank must pass the same non-empty name.");
}

Handle submit(Runtime& rt, RequestType type, const std::string& name, const TensorRef& in, const TensorRef& out,
              Request req) {
  auto state = std::make_shared<detail::HandleState>(1);
  std::vector<TensorTableEntry> entries;
  entries.push_back(make_entry(type, name, in, out, state));
  return rt.enqueue(std::move(entries), {std::move(req)}, state);
}

}  // namespace

void init() {
  Instance& inst = instance();
  std::lock_guard<std::mutex> lock(inst.mu);
  if (inst.runtime) return;
  Config config = load_config(process_env_lookup());
  inst.runtime = std::make_shared<Runtime>(config);
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
    inst.was_shut_down = true;
  }
  rt->shutdown();
}

bool initialized() {
  Instance& inst = instance();
  std::lock_guard<std::mutex> lock(inst.mu);
  return inst.runtime != nullptr;
}

int rank() { return get("rank()")->topology().rank; }
int size() { return get("size()")->topology().size; }
int local_rank() { return get("local_rank()")->topology().local_rank; }
int local_size() { return get("local_size()")->topology().local_size; }
int cross_rank() { return get("cross_rank()")->topology().cross_rank; }
int cross_size() { return get("cross_size()")->topology().cross_size; }
bool is_homogeneous() { return get("is_homogeneous()")->topology().homogeneous; }

Handle allreduce_async(TensorRef in, TensorRef out, const std::string& name, ReduceOp op, double prescale,
                       double postscale) {
  auto rt = get("allreduce_async()");
  check_name(name, "allreduce");
  Request req = make_request(*rt, RequestType::kAllreduce, name, in);
  req.reduce_op = op;
  req.prescale = prescale;
  req.postscale = postscale;
  if (req.error.empty()) req.error = check_tensor(in, "the input");
  if (req.error.empty()) req.error = check_tensor(out, "the output");
  if (req.error.empty() && (out.num_elements() != in.num_elements() || out.dtype() != in.dtype()))
    req.error = "the output (" + std::string(dtype_name(out.dtype())) + " " + shape_string(out.shape()) +
                ") does not match the input (" + dtype_name(in.dtype()) + " " + shape_string(in.shape()) +
                "): pass an output of the same dtype and number of elements, or the input itself.";
  if (req.error.empty() && !(out.device() == in.device()))
    req.error = "the input is on " + device_name(in.device()) + " but the output on " + device_name(out.device()) + ".";
  return submit(*rt, RequestType::kAllreduce, name, in, out, std::move(req));
}

Handle grouped_allreduce_async(std::vector<TensorRef> in, std::vector<TensorRef> out, const std::string& name,
                               ReduceOp op) {
  auto rt = get("grouped_allreduce_async()");
  check_name(name, "grouped_allreduce");
  if (in.size() != out.size())
    throw InvalidArgumentError("grouped_allreduce of '" + name + "' failed: " + std::to_string(in.size()) +
                               " inputs but " + std::to_string(out.size()) + " outputs; pass one output per input.");
  auto state = std::make_shared<detail::HandleState>(static_cast<int>(in.size()));
  if (in.empty()) {
    state->complete_one();
    return Handle(state);
  }
  std::vector<TensorTableEntry> entries;
  std::vector<Request> requests;
  for (size_t i = 0; i < in.size(); ++i) {
    std::string member = name + "." + std::to_string(i);
    Request req = make_request(*rt, RequestType::kAllreduce, member, in[i]);
    req.reduce_op = op;
    req.group = name;
    req.group_size = static_cast<int32_t>(in.size());
    if (req.error.empty()) req.error = check_tensor(in[i], "the input");
    if (req.error.empty() && (out[i].num_elements() != in[i].num_elements() || out[i].dtype() != in[i].dtype()))
      req.error = "output " + std::to_string(i) + " does not match input " + std::to_string(i) + " in dtype or size.";
    entries.push_back(make_entry(RequestType::kAllreduce, member, in[i], out[i], state));
    requests.push_back(std::move(req));
  }
  return rt->enqueue(std::move(entries), std::move(requests), state);
}

Handle allgather_async(TensorRef in, const std::string& name) {
  auto rt = get("allgather_async()");
  check_name(name, "allgather");
  Request req = make_request(*rt, RequestType::kAllgather, name, in);
  if (req.error.empty()) req.error = check_tensor(in, "the input");
  if (req.error.empty() && in.shape().empty())
    req.error = "a scalar has no first dimension to gather along; pass shape {1} instead of {}.";
  return submit(*rt, RequestType::kAllgather, name, in, in, std::move(req));
}

Handle broadcast_async(TensorRef inout, int root, const std::string& name) {
  auto rt = get("broadcast_async()");
  check_name(name, "broadcast");
  Request req = make_request(*rt, RequestType::kBroadcast, name, inout);
  req.root = root;
  const int size = rt->topology().size;
  if (req.error.empty()) req.error = check_tensor(inout, "the tensor");
  if (req.error.empty() && (root < 0 || root >= size))
    req.error = "root " + std::to_string(root) + " is out of range for " + std::to_string(size) +
                " ranks: pass a root from 0 to " + std::to_string(size - 1) + ".";
  return submit(*rt, RequestType::kBroadcast, name, inout, inout, std::move(req));
}

Handle alltoall_async(TensorRef in, std::vector<int64_t> splits, const std::string& name) {
  auto rt = get("alltoall_async()");
  check_name(name, "alltoall");
  Request req = make_request(*rt, RequestType::kAlltoall, name, in);
  const int size = rt->topology().size;
  if (req.error.empty()) req.error = check_tensor(in, "the input");
  if (req.error.empty() && in.shape().empty())
    req.error = "a scalar has no first dimension to split; pass shape {1} or more.";
  const int64_t rows = in.shape().empty() ? 0 : in.shape()[0];
  if (req.error.empty() && splits.empty()) {
    if (rows % size != 0)
      req.error = "no splits were given and the first dimension " + std::to_string(rows) +
                  " does not divide evenly among " + std::to_string(size) + " ranks; pass splits.";
    else
      splits.assign(size, rows / size);
  }
  if (req.error.empty()) {
    int64_t sum = 0;
    bool negative = false;
    for (int64_t s : splits) {
      sum += s;
      negative = negative || s < 0;
    }
    if (static_cast<int>(splits.size()) != size)
      req.error = "it gave " + std::to_string(splits.size()) + " splits for " + std::to_string(size) +
                  " ranks: pass one split per rank.";
    else if (negative)
      req.error = "it gave a negative split " + shape_string(splits) + ".";
    else if (sum != rows)
      req.error = "its splits " + shape_string(splits) + " add up to " + std::to_string(sum) +
                  ", but its tensor has " + std::to_string(rows) + " rows in its first dimension.";
  }
  auto state = std::make_shared<detail::HandleState>(1);
  std::vector<TensorTableEntry> entries;
  entries.push_back(make_entry(RequestType::kAlltoall, name, in, in, state));
  entries.back().splits = std::move(splits);
  return rt->enqueue(std::move(entries), {std::move(req)}, state);
}

Handle reducescatter_async(TensorRef in, const std::string& name, ReduceOp op) {
  auto rt = get("reducescatter_async()");
  check_name(name, "reducescatter");
  Request req = make_request(*rt, RequestType::kReducescatter, name, in);
  req.reduce_op = op;
  if (req.error.empty()) req.error = check_tensor(in, "the input");
  if (req.error.empty() && in.shape().empty())
    req.error = "a scalar has no first dimension to scatter; pass shape {1} or more.";
  return submit(*rt, RequestType::kReducescatter, name, in, in, std::move(req));
}

void barrier() {
  auto rt = get("barrier()");
  // One name for every barrier, as in Horovod: a per-rank counter in the name would drift apart
  // when a barrier completes on some ranks only (the others had joined), and every later barrier
  // would then wait for a name the other ranks never send. Barriers of several user threads of
  // one rank take turns (one name can be in flight once per rank).
  std::lock_guard<std::mutex> turn(rt->barrier_mutex());
  const std::string name = "__hvd.barrier";
  Request req = make_request(*rt, RequestType::kBarrier, name, TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}));
  Handle h = submit(*rt, RequestType::kBarrier, name, {}, {}, std::move(req));
  h.wait();
}

int join() {
  auto rt = get("join()");
  const std::string name = "__hvd.join";
  Request req = make_request(*rt, RequestType::kJoin, name, TensorRef(static_cast<void*>(nullptr), DataType::kUInt8, {0}));
  auto state = std::make_shared<detail::HandleState>(1);
  std::vector<TensorTableEntry> entries;
  entries.push_back(make_entry(RequestType::kJoin, name, {}, {}, state));
  Handle h = rt->enqueue(std::move(entries), {std::move(req)}, state);
  h.wait();
  std::lock_guard<std::mutex> lock(state->mu);
  return state->join_result;
}

}  // namespace hvd
