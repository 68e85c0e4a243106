// hvd::torch: torch::Tensor <-> hvd::TensorRef, the collectives on tensors, broadcast_parameters.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#if defined(HVD_TORCH_WITH_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

#include "hvd/config.h"
#include "internal.h"

namespace hvd::torch {

namespace internal {

namespace {
constexpr const char* kSupported = "uint8, int8, int32, int64, float16, bfloat16, float32, float64";

// A request the core rejects on every rank ("... has dtype 127, which is not a DataType ...").
TensorRef poison() { return TensorRef(nullptr, static_cast<DataType>(127), {0}); }
}  // namespace

std::string sizes_string(at::IntArrayRef sizes) {
  std::string s = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return std::string(c10::toString(t.scalar_type())) + " " + sizes_string(t.sizes()) + " on " +
         t.device().str();
}

std::string problem(const at::Tensor& t) {
  if (!t.defined())
    return "is undefined (a default-constructed tensor, or a .grad() that no backward() has "
           "produced): pass a "
           "defined tensor.";
  if (t.layout() != c10::kStrided) {
    std::ostringstream layout;
    layout << t.layout();
    return "has layout " + layout.str() +
           "; hvd takes dense tensors: convert it first (e.g. .to_dense()).";
  }
  const c10::ScalarType st = t.scalar_type();
  switch (st) {
    case at::kByte:
    case at::kChar:
    case at::kInt:
    case at::kLong:
    case at::kHalf:
    case at::kBFloat16:
    case at::kFloat:
    case at::kDouble:
      break;
    default: {
      std::string fix = ".to(torch::kFloat32)";
      if (st == at::kBool)
        fix = ".to(torch::kUInt8) (and back with .to(torch::kBool))";
      else if (st == at::kShort)
        fix = ".to(torch::kInt32)";
      else if (c10::isComplexType(st))
        fix = "torch::view_as_real(t) (a float tensor with a last dimension of 2)";
      else if (c10::isQIntType(st))
        fix = ".dequantize()";
      return "has dtype " + std::string(c10::toString(st)) +
             ", which hvd does not support (hvd: " + kSupported + "): convert it first, e.g. " +
             fix + ".";
    }
  }
  if (!t.is_cpu() && !t.is_cuda())
    return "is on " + t.device().str() + ", which hvd does not support: pass a CPU or CUDA tensor.";
#if !defined(HVD_TORCH_WITH_CUDA)
  if (t.is_cuda())
    return "is on " + t.device().str() +
           ", but hvd::torch was built against a CPU-only LibTorch: rebuild hvd against a CUDA "
           "build of LibTorch, or "
           "pass a CPU tensor.";
#endif
  if (!t.is_contiguous())
    return "is not contiguous (shape " + sizes_string(t.sizes()) + ", strides " +
           sizes_string(t.strides()) +
           "): hvd reads and writes one contiguous block of memory; call .contiguous() first (for "
           "an in-place "
           "operation, run it on c = t.contiguous(), then t.copy_(c)).";
  return "";
}

TensorRef ref(const at::Tensor& t) {
  Shape shape(t.sizes().data(), t.sizes().size());
  Device device = Device::cpu();
  void* stream = nullptr;
  if (t.is_cuda()) {
    device = Device::cuda(t.get_device());
#if defined(HVD_TORCH_WITH_CUDA)
    stream = static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.get_device()).stream());
#endif
  }
  return TensorRef(t.data_ptr(), dtype_of(t.scalar_type()), std::move(shape), device, stream);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return "allreduce";
    case Op::kGroupedAllreduce:
      return "grouped_allreduce";
    case Op::kAllgather:
      return "allgather";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kAlltoall:
      return "alltoall";
    case Op::kReducescatter:
      return "reducescatter";
  }
  return "?";
}

