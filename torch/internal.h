#pragma once

// Shared by the translation units of hvd::torch (not installed).
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "hvd/torch.h"

namespace hvd::torch::internal {

// The key of a parameter's entry in an optimizer's state(): its TensorImpl's address printed as a
// string in LibTorch 1.x (c10::guts::to_string, an ostream <<), the address itself in LibTorch 2.x.
using StateKey =
    std::decay_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>::key_type;
template <class Key = StateKey>
Key state_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// "[2,3]".
std::string sizes_string(at::IntArrayRef sizes);
// "float32 [2,3] on cpu".
std::string describe(const at::Tensor& t);

// Why `t` cannot go to hvd (a sentence fragment after "<role> "), or "" when it can.
std::string problem(const at::Tensor& t);
// The view of a tensor that passed problem().
TensorRef ref(const at::Tensor& t);

// Throws hvd::InvalidArgumentError "hvd::torch::<op> of '<name>' failed: <what>" after making the
// other ranks' operation `<op>` of `name` fail too (see hvd/torch.h): it submits a request the
// core rejects on every rank of `set`, waits for it, then throws. `members` is the size of a
// group.
enum class Op { kAllreduce, kGroupedAllreduce, kAllgather, kBroadcast, kAlltoall, kReducescatter };
[[noreturn]] void fail_everywhere(Op op, const std::string& name, const std::string& what,
                                  int root = 0, std::size_t members = 1,
                                  const ProcessSet& set = global_process_set());
const char* op_name(Op op);

// Copies root's value of every tensor into every rank's, in place; a non-contiguous tensor goes
// through a contiguous copy. Names must be unique and the same on every rank.
void broadcast_in_place(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int root);

// Marks an in-place change (autograd's version counter), as torch's own in-place ops do.
void bump_version(const at::Tensor& t);

}  // namespace hvd::torch::internal
