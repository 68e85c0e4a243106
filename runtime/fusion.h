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
std::vector<Response> plan_fusion(std::vector<Response> responses, const FusionOptions& options);

}  // namespace hvd