void fail_everywhere(Op op, const std::string& name, const std::string& what, int root,
                     std::size_t members, const ProcessSet& set) {
  const std::string message =
      std::string("hvd::torch::") + op_name(op) + " of '" + name + "' failed: " + what;
  // A bad name, or hvd not running, throws here: that message wins (no other rank could match).
  hvd::Handle h;
  switch (op) {
    case Op::kAllreduce:
      h = set.allreduce_async(poison(), poison(), name);
      break;
    case Op::kGroupedAllreduce: {
      if (members == 0) throw InvalidArgumentError(message);
      std::vector<TensorRef> in(members, poison()), out(members, poison());
      h = set.grouped_allreduce_async(std::move(in), std::move(out), name);
      break;
    }
    case Op::kAllgather:
      h = set.allgather_async(poison(), name);
      break;
    case Op::kBroadcast:
      h = set.broadcast_async(poison(), root, name);
      break;
    case Op::kAlltoall:
      h = set.alltoall_async(poison(), {}, name);
      break;
    case Op::kReducescatter:
      h = set.reducescatter_async(poison(), name);
      break;
  }
  try {
    h.wait();
  } catch (const hvd::Error&) {
    // Expected: every rank's operation failed. This rank reports the reason.
  }
  throw InvalidArgumentError(message);
}

