#include "runtime/fusion.h"

#include <limits>
#include <map>

#include "hvd/error.h"
#include "runtime/group_unit.h"

namespace hvd {
namespace {

// A group unit's response (runtime/group_unit.h) stands alone: its one shape is the members'
// signature, and the executor runs its members from the unit's entry.
bool fusable(const Response& r) {
  return has_flag(r.type, op_flags::kFusable) && r.error.empty() && !group_unit::is_unit(r);
}

bool compatible(const Response& a, const Response& b) {
  return same_parameters(fusion_traits(a), fusion_traits(b));
}

}  // namespace

FusionTraits fusion_traits(const Response& r) {
  FusionTraits t;
  t.fusable = fusable(r);
  t.dtype = r.dtype;
  t.device_kind = r.device_kind;
  t.reduce_op = r.reduce_op;
  t.contributors = r.contributors;
  t.prescale = r.prescale;
  t.postscale = r.postscale;
  t.deterministic = r.deterministic;
  return t;
}

bool can_fuse(const Response& bucket, const Response& next) {
  return can_fuse(fusion_traits(bucket), fusion_traits(next));
}

int64_t response_bytes(const Response& r) {
  // Saturating: an error response may carry the shape a bad request had (negative or huge
  // dimensions); fusion only compares the result with the threshold.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t total = r.lane_bytes;  // the members in lanes (their shapes may be empty)
  for (size_t i = 0; i < r.shapes.size(); ++i) {
    if (r.in_lane(i)) continue;
    const auto& shape = r.shapes[i];
    int64_t n = static_cast<int64_t>(dtype_size(r.dtype));
    for (int64_t d : shape) {
      if (d <= 0) {
        n = 0;
        break;
      }
      n = n > kMax / d ? kMax : n * d;
    }
    total = total > kMax - n ? kMax : total + n;
  }
  return total;
}

std::vector<Response> plan_fusion(std::vector<Response> responses, const FusionOptions& options) {
  // Responses are moved, never copied: a cycle of 1000 cached tensors would otherwise copy 1000
  // name strings and shapes several times over.
  // 1. Units: each group's members merged into one response (in order of first appearance).
  std::vector<Response> units;
  units.reserve(responses.size());
  std::map<std::string, size_t> group_unit;
  for (auto& r : responses) {
    if (fusable(r) && !r.group.empty()) {
      auto it = group_unit.find(r.group);
      if (it != group_unit.end() && compatible(units[it->second], r)) {
        units[it->second].append_members(r);
        continue;
      }
      group_unit[r.group] = units.size();
    }
    units.push_back(std::move(r));
  }
  // 2. Greedy buckets with look-ahead.
  std::vector<Response> out;
  std::vector<bool> taken(units.size(), false);
  std::vector<int64_t> bytes(units.size());
  for (size_t i = 0; i < units.size(); ++i) bytes[i] = response_bytes(units[i]);
  for (size_t i = 0; i < units.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    const std::string unit_group = units[i].group;
    Response bucket = std::move(units[i]);
    if (fusable(bucket) && options.threshold_bytes > 0) {
      int64_t total = bytes[i];
      for (size_t j = i + 1; j < units.size() && total < options.threshold_bytes; ++j) {
        if (taken[j] || !fusable(units[j]) || !compatible(bucket, units[j])) continue;
        if (total + bytes[j] > options.threshold_bytes) continue;
        bucket.append_members(units[j]);
        total += bytes[j];
        taken[j] = true;
      }
    }
    if (bucket.names.size() > 1 && bucket.group != unit_group) bucket.group.clear();
    out.push_back(std::move(bucket));
  }
  return out;
}

}  // namespace hvd
