#pragma once

// The negotiation messages. A Request says "this rank has tensor `name` ready for this
// collective, with these parameters"; rank 0 collects them and answers with Responses that every
// rank executes in the same order. Both serialise to a compact binary form for MPI_Gatherv /
// MPI_Bcast; parsing checks every length against the buffer (a corrupt message is an
// InternalError, never a crash).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/op_kind.h"
#include "common/ranks.h"
#include "hvd/collectives.h"
#include "hvd/tensor.h"
#include "ops/collective_op.h"

namespace hvd {

// hvd's own operation names, under the prefix user names may not take (hvd::kReservedNamePrefix,
// refused in runtime/api.cc). Each is written here only: the ranks' requests, rank 0's responses
// and the executor find one another by these names.
inline constexpr const char* kBarrierName = "__hvd.barrier";  // every barrier()
inline constexpr const char* kJoinName = "__hvd.join";        // join(), and its release response
// The error response that carries the reason for a shutdown decided on rank 0.
inline constexpr const char* kShutdownNotice = "__hvd.shutdown";
// add_process_set()/remove_process_set(): this prefix and the call's number on every rank.
inline constexpr const char* kProcessSetPrefix = "__hvd.process_set.";
// send()/recv(): this prefix, then "<sender>><receiver>.<tag>.<number>" in global ranks.
inline constexpr const char* kSendRecvPrefix = "__hvd.p2p.";
static_assert(std::string_view(kProcessSetPrefix).starts_with(kReservedNamePrefix) &&
                  std::string_view(kSendRecvPrefix).starts_with(kReservedNamePrefix),
              "hvd's own names must be reserved ones");
static_assert(std::string_view(kBarrierName).starts_with(kReservedNamePrefix) &&
                  std::string_view(kJoinName).starts_with(kReservedNamePrefix) &&
                  std::string_view(kShutdownNotice).starts_with(kReservedNamePrefix),
              "hvd's own names must be reserved ones, or a user's tensor could take them");

// Generated from common/op_kind.h, as are ops::CollectiveType and ResponseType below: the same
// value names the same kind in all three (the runtime converts between them with static_cast).
#define HVD_OP_KIND_ENUMERATOR(kind, ...) kind,
enum class RequestType : uint8_t { HVD_OP_KINDS(HVD_OP_KIND_ENUMERATOR) };
const char* request_type_name(RequestType t);  // "allreduce", ...

struct Request {
  int32_t rank = 0;
  RequestType type = RequestType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  Device device;
  int32_t root = -1;  // broadcast: the root; send/recv: the sender (ranks of the process set)
  int32_t peer = -1;  // send/recv: the receiver
  double prescale = 1.0;
  double postscale = 1.0;
  bool deterministic = false;  // reductions: HVD_DETERMINISTIC / hvd::set_deterministic() was on
  std::string name;
  std::vector<int64_t> shape;
  std::string group;       // grouped allreduce: the group's name ("" when not grouped)
  int32_t group_size = 0;  // members in the group
  std::string error;       // a local validation failure every rank must see (e.g. bad splits)
  // How long the request had waited on its rank when it was sent to rank 0 (set by the sender), so
  // that rank 0's stall inspector measures a stall from the first submission on any rank, whatever
  // the clocks of other nodes say and however long the request waited on the cached fast path.
  double waited_seconds = 0;
  // When the user submitted it (this process's steady clock; not sent).
  std::chrono::steady_clock::time_point submitted{};
  // NameIndex::hash(name), set by the tensor queue, which hashes the name anyway, so that the
  // response cache's lookup does not hash it again; 0: not known (not sent). A stale value could
  // only cost a cache miss: the lookup still compares the names.
  uint64_t name_hash = 0;
};

// The request kinds, then kError: a failure every rank throws.
enum class ResponseType : uint8_t { HVD_OP_KINDS(HVD_OP_KIND_ENUMERATOR) kError };
#undef HVD_OP_KIND_ENUMERATOR
const char* response_type_name(ResponseType t);

// The table row of a kind (common/op_kind.h); nullptr for kError and values outside the table.
inline const OpKindInfo* op_kind(RequestType t) { return op_kind(static_cast<int>(t)); }
inline const OpKindInfo* op_kind(ResponseType t) { return op_kind(static_cast<int>(t)); }
inline bool has_flag(RequestType t, uint32_t f) {
  const OpKindInfo* k = op_kind(t);
  return k && k->has(f);
}
inline bool has_flag(ResponseType t, uint32_t f) {
  const OpKindInfo* k = op_kind(t);
  return k && k->has(f);
}

// Response::lanes: a member that is not in a lane.
constexpr uint32_t kNoLane = UINT32_MAX;

struct Response {
  ResponseType type = ResponseType::kAllreduce;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;  // per name: the agreed shape (allgather: rank 0's)
  // allgather: first dimension of every rank, names.size() x size, row-major by name.
  std::vector<int64_t> first_dims;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  Device::Kind device_kind = Device::kCPU;
  int32_t root = -1;  // broadcast: the root; send/recv: the sender
  int32_t peer = -1;  // send/recv: the receiver
  double prescale = 1.0;
  double postscale = 1.0;
  bool deterministic = false;     // reductions: every element reduced in a fixed order
  int32_t contributors = 0;       // ranks that contribute data (size minus joined ranks)
  int32_t last_joined_rank = -1;  // kJoin
  std::string group;              // members of one group are fused together
  std::string error;              // kError: the message every rank throws
  // Local, never sent: empty, or per name the cache position of the lane that holds this rank's
  // tensor (runtime/lanes.h), kNoLane for a tensor in the queue's table. Set by the controller's
  // fast path, kept by plan_fusion (append_members). A member in a lane may have an empty name and
  // shape (the lane has them: TensorQueue::member_name); lane_bytes counts the bytes of all the
  // members in lanes (response_bytes()).
  std::vector<uint32_t> lanes;
  int64_t lane_bytes = 0;
  bool in_lane(size_t i) const { return i < lanes.size() && lanes[i] != kNoLane; }
  // Moves r's members (names, shapes, their lane positions and bytes) to the end of this
  // response's; r is left without them.
  void append_members(Response& r);

  // Every field back to a default Response's value, the containers' buffers kept (one response
  // reused for every tensor of a job of one rank: response_for(Request&&, n, Response*)). A field
  // added above is reset here too (test_message: a response with every field set, reset, serializes
  // as Response{} does).
  void reset();
};

std::string serialize_requests(const std::vector<Request>& requests);
std::vector<Request> parse_requests(const char* data, size_t size);
std::string serialize_responses(const std::vector<Response>& responses);
std::vector<Response> parse_responses(const char* data, size_t size);

}  // namespace hvd