void bump_version(const at::Tensor& t) {
  if (t.defined() && !t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

void broadcast_in_place(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int root) {
  std::vector<hvd::torch::Handle> handles;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (target, contiguous copy)
  handles.reserve(tensors.size());
  std::exception_ptr first;
  for (const auto& [name, t] : tensors) {
    try {
      at::Tensor target = t;
      if (t.defined() && t.layout() == c10::kStrided && !t.is_contiguous()) {
        target = t.contiguous();
        copy_back.emplace_back(t, target);
      }
      handles.push_back(broadcast_async_(target, root, name));
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  at::NoGradGuard no_grad;
  for (auto& [t, c] : copy_back) t.copy_(c);
}

}  // namespace internal

using internal::fail_everywhere;
using internal::Op;

// ---- dtypes and views ---------------------------------------------------------------------------

DataType dtype_of(c10::ScalarType type) {
  switch (type) {
    case at::kByte:
      return DataType::kUInt8;
    case at::kChar:
      return DataType::kInt8;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    default:
      break;
  }
  at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(type));
  throw InvalidArgumentError("hvd::torch::dtype_of: the tensor " + internal::problem(probe));
}

c10::ScalarType scalar_type_of(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return at::kByte;
    case DataType::kInt8:
      return at::kChar;
    case DataType::kInt32:
      return at::kInt;
    case DataType::kInt64:
      return at::kLong;
    case DataType::kFloat16:
      return at::kHalf;
    case DataType::kBFloat16:
      return at::kBFloat16;
    case DataType::kFloat32:
      return at::kFloat;
    case DataType::kFloat64:
      return at::kDouble;
  }
  throw InvalidArgumentError("hvd::torch::scalar_type_of: " +
                             std::to_string(static_cast<int>(dtype)) + " is not an hvd DataType.");
}

TensorRef tensor_ref(const at::Tensor& tensor, const std::string& name) {
  const std::string p = internal::problem(tensor);
  if (!p.empty()) throw InvalidArgumentError("hvd::torch::tensor_ref: '" + name + "' " + p);
  return internal::ref(tensor);
}

std::vector<NamedTensor> named_tensors(const NamedTensors& tensors, const std::string& prefix) {
  std::vector<NamedTensor> out;
  out.reserve(tensors.size());
  for (const auto& item : tensors) {
    const std::string name = prefix + item.key();
    const std::string p = internal::problem(item.value());
    if (!p.empty()) throw InvalidArgumentError("hvd::torch::named_tensors: '" + name + "' " + p);
    if (!item.value().is_cpu() && !HVD_HAVE_CUDA)
      throw InvalidArgumentError(
          "hvd::torch::named_tensors: '" + name + "' is on " + item.value().device().str() +
          ", but hvd was built without CUDA, and its Checkpointer takes CPU tensors: pass .cpu() "
          "copies (hvd::torch::Checkpointer does this for a model and an optimizer).");
    out.push_back(NamedTensor{name, internal::ref(item.value())});
  }
  return out;
}

// ---- Handle -------------------------------------------------------------------------------------

struct HandleImpl {
  hvd::Handle core;
  bool core_output = false;      // the result is core.output() (allgather, alltoall, reducescatter)
  std::vector<at::Tensor> keep;  // inputs kept alive until the operation is complete
  std::vector<at::Tensor>
      outputs;  // the results; for core_output, the input (its dtype and device)
  bool done = false;

  ~HandleImpl() {
    if (core.valid() && !done) {
      try {
        core.wait();  // the tensors must outlive the operation
      } catch (...) {}
    }
  }

  void wait() {
    if (done) return;
    core.wait();
    done = true;
    keep.clear();
    if (core_output) {
      const at::Tensor like = outputs.at(0);
      hvd::Tensor& out = core.output();
      const auto options = at::TensorOptions().dtype(like.scalar_type()).device(at::kCPU);
      at::Tensor cpu;
      if (out.num_elements() == 0) {
        cpu = at::empty(out.shape(), options);
      } else {
        hvd::Handle keep_alive = core;  // the output's memory lives in the operation's state
        cpu = at::from_blob(
            out.data(), out.shape(), [keep_alive](void*) mutable { keep_alive = hvd::Handle(); },
            options);
      }
      outputs = {like.is_cpu() ? cpu : cpu.to(like.device())};
      core_output = false;
    } else {
      for (const auto& t : outputs) internal::bump_version(t);
    }
  }
};

struct HandleAccess {
  static Handle make(hvd::Handle core, std::vector<at::Tensor> keep,
                     std::vector<at::Tensor> outputs, bool core_output) {
    Handle h;
    h.impl_ = std::make_shared<HandleImpl>();
    h.impl_->core = std::move(core);
    h.impl_->keep = std::move(keep);
    h.impl_->outputs = std::move(outputs);
    h.impl_->core_output = core_output;
    return h;
  }
};

namespace {
HandleImpl& impl_of(const std::shared_ptr<HandleImpl>& impl) {
  if (!impl) hvd::Handle().wait();  // throws the core's "this hvd::Handle is empty" error
  return *impl;
}
}  // namespace

bool Handle::valid() const { return impl_ && impl_->core.valid(); }
bool Handle::ready() const { return impl_ && (impl_->done || impl_->core.ready()); }
void Handle::wait() { impl_of(impl_).wait(); }
hvd::Handle Handle::core() const { return impl_ ? impl_->core : hvd::Handle(); }

at::Tensor Handle::output() {
  HandleImpl& impl = impl_of(impl_);
  impl.wait();
  if (impl.outputs.size() != 1)
    throw InvalidArgumentError("hvd::torch::Handle::output(): this operation has " +
                               std::to_string(impl.outputs.size()) +
                               " results (a grouped allreduce): use outputs().");
  return impl.outputs[0];
}

std::vector<at::Tensor> Handle::outputs() {
  HandleImpl& impl = impl_of(impl_);
  impl.wait();
  return impl.outputs;
}

const std::vector<int64_t>& Handle::received_splits() const {
  return impl_of(impl_).core.received_splits();
}

at::Tensor synchronize(Handle& handle) { return handle.output(); }

// ---- Collectives -------------------------------------------------------------------------------

namespace {

void check(Op op, const std::string& name, const at::Tensor& t, const ProcessSet& set,
           int root = 0) {
  const std::string p = internal::problem(t);
  if (!p.empty()) fail_everywhere(op, name, "the tensor " + p, root, 1, set);
}

Handle allreduce_impl(const at::Tensor& in, const at::Tensor& out, const std::string& name,
                      ReduceOp op, double prescale, double postscale, const ProcessSet& set) {
  check(Op::kAllreduce, name, in, set);
  hvd::Handle h =
      set.allreduce_async(internal::ref(in), internal::ref(out), name, op, prescale, postscale);
  return HandleAccess::make(std::move(h), {in}, {out}, false);
}

Handle grouped_impl(const std::vector<at::Tensor>& in, const std::vector<at::Tensor>& out,
                    const std::string& name, ReduceOp op, const ProcessSet& set) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::string p = internal::problem(in[i]);
    if (!p.empty())
      fail_everywhere(
          Op::kGroupedAllreduce, name,
          "tensor " + std::to_string(i) + " ('" + name + "." + std::to_string(i) + "') " + p, 0,
          in.size(), set);
    if (i > 0 && in[i].device() != in[0].device())
      fail_everywhere(Op::kGroupedAllreduce, name,
                      "tensor " + std::to_string(i) + " ('" + name + "." + std::to_string(i) +
                          "') is on " + in[i].device().str() + " but tensor 0 on " +
                          in[0].device().str() +
                          ": pass every tensor of a group on one device (.to(device)).",
                      0, in.size(), set);
  }
  std::vector<TensorRef> rin, rout;
  for (std::size_t i = 0; i < in.size(); ++i) {
    rin.push_back(internal::ref(in[i]));
    rout.push_back(internal::ref(out[i]));
  }
  hvd::Handle h = set.grouped_allreduce_async(std::move(rin), std::move(rout), name, op);
  return HandleAccess::make(std::move(h), in, out, false);
}

}  // namespace

