#include "ops/operation_manager.h"

#include "hvd/error.h"

namespace hvd::ops {

double post_factor(const OpBatch& batch) {
  double f = batch.postscale;
  if (batch.reduce_op == ReduceOp::kAverage) f /= batch.contributors > 0 ? batch.contributors : 1;
  return f;
}

void OperationManager::add(std::unique_ptr<CollectiveOp> op) { ops_.push_back(std::move(op)); }

CollectiveOp* OperationManager::select(const OpBatch& batch) const {
  for (const auto& op : ops_)
    if (op->type() == batch.type && op->enabled(batch)) return op.get();
  return nullptr;
}

void OperationManager::execute(OpBatch& batch) {
  CollectiveOp* op = select(batch);
  if (op == nullptr) {
    std::string name = batch.entries.empty() ? "" : batch.entries[0].name;
    throw InvalidArgumentError(
        std::string(collective_name(batch.type)) + " of '" + name +
        "' failed: no backend in this build handles " + device_name(batch.device) +
        " tensors. Rebuild hvd with -DHVD_WITH_CUDA=ON for GPU tensors, or pass CPU tensors.");
  }
  op->execute(batch);
}

}  // namespace hvd::ops
