#pragma once

// A grouped allreduce negotiated and run as one unit (docs/architecture.md, "Groups as units").
//
// grouped_allreduce_async() of N tensors with no local error queues one entry (the members'
// tensors in TensorTableEntry::members_in/members_out) and one *unit request*: its name and its
// group are the group's name, and its shape is the members' signature (per member: dtype, device
// kind, device index, dimension count, dimensions). A unit request never travels to rank 0:
//
//  - The response cache holds one *unit response* per group (names {group}, shapes {signature}),
//    which every rank puts when a slow path completes all the members of a group (units_of(), from
//    the responses every rank receives, so the caches stay identical). A unit request that matches
//    it is one hit bit, the fast path hands the executor one response for the whole group, and
//    the executor runs the members from the entry: one batch per run of members with the same
//    dtype and device. Per member this costs the checks and the copies, not a request, an entry,
//    a handle, a cache lookup and a response each.
//  - A unit request that is not a hit (the group's first step; a member reshaped; a rank that has
//    joined; a hit that waited too long for the other ranks) is expanded on the background thread
//    into the member requests and entries of a group ("<group>.<i>": expand() and
//    TensorQueue::expand_unit()), which rank 0 negotiates and validates member by member as
//    before.
//
// A group with a local error (a bad member) takes the member path from the start, so that rank 0
// fails the whole group on every rank with the member's message.

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/tensor.h"
#include "runtime/handle.h"
#include "runtime/message.h"
#include "runtime/tensor_queue.h"

namespace hvd::group_unit {

inline bool is_unit(const Request& r) { return !r.group.empty() && r.name == r.group; }
inline bool is_unit(const Response& r) {
  return !r.group.empty() && r.names.size() == 1 && r.names[0] == r.group;
}

// The members' signature, into *out (replaced).
void signature(const std::vector<TensorRef>& members, std::vector<int64_t>* out);

// The unit request and entry of group `group` of the members in -> out (in.size() members, at
// least one), whose operation completes `handle`: what grouped_allreduce_async() queues.
// `deterministic`: reduced in rank order (hvd::set_deterministic), a part of the request.
void make(int32_t rank, const std::string& group, ReduceOp op, bool deterministic,
          std::vector<TensorRef> in, std::vector<TensorRef> out,
          std::shared_ptr<detail::HandleState> handle, Request* request, TensorTableEntry* entry);

// Member i's name: "<group>.<i>", into *out (replaced; its buffer reused).
void member_name(const std::string& group, size_t i, std::string* out);

// The member requests of unit request `unit`, appended to *out. Throws InternalError on a
// malformed signature.
void expand(const Request& unit, std::vector<Request>* out);

// The unit responses of the groups whose members all succeeded, on every rank (contributors ==
// size), among `responses` (a slow path's, before fusion: one response per member), in order of
// each group's first member.
std::vector<Response> units_of(const std::vector<Response>& responses, int size);

// Whether `r` is a member of a group that units_of() turned into a unit (the member itself is
// then not cached: a unit request never looks it up).
bool in_unit(const Response& r, const std::vector<Response>& units);

}  // namespace hvd::group_unit