Handle allreduce_async(const at::Tensor& tensor, const std::string& name, ReduceOp op,
                       double prescale_factor, double postscale_factor, const ProcessSet& set) {
  check(Op::kAllreduce, name, tensor, set);
  return allreduce_impl(tensor, at::empty_like(tensor, at::MemoryFormat::Contiguous), name, op,
                        prescale_factor, postscale_factor, set);
}

at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, ReduceOp op,
                     double prescale_factor, double postscale_factor, const ProcessSet& set) {
  Handle h = allreduce_async(tensor, name, op, prescale_factor, postscale_factor, set);
  return h.output();
}

Handle allreduce_async_(const at::Tensor& tensor, const std::string& name, ReduceOp op,
                        double prescale_factor, double postscale_factor, const ProcessSet& set) {
  return allreduce_impl(tensor, tensor, name, op, prescale_factor, postscale_factor, set);
}

const at::Tensor& allreduce_(const at::Tensor& tensor, const std::string& name, ReduceOp op,
                             double prescale_factor, double postscale_factor,
                             const ProcessSet& set) {
  Handle h = allreduce_async_(tensor, name, op, prescale_factor, postscale_factor, set);
  h.wait();
  return tensor;
}

Handle grouped_allreduce_async(const std::vector<at::Tensor>& tensors, const std::string& name,
                               ReduceOp op, const ProcessSet& set) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors)
    out.push_back(internal::problem(t).empty() ? at::empty_like(t, at::MemoryFormat::Contiguous)
                                               : t);
  return grouped_impl(tensors, out, name, op, set);
}

std::vector<at::Tensor> grouped_allreduce(const std::vector<at::Tensor>& tensors,
                                          const std::string& name, ReduceOp op,
                                          const ProcessSet& set) {
  Handle h = grouped_allreduce_async(tensors, name, op, set);
  return h.outputs();
}

Handle grouped_allreduce_async_(const std::vector<at::Tensor>& tensors, const std::string& name,
                                ReduceOp op, const ProcessSet& set) {
  return grouped_impl(tensors, tensors, name, op, set);
}

const std::vector<at::Tensor>& grouped_allreduce_(const std::vector<at::Tensor>& tensors,
                                                  const std::string& name, ReduceOp op,
                                                  const ProcessSet& set) {
  Handle h = grouped_allreduce_async_(tensors, name, op, set);
  h.wait();
  return tensors;
}

