#pragma once

// Fusion planning: which ready responses run as one collective.
//
// Allreduce responses with the same dtype, device kind, reduce op, scale factors and contributor
// count are packed into one buffer up to the threshold (bytes). The plan scans ahead past
// responses that do not fit or do not match (as Horovod does), so one odd tensor does not split
// a run of compatible ones. Members of a group (grouped_allreduce) are one unit: always fused
// together, even past the threshold. The plan is a pure function of its input, so every rank that
// plans the same responses gets the same fused list — which the response cache's fast path relies
// on.

#include <cstdint>
#include <vector>

#include "runtime/message.h"

namespace hvd {

struct FusionOptions {
  int64_t threshold_bytes = 64 << 20;
};

// Sum over names of elements x dtype size (the members in lanes: Response::lane_bytes).
int64_t response_bytes(const Response& r);
// Whether plan_fusion may pack `next` into the same buffer as `bucket` (threshold aside): both
// allreduce responses without an error and with the same parameters.
bool can_fuse(const Response& bucket, const Response& next);
// What can_fuse() reads of a response, on its own: the response cache keeps it per entry so that
// its fast path fuses a hit without reading the cached response (runtime/response_cache.h).
struct FusionTraits {
  bool fusable = false;  // an allreduce without an error, not a group unit
  DataType dtype = DataType::kFloat32;
  Device::Kind device_kind = Device::kCPU;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t contributors = 0;
  double prescale = 1.0, postscale = 1.0;
  bool deterministic = false;
};
FusionTraits fusion_traits(const Response& r);
// The same parameters (dtype, device kind, reduce op, scale factors, contributors, order).
inline bool same_parameters(const FusionTraits& a, const FusionTraits& b) {
  return a.dtype == b.dtype && a.device_kind == b.device_kind && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale &&
         a.contributors == b.contributors && a.deterministic == b.deterministic;
}
inline bool can_fuse(const FusionTraits& bucket, const FusionTraits& next) {
  return bucket.fusable && next.fusable && same_parameters(bucket, next);
}
std::vector<Response> plan_fusion(std::vector<Response> responses, const FusionOptions& options);

}  // namespace hvd
