#pragma once

// The argument checks of the public entry points (runtime/api.cc), in one place and one order:
// the name first
// (check_name() throws at once: without a valid name no other rank can tell which operation this
// is), then each tensor, input/output agreement, the operation's own parameters (reduce op, scale
// factors, first dimension, root, splits) and last overlapping buffers. The first failure wins.
// (allreduce_async runs the tensor checks first, which only collect their errors, and checks the
// name only when no lane takes the tensor: a lane's name was checked when it was negotiated. What
// is thrown, and in which order, is the same.)
// A failure is the reason alone ("the input has 4 elements but a null data pointer."): it travels
// in the request's `error` field, and rank 0 fails the operation on every rank with
// "<op> of '<name>' failed: rank <r>: <reason>" (runtime/controller.cc). docs/errors.md has one row
// per reason; tests/errors/test_validation.cc triggers each and matches the text against that row.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "cluster/gpu_assignment.h"
#include "common/dtype.h"
#include "common/number_text.h"
#include "common/ranks.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "hvd/tensor.h"

namespace hvd::arg_checks {

// A name as check_name()'s messages show it: NUL bytes as \0, at most 64 bytes, then "...".
inline std::string shown(const std::string& name) {
  std::string s;
  for (char c : name) s += c == '\0' ? std::string("\\0") : std::string(1, c);
  return s.size() <= 64 ? s : s.substr(0, 64) + "...";
}

// Thrown at once on this rank: a name that no rank can match.
inline void check_name(const std::string& name, const char* op) {
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

inline bool known_dtype(DataType t) {
  const int v = static_cast<int>(t);
  return v >= static_cast<int>(DataType::kUInt8) && v <= static_cast<int>(DataType::kFloat64);
}

inline bool known_op(ReduceOp op) {
  const int v = static_cast<int>(op);
  return v >= static_cast<int>(ReduceOp::kAverage) && v <= static_cast<int>(ReduceOp::kProduct);
}

inline bool known_device(const Device& d) {
  return d.kind == Device::kCPU || (d.kind == Device::kCUDA && d.index >= 0);
}

// The tensor's size in bytes, or -1 when the dtype is unknown, a dimension negative, or the
// product of the non-zero dimensions times the element size overflows int64. (That bound keeps
// every product hvd forms from a shape in range: the element count as TensorRef::num_elements()
// multiplies it out left to right, a row's bytes for allgather and alltoall, the total bytes.)
inline int64_t byte_size(const TensorRef& t) {
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
  const cluster::GpuAssignment& gpu;  // this process's GPU (on_this_gpu)
  std::string error;                  // the first failure, "" while every check passed

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
    if (!failed()) fail(cluster::cuda_tensor_problem(gpu, t.device()));
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
      fail("prescale " + number_text(prescale) + " and postscale " + number_text(postscale) +
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

  // A root given as a global rank, for a process set other than the global one: returns its rank
  // in the set (-1 when a check failed).
  int member_root(int root, int set_id, const std::vector<int>& members) {
    if (failed()) return -1;
    const auto it = std::lower_bound(members.begin(), members.end(), root);
    if (it == members.end() || *it != root) {
      fail("root " + std::to_string(root) + " is not a member of process set " +
           std::to_string(set_id) + " (" + rank_list(members) +
           "): pass the global rank of a member.");
      return -1;
    }
    return static_cast<int>(it - members.begin());
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

}  // namespace hvd::arg_checks