Handle allgather_async(const at::Tensor& tensor, const std::string& name, const ProcessSet& set) {
  check(Op::kAllgather, name, tensor, set);
  hvd::Handle h = set.allgather_async(internal::ref(tensor), name);
  return HandleAccess::make(std::move(h), {tensor}, {tensor}, true);
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name, const ProcessSet& set) {
  Handle h = allgather_async(tensor, name, set);
  return h.output();
}

Handle broadcast_async_(const at::Tensor& tensor, int root, const std::string& name,
                        const ProcessSet& set) {
  check(Op::kBroadcast, name, tensor, set, root);
  hvd::Handle h = set.broadcast_async(internal::ref(tensor), root, name);
  return HandleAccess::make(std::move(h), {tensor}, {tensor}, false);
}

const at::Tensor& broadcast_(const at::Tensor& tensor, int root, const std::string& name,
                             const ProcessSet& set) {
  Handle h = broadcast_async_(tensor, root, name, set);
  h.wait();
  return tensor;
}

Handle broadcast_async(const at::Tensor& tensor, int root, const std::string& name,
                       const ProcessSet& set) {
  check(Op::kBroadcast, name, tensor, set, root);
  return broadcast_async_(tensor.clone(at::MemoryFormat::Contiguous), root, name, set);
}

at::Tensor broadcast(const at::Tensor& tensor, int root, const std::string& name,
                     const ProcessSet& set) {
  Handle h = broadcast_async(tensor, root, name, set);
  return h.output();
}

Handle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                      const std::string& name, const ProcessSet& set) {
  check(Op::kAlltoall, name, tensor, set);
  hvd::Handle h = set.alltoall_async(internal::ref(tensor), splits, name);
  return HandleAccess::make(std::move(h), {tensor}, {tensor}, true);
}

at::Tensor alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                    const std::string& name, std::vector<int64_t>* received_splits,
                    const ProcessSet& set) {
  Handle h = alltoall_async(tensor, splits, name, set);
  at::Tensor out = h.output();
  if (received_splits) *received_splits = h.received_splits();
  return out;
}

Handle reducescatter_async(const at::Tensor& tensor, const std::string& name, ReduceOp op,
                           const ProcessSet& set) {
  check(Op::kReducescatter, name, tensor, set);
  hvd::Handle h = set.reducescatter_async(internal::ref(tensor), name, op);
  return HandleAccess::make(std::move(h), {tensor}, {tensor}, true);
}

at::Tensor reducescatter(const at::Tensor& tensor, const std::string& name, ReduceOp op,
                         const ProcessSet& set) {
  Handle h = reducescatter_async(tensor, name, op, set);
  return h.output();
}

// ---- Parameters ---------------------------------------------------------------------------------

namespace {
void broadcast_named(std::vector<std::pair<std::string, at::Tensor>> tensors, int root) {
  std::unordered_set<std::string> seen;
  for (auto& [name, t] : tensors) {
    if (!seen.insert(name).second)
      throw InvalidArgumentError(
          "hvd::torch::broadcast_parameters: the name '" + name +
          "' appears twice: pass uniquely named tensors (named_parameters() is).");
    name = "hvd.torch.broadcast_parameters." + name;
  }
  internal::broadcast_in_place(tensors, root);
}
}  // namespace

void broadcast_parameters(const NamedTensors& named_tensors, int root) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& item : named_tensors) v.emplace_back(item.key(), item.value());
  broadcast_named(std::move(v), root);
}

void broadcast_parameters(const std::vector<std::pair<std::string, at::Tensor>>& named_tensors,
                          int root) {
  broadcast_named(named_tensors, root);
}

void broadcast_parameters(const ::torch::nn::Module& module, int root) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    v.emplace_back("param." + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (item.value().defined()) v.emplace_back("buffer." + item.key(), item.value());
  broadcast_named(std::move(v), root);
}

}  // namespace hvd::torch
