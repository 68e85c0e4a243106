// Groups as units (runtime/group_unit.h): the signature and the member requests a unit expands
// into, the unit responses a slow path's member responses make, and the queue's expansion of a
// unit's entry into its members' entries.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hvd/error.h"
#include "runtime/fusion.h"
#include "runtime/group_unit.h"
#include "runtime/response_cache.h"
#include "runtime/tensor_queue.h"

namespace hvd {
namespace {

std::vector<TensorRef> mixed_members() {
  return {TensorRef(nullptr, DataType::kFloat32, {2, 3}),
          TensorRef(nullptr, DataType::kFloat64, {0}),
          TensorRef(nullptr, DataType::kInt32, {}),  // a scalar
          TensorRef(nullptr, DataType::kFloat32, {5, 1, 4}, Device::cuda(1))};
}

// A group's unit request and entry, as grouped_allreduce_async() makes them on rank 3.
Request unit_request(const std::string& group, const std::vector<TensorRef>& members,
                     TensorTableEntry* entry = nullptr, bool deterministic = false) {
  Request q;
  TensorTableEntry e;
  group_unit::make(3, group, ReduceOp::kAverage, deterministic, members, members,
                   detail::make_handle_state(1), &q, entry ? entry : &e);
  q.submitted = std::chrono::steady_clock::now();
  return q;
}

// The member responses rank 0 sends for a group's requests.
std::vector<Response> member_responses(const std::vector<Request>& members, int size) {
  std::vector<Response> out;
  for (const auto& m : members) {
    Response r;
    r.type = ResponseType::kAllreduce;
    r.names = {m.name};
    r.shapes = {m.shape};
    r.dtype = m.dtype;
    r.reduce_op = m.reduce_op;
    r.device_kind = m.device.kind;
    r.contributors = size;
    r.group = m.group;
    out.push_back(std::move(r));
  }
  return out;
}

TEST(GroupUnit, ExpandsIntoTheMembersItsSignatureDescribes) {
  const auto members = mixed_members();
  const Request unit = unit_request("grads", members, nullptr, /*deterministic=*/true);
  EXPECT_TRUE(unit.deterministic);
  EXPECT_TRUE(group_unit::is_unit(unit));
  std::vector<Request> out;
  group_unit::expand(unit, &out);
  ASSERT_EQ(out.size(), members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(out[i].name, "grads." + std::to_string(i));
    EXPECT_FALSE(group_unit::is_unit(out[i]));
    EXPECT_EQ(out[i].dtype, members[i].dtype()) << i;
    EXPECT_EQ(out[i].shape, members[i].shape()) << i;
    EXPECT_EQ(out[i].device.kind, members[i].device().kind) << i;
    EXPECT_EQ(out[i].device.index, unit.device.index) << i;
    EXPECT_EQ(out[i].group, "grads");
    EXPECT_EQ(out[i].group_size, 4);
    EXPECT_EQ(out[i].reduce_op, ReduceOp::kAverage);
    EXPECT_TRUE(out[i].deterministic) << i;
    EXPECT_EQ(out[i].rank, 3);
    EXPECT_EQ(out[i].submitted, unit.submitted);
  }
}

TEST(GroupUnit, AMalformedSignatureIsAnInternalError) {
  Request unit = unit_request("g", mixed_members());
  unit.shape.pop_back();
  std::vector<Request> out;
  EXPECT_THROW(group_unit::expand(unit, &out), InternalError);
  unit = unit_request("g", mixed_members());
  unit.shape.push_back(7);
  EXPECT_THROW(group_unit::expand(unit, &out), InternalError);
  unit = unit_request("g", mixed_members());
  unit.group_size = 5;
  EXPECT_THROW(group_unit::expand(unit, &out), InternalError);
}

TEST(GroupUnit, ACompleteGroupBecomesOneUnitResponseThatItsRequestHits) {
  const auto members = mixed_members();
  const Request unit = unit_request("grads", members);
  std::vector<Request> expanded;
  group_unit::expand(unit, &expanded);
  std::vector<Response> slow = member_responses(expanded, 4);
  Response lone;
  lone.type = ResponseType::kAllreduce;
  lone.names = {"bias"};
  lone.shapes = {{3}};
  lone.contributors = 4;
  slow.insert(slow.begin() + 2, lone);  // responses of other tensors in between
  const std::vector<Response> units = group_unit::units_of(slow, 4);
  ASSERT_EQ(units.size(), 1u);
  const Response& u = units[0];
  EXPECT_TRUE(group_unit::is_unit(u));
  EXPECT_EQ(u.shapes[0], unit.shape);
  EXPECT_EQ(u.contributors, 4);
  EXPECT_TRUE(group_unit::in_unit(slow[0], units));
  EXPECT_FALSE(group_unit::in_unit(lone, units));
  // The unit request hits it in the cache; the same request with a member reshaped does not.
  ResponseCache cache(8);
  cache.put(u);
  uint32_t pos = 0;
  EXPECT_EQ(cache.lookup(unit, &pos), ResponseCache::Lookup::kHit);
  auto reshaped = members;
  reshaped[1] = TensorRef(nullptr, DataType::kFloat64, {1});
  EXPECT_EQ(cache.lookup(unit_request("grads", reshaped), &pos), ResponseCache::Lookup::kInvalid);
  // A unit response never fuses with anything.
  EXPECT_FALSE(can_fuse(u, lone));
  EXPECT_FALSE(can_fuse(lone, u));
  std::vector<Response> planned = plan_fusion({lone, u, lone}, FusionOptions{});
  ASSERT_EQ(planned.size(), 2u);
  EXPECT_EQ(planned[0].names, (std::vector<std::string>{"bias", "bias"}));
  EXPECT_EQ(planned[1].names, std::vector<std::string>{"grads"});
}

TEST(GroupUnit, NoUnitForAGroupThatFailedOrMissesAMemberOrARank) {
  std::vector<Request> expanded;
  group_unit::expand(unit_request("g", mixed_members()), &expanded);
  const std::vector<Response> whole = member_responses(expanded, 2);
  ASSERT_EQ(group_unit::units_of(whole, 2).size(), 1u);
  EXPECT_TRUE(group_unit::units_of(whole, 3).empty()) << "a rank did not contribute";
  auto failed = whole;
  failed[2].type = ResponseType::kError;
  failed[2].error = "allreduce of 'g.2' failed: ...";
  EXPECT_TRUE(group_unit::units_of(failed, 2).empty());
  auto missing = whole;
  missing.erase(missing.begin() + 1);
  EXPECT_TRUE(group_unit::units_of(missing, 2).empty());
  auto renamed = whole;
  renamed[3].names = {"g.03"};
  EXPECT_TRUE(group_unit::units_of(renamed, 2).empty());
  auto twice = whole;
  twice[3].names = {"g.0"};
  EXPECT_TRUE(group_unit::units_of(twice, 2).empty());
}

TensorTableEntry unit_entry(const std::string& group, const std::vector<TensorRef>& members) {
  TensorTableEntry e;
  unit_request(group, members, &e);
  return e;
}

TEST(GroupUnit, TheQueueExpandsAUnitIntoItsMembersSharingItsHandle) {
  TensorQueue queue;
  const auto members = mixed_members();
  TensorTableEntry e = unit_entry("grads", members);
  auto handle = e.handle;
  queue.add_entry(std::move(e), 0);
  EXPECT_EQ(queue.expand_unit("grads", 0), "");
  EXPECT_EQ(queue.size(), members.size());
  EXPECT_FALSE(queue.take("grads").has_value());
  for (size_t i = 0; i < members.size(); ++i) {
    auto m = queue.take("grads." + std::to_string(i));
    ASSERT_TRUE(m.has_value()) << i;
    EXPECT_EQ(m->input.shape(), members[i].shape()) << i;
    EXPECT_EQ(m->output.dtype(), members[i].dtype()) << i;
    EXPECT_EQ(m->handle, handle);
    EXPECT_FALSE(handle->done()) << "complete before member " << i;
    m->handle->complete_one();
  }
  EXPECT_TRUE(handle->done());
  EXPECT_EQ(handle->results_if_any(), nullptr);
  EXPECT_EQ(queue.expand_unit("gone", 0), "") << "an entry no longer there expands to nothing";
}

TEST(GroupUnit, AMemberNameInFlightFailsTheUnitAndLeavesThatTensorAlone) {
  TensorQueue queue;
  TensorTableEntry mine;
  mine.name = "grads.2";
  mine.handle = detail::make_handle_state(1);
  auto mine_handle = mine.handle;
  queue.add_entry(std::move(mine), 0);
  TensorTableEntry e = unit_entry("grads", mixed_members());
  auto handle = e.handle;
  queue.add_entry(std::move(e), 0);
  const std::string error = queue.expand_unit("grads", 1);
  EXPECT_EQ(error,
            "grouped_allreduce of 'grads' failed: a tensor named 'grads.2' (the name of its member "
            "2) is already in flight on rank 1. Wait for that tensor's handle first, or give the "
            "group another name.");
  EXPECT_TRUE(handle->done());
  EXPECT_EQ(handle->results().error, error);
  EXPECT_EQ(queue.size(), 1u);
  auto left = queue.take("grads.2");
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(left->handle, mine_handle);
  EXPECT_FALSE(mine_handle->done());
}

}  // namespace
}  // namespace hvd
