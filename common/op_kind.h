#pragma once

// The kinds of operation hvd negotiates, in one table. runtime/message.h generates RequestType and
// ResponseType from it, ops/collective_op.h generates ops::CollectiveType from its data rows, and
// the runtime asks the table (op_kind()) how to treat a kind instead of switching on it: which
// ranks must submit it before it runs, whether it may be cached and fused, what every rank must
// agree on. Adding an operation is one row here, its entry point (runtime/api.cc) and, for a data
// row, its op in each backend (ops/mpi/, ops/nccl/): docs/extending.md.
//
// Columns: enumerator, name in messages, who must submit it (kAllMembers: every member of the
// process set that has not joined; kPair: the sender and the receiver of a send/recv), flags:
//   kData          moves data: an ops::CollectiveType runs it (the rows before the control ones)
//   kCacheable     its response may be cached for the fast path (runtime/response_cache.h)
//   kFusable       responses of one dtype and device may run as one batch (runtime/fusion.h)
//   kReduces       every rank must agree on the reduce op and scale factors
//   kRooted        every rank must agree on the root
//   kMakesResult   the op allocates and fills OpEntry::result (ops/collective_op.h)
//   kFirstDimFree  ranks may pass different first dimensions
// The values travel in the negotiation messages: rows are appended, never reordered.
#define HVD_DATA_OP_KINDS(X)                                                                    \
  X(kAllreduce, "allreduce", kAllMembers, kData | kCacheable | kFusable | kReduces)             \
  X(kAllgather, "allgather", kAllMembers, kData | kMakesResult | kFirstDimFree)                 \
  X(kBroadcast, "broadcast", kAllMembers, kData | kCacheable | kRooted)                         \
  X(kAlltoall, "alltoall", kAllMembers, kData | kMakesResult | kFirstDimFree)                   \
  X(kReducescatter, "reducescatter", kAllMembers, kData | kCacheable | kReduces | kMakesResult) \
  X(kSendRecv, "send/recv", kPair, kData)
// Control rows: no data moves; the executor completes their handles (runtime/executor.cc).
//   barrier      every member reached it
//   join         a rank has no more data (the global set only)
//   process_set  add_process_set() / remove_process_set() (the global set only)
#define HVD_CONTROL_OP_KINDS(X)          \
  X(kBarrier, "barrier", kAllMembers, 0) \
  X(kJoin, "join", kAllMembers, 0)       \
  X(kProcessSet, "process_set", kAllMembers, 0)

#define HVD_OP_KINDS(X) HVD_DATA_OP_KINDS(X) HVD_CONTROL_OP_KINDS(X)

#include <cstdint>

namespace hvd {

enum class Participants : uint8_t { kAllMembers, kPair };

namespace op_flags {
inline constexpr uint32_t kData = 1, kCacheable = 2, kFusable = 4, kReduces = 8, kRooted = 16,
                          kMakesResult = 32, kFirstDimFree = 64;
}  // namespace op_flags

struct OpKindInfo {
  const char* name;
  Participants participants;
  uint32_t flags;
  constexpr bool has(uint32_t f) const { return (flags & f) != 0; }
};

namespace detail {
using enum Participants;
using namespace op_flags;
#define HVD_OP_KIND_INFO(kind, text, who, flags) OpKindInfo{text, who, flags},
inline constexpr OpKindInfo kOpKindTable[] = {HVD_OP_KINDS(HVD_OP_KIND_INFO)};
#undef HVD_OP_KIND_INFO
#define HVD_OP_KIND_COUNT(...) +1
inline constexpr int kDataOpKinds = 0 HVD_DATA_OP_KINDS(HVD_OP_KIND_COUNT);
inline constexpr int kOpKinds = 0 HVD_OP_KINDS(HVD_OP_KIND_COUNT);
#undef HVD_OP_KIND_COUNT
}  // namespace detail

// The row of kind value `v` (an enumerator of RequestType, ResponseType below kError, or
// ops::CollectiveType); nullptr for a value outside the table (a corrupt message).
constexpr const OpKindInfo* op_kind(int v) {
  return v >= 0 && v < detail::kOpKinds ? &detail::kOpKindTable[v] : nullptr;
}

}  // namespace hvd
