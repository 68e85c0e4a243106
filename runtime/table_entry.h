#pragma once

// What the tensor queue keeps of one submission until its response runs (runtime/tensor_queue.h):
// the tensors, the handle, and, for a grouped allreduce queued as one unit, its members.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hvd/tensor.h"
#include "runtime/handle.h"
#include "runtime/message.h"

namespace hvd {

struct TensorTableEntry {
  std::string name;
  RequestType type = RequestType::kAllreduce;
  TensorRef input;
  TensorRef output;
  std::vector<int64_t> splits;
  std::shared_ptr<detail::HandleState> handle;
  // A grouped allreduce queued as one unit (runtime/group_unit.h): the members' tensors. Behind a
  // pointer: every other entry pays one pointer for it, not two vectors, in each of its moves.
  struct Members {
    std::vector<TensorRef> in, out;
  };
  std::unique_ptr<Members> members;
};

}  // namespace hvd
