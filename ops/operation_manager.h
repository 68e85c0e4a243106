#pragma once

// Picks the backend for each batch: the first registered op of the batch's collective type whose
// enabled() accepts it. Registration order is the documented preference order, in one function
// (ops/backends.h: make_operations). Not thread-safe: owned and used by the background thread.

#include <memory>
#include <vector>

#include "ops/collective_op.h"

namespace hvd::ops {

class OperationManager {
 public:
  void add(std::unique_ptr<CollectiveOp> op);
  // Throws InvalidArgumentError when no backend applies (e.g. a GPU tensor in a CPU-only build).
  void execute(OpBatch& batch);
  CollectiveOp* select(const OpBatch& batch) const;

 private:
  std::vector<std::unique_ptr<CollectiveOp>> ops_;
};

}  // namespace hvd::ops
