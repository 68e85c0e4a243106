// Lanes (runtime/lanes.h): a cached allreduce submitted into its lane, on 1-4
// in-process ranks (tests/runtime/controller_harness.h), and the tensor queue's lanes on their own.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hvd/error.h"
#include "runtime/lanes.h"
#include "tests/runtime/controller_harness.h"

namespace hvd {
namespace {

using namespace controller_test;  // NOLINT: the harness is this file's vocabulary

class LaneTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, LaneTest, ::testing::Values(1, 2, 3, 4),
                         ::testing::PrintToStringParamName());

// Lanes (runtime/lanes.h): from the second step on, a cached tensor submitted through its
// lane gives the same responses as through the queue's table, with no slow path, on every rank;
// a rank that submits some steps the ordinary way (a rank with a timeline) still fuses the same
// tensors into the same responses as the ranks using lanes.
TEST_P(LaneTest, LanesServeCachedTensorsLikeTheOrdinaryPath) {
  const int n = GetParam();
  InProcessHub hub(n);
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  const std::vector<std::vector<int64_t>> shapes = {{4}, {2, 3}, {4}, {5}};
  auto seen = run_ranks(
      n,
      [&](Rank& me) {
        const int r = me.rank();
        for (size_t i = 0; i < names.size(); ++i)
          me.submit(request(r, names[i], RequestType::kAllreduce, shapes[i]));
        me.until(names);
        me.controller().sync_lanes();  // as the runtime does after running a cycle's responses
        EXPECT_EQ(me.queue().open_lanes(), names.size());
        const int slow_paths = hub.gathers(r);
        for (int step = 0; step < 3; ++step) {
          for (size_t k = 0; k < names.size(); ++k) {
            const size_t i = r % 2 ? names.size() - 1 - k : k;
            if (step == 1 && r % 2 == 1)
              me.submit(request(r, names[i], RequestType::kAllreduce, shapes[i]));
            else
              EXPECT_NE(me.submit_lane(names[i], shapes[i]), TensorQueue::LaneResult::kNoLane)
                  << names[i];
          }
          std::vector<Seen> got = me.until(names);
          EXPECT_EQ(hub.gathers(r), slow_paths) << "step " << step << " took the slow path";
          for (size_t i = 0; i < names.size(); ++i) {
            const Seen s = me.find(got, names[i]);
            EXPECT_EQ(s.type, ResponseType::kAllreduce) << s.error;
            EXPECT_EQ(s.shape, shapes[i]) << names[i];
            EXPECT_EQ(s.contributors, n) << names[i];
          }
        }
        EXPECT_GE(me.lane_members(), static_cast<int>(names.size()) * (r % 2 ? 2 : 3));
        EXPECT_EQ(me.queue().size(), 0u);
      },
      test_options(), &hub);
  expect_same_everywhere(seen);
}

// A lane takes only its own tensor with its own parameters, and a name in flight is refused
// whichever way it was submitted. A new shape everywhere renegotiates the tensor, and its lane
// then serves the new shape.
TEST_P(LaneTest, ALaneTakesOnlyItsParametersAndOneTensorAtATime) {
  const int n = GetParam();
  auto seen = run_ranks(n, [&](Rank& me) {
    const int r = me.rank();
    using LR = TensorQueue::LaneResult;
    me.negotiate("a");
    EXPECT_EQ(me.submit_lane("a", {8}), LR::kNoLane);  // another shape: the ordinary way
    EXPECT_EQ(me.submit_lane("z"), LR::kNoLane);       // never negotiated
    EXPECT_EQ(me.submit_lane("a"), LR::kQueuedFirst);
    try {
      me.submit_lane("a");
      ADD_FAILURE() << "a second 'a' entered the lane";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("'a' is already in flight on rank " + std::to_string(r)),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(me.submit(request(r, "a")), InvalidArgumentError);
    EXPECT_EQ(me.queue().size(), 1u);
    EXPECT_EQ(me.find(me.until({"a"}), "a").shape, (std::vector<int64_t>{4}));
    // In the table, the lane refuses it too.
    me.submit(request(r, "a", RequestType::kAllreduce, {6}));
    EXPECT_THROW(me.submit_lane("a"), InvalidArgumentError);
    EXPECT_EQ(me.find(me.until({"a"}), "a").shape, (std::vector<int64_t>{6}));
    me.controller().sync_lanes();
    EXPECT_EQ(me.submit_lane("a", {4}), LR::kNoLane);  // the old shape is gone
    EXPECT_NE(me.submit_lane("a", {6}), LR::kNoLane);
    EXPECT_EQ(me.find(me.until({"a"}), "a").shape, (std::vector<int64_t>{6}));
  });
  expect_same_everywhere(seen);
}

// A lane's submission that waits too long for the other ranks goes to rank 0 like any cached
// request (the stall inspector must see it), and its entry leaves every cache: the other ranks'
// lanes close, and their later submissions of it go the ordinary way and meet it there.
TEST_P(LaneTest, ALaneSubmissionThatWaitsTooLongGoesToRankZero) {
  const int n = GetParam();
  InProcessHub hub(n);
  ControllerOptions o = test_options();
  o.fast_path_patience_seconds = 0.05;
  auto seen = run_ranks(
      n,
      [&](Rank& me) {
        const int r = me.rank();
        me.negotiate("a");
        const int slow_paths = hub.gathers(r);
        if (r == 0) {
          EXPECT_NE(me.submit_lane("a"), TensorQueue::LaneResult::kNoLane);
          if (n == 1) {
            me.until({"a"});
            return;
          }
        }
        for (int i = 0; i < 40; ++i) {
          EXPECT_TRUE(me.cycle().empty());
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        EXPECT_GT(hub.gathers(r), slow_paths) << "the late hit never went to rank 0";
        EXPECT_EQ(me.queue().open_lanes(), 0u) << "the invalidated entry's lane is still open";
        if (r != 0) {
          EXPECT_EQ(me.submit_lane("a"), TensorQueue::LaneResult::kNoLane);
          me.submit(request(r, "a"));
        }
        const Seen a = me.find(me.until({"a"}), "a");
        EXPECT_EQ(a.type, ResponseType::kAllreduce) << a.error;
        EXPECT_EQ(a.contributors, n);
      },
      o, &hub);
  expect_same_everywhere(seen);
}

// Lane submissions while another rank joins go the slow way, where rank 0 counts the contributors.
TEST_P(LaneTest, LaneSubmissionsBesideAJoinedRankGoTheSlowWay) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "a join needs another rank";
  auto seen = run_ranks(n, [&](Rank& me) {
    const int r = me.rank();
    me.negotiate("x");
    if (r == n - 1)
      me.submit(join_request(r));
    else
      EXPECT_NE(me.submit_lane("x"), TensorQueue::LaneResult::kNoLane);
    EXPECT_EQ(me.find(me.until({"x"}), "x").contributors, n - 1);
    if (r != n - 1) me.submit(join_request(r));
    EXPECT_EQ(me.find(me.until({"__hvd.join"}), "__hvd.join").type, ResponseType::kJoin);
  });
  expect_same_everywhere(seen);
}

// An entry evicted from a full cache closes its lane, also while a lane's submission waits in it
// for the other ranks (it then goes to rank 0): one cache place, "a" waiting in its lane on rank
// 0, and "d" negotiated everywhere takes a's place. With one rank, "a" has already run from its
// lane in the same cycle as d's slow path: it must run once, not again.
TEST_P(LaneTest, AnEvictionClosesTheLaneAndSendsItsWaitingSubmissionToRankZero) {
  const int n = GetParam();
  ControllerOptions o = test_options();
  o.cache_capacity = 1;
  auto seen = run_ranks(
      n,
      [&](Rank& me) {
        const int r = me.rank();
        me.negotiate("a");
        if (r == 0) {
          EXPECT_NE(me.submit_lane("a"), TensorQueue::LaneResult::kNoLane);
        }
        me.submit(request(r, "d"));
        std::vector<Seen> got = me.until({"d"});
        me.controller().sync_lanes();
        if (n == 1) {
          EXPECT_EQ(me.find(got, "a").contributors, 1);
        } else {
          EXPECT_EQ(me.queue().size(), r == 0 ? 1u : 0u);  // rank 0's "a", now in the table
          if (r != 0) {
            EXPECT_EQ(me.submit_lane("a"), TensorQueue::LaneResult::kNoLane);
            me.submit(request(r, "a"));
          }
          got = me.until({"a"});
          EXPECT_EQ(me.find(got, "a").contributors, n);
        }
        // Every "a" ran once: the first step, then this one.
        int runs = 0;
        for (const auto& s : me.seen()) runs += s.name == "a" ? 1 : 0;
        EXPECT_EQ(runs, 2);
        EXPECT_EQ(me.queue().size(), 0u);
      },
      o);
  expect_same_everywhere(seen);
}

// Closing the queue fails a submission waiting in a lane, and later ones are refused.
TEST(TensorQueueLanes, CloseFailsTheLanesSubmissions) {
  TensorQueue queue;
  Response cached;
  cached.names = {"w"};
  cached.shapes = {{3}};
  std::vector<std::pair<uint32_t, Request>> popped;
  queue.sync_lanes({{5, &cached}}, 0, &popped);
  EXPECT_TRUE(popped.empty());
  EXPECT_EQ(queue.open_lanes(), 1u);
  EXPECT_EQ(queue.lane_name(5), "w");
  TensorRef in(nullptr, DataType::kFloat32, {3}), out = in;
  auto h = detail::make_handle_state(1);
  EXPECT_EQ(queue.try_lane("w", in, out, ReduceOp::kSum, 1.0, 1.0, false, h, 0),
            TensorQueue::LaneResult::kQueuedFirst);
  EXPECT_TRUE(queue.waiting().any);
  queue.close(detail::ErrorKind::kInvalidArgument, "closed for the test");
  EXPECT_TRUE(h->done());
  EXPECT_NE(h->results().error.find("allreduce of 'w' did not complete: closed for the test"),
            std::string::npos)
      << h->results().error;
  // No lane is left: the caller goes the ordinary way, which refuses it with the closing error.
  TensorRef in2(nullptr, DataType::kFloat32, {3}), out2 = in2;
  EXPECT_EQ(queue.try_lane("w", in2, out2, ReduceOp::kSum, 1.0, 1.0, false,
                           detail::make_handle_state(1), 0),
            TensorQueue::LaneResult::kNoLane);
  TensorTableEntry e;
  e.name = "w";
  e.handle = detail::make_handle_state(1);
  EXPECT_THROW(queue.add_one(std::move(e), request(0, "w")), InvalidArgumentError);
  EXPECT_EQ(queue.open_lanes(), 0u);
  EXPECT_EQ(queue.size(), 0u);
}

// A lane whose position the cache gives to another tensor hands a submission that had not been
// popped back as an ordinary request (it then misses the cache), and one that had, to the caller.
TEST(TensorQueueLanes, AClosedLaneHandsItsSubmissionBack) {
  TensorQueue queue;
  Response a, b;
  a.names = {"a"};
  a.shapes = {{2}};
  b.names = {"b"};
  b.shapes = {{2}};
  std::vector<std::pair<uint32_t, Request>> popped;
  queue.sync_lanes({{0, &a}}, 0, &popped);
  TensorRef in(nullptr, DataType::kFloat32, {2}), out = in;
  EXPECT_NE(queue.try_lane("a", in, out, ReduceOp::kSum, 1.0, 1.0, false,
                           detail::make_handle_state(1), 3),
            TensorQueue::LaneResult::kNoLane);
  queue.sync_lanes({{0, &b}}, 3, &popped);  // before a pop
  EXPECT_TRUE(popped.empty());
  EXPECT_EQ(queue.lane_name(0), "b");
  std::vector<Request> requests;
  std::vector<uint32_t> lanes;
  queue.pop_requests(&requests, &lanes);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(lanes.empty());
  EXPECT_EQ(requests[0].name, "a");
  EXPECT_EQ(requests[0].rank, 3);
  EXPECT_EQ(requests[0].shape, (std::vector<int64_t>{2}));
  EXPECT_TRUE(queue.take("a").has_value());  // its entry is in the table
  // Popped, then the lane closes: the request comes back with its position.
  TensorRef in2(nullptr, DataType::kFloat32, {2}), out2 = in2;
  EXPECT_NE(queue.try_lane("b", in2, out2, ReduceOp::kSum, 1.0, 1.0, false,
                           detail::make_handle_state(1), 3),
            TensorQueue::LaneResult::kNoLane);
  requests.clear();
  queue.pop_requests(&requests, &lanes);
  EXPECT_EQ(lanes, (std::vector<uint32_t>{0}));
  queue.sync_lanes({{0, nullptr}}, 3, &popped);
  ASSERT_EQ(popped.size(), 1u);
  EXPECT_EQ(popped[0].first, 0u);
  EXPECT_EQ(popped[0].second.name, "b");
  EXPECT_EQ(queue.open_lanes(), 0u);
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_TRUE(queue.take("b").has_value());
}

// try_lane first tries the lane submitted after the previous one last time (Lane::next), without
// hashing the name. Whatever the order of the submissions, and whatever became of the guessed lane
// (reopened for another name, other parameters, busy), each submission lands in its own lane, or
// finds none, exactly as a lookup by name would.
TEST(TensorQueueLanes, SubmissionsInAnyOrderFindTheirOwnLanes) {
  TensorQueue queue;
  const std::vector<std::string> names = {"a", "b", "c", "d", "e"};
  const std::vector<uint32_t> positions = {7, 2, 9, 0, 4};
  std::vector<Response> cached(names.size());
  std::vector<std::pair<uint32_t, const Response*>> wanted;
  for (size_t i = 0; i < names.size(); ++i) {
    cached[i].names = {names[i]};
    cached[i].shapes = {{static_cast<int64_t>(i + 1)}};
    wanted.emplace_back(positions[i], &cached[i]);
  }
  std::vector<std::pair<uint32_t, Request>> popped;
  queue.sync_lanes(wanted, 0, &popped);
  ASSERT_EQ(queue.open_lanes(), names.size());
  std::vector<float> data(names.size());
  // Submits names[i] for each i in `order`, then pops and takes them: each must come out of its
  // own lane, with its own tensor.
  auto step = [&](const std::vector<size_t>& order) {
    for (size_t i : order) {
      TensorRef in(&data[i], DataType::kFloat32, {static_cast<int64_t>(i + 1)}), out = in;
      ASSERT_NE(queue.try_lane(names[i], in, out, ReduceOp::kSum, 1.0, 1.0, false,
                               detail::make_handle_state(1), 0),
                TensorQueue::LaneResult::kNoLane)
          << names[i];
    }
    std::vector<Request> requests;
    std::vector<uint32_t> lanes;
    queue.pop_requests(&requests, &lanes);
    EXPECT_TRUE(requests.empty());
    ASSERT_EQ(lanes.size(), order.size());
    Response fused;  // the fast path's: no names of its own, one lane position per member
    fused.names.resize(order.size());
    fused.lanes = lanes;
    for (size_t k = 0; k < order.size(); ++k) {
      EXPECT_EQ(lanes[k], positions[order[k]]);
      EXPECT_EQ(queue.member_name(fused, k), names[order[k]]);
    }
    queue.take_all(fused, [&](size_t k, TensorTableEntry* e) {
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->input.data(), &data[order[k]]) << names[order[k]];
    });
    EXPECT_EQ(queue.size(), 0u);
  };
  step({0, 1, 2, 3, 4});
  step({0, 1, 2, 3, 4});  // every guess right
  step({4, 3, 2, 1, 0});  // every guess wrong
  step({2, 0, 4, 1, 3});
  step({0, 1, 2, 3, 4});
  step({0, 1, 2, 3, 4});

  // The lane after "a" is "b"'s (position 2), which now serves another tensor: "b" finds no lane,
  // the new name finds its own.
  Response b2;
  b2.names = {"b2"};
  b2.shapes = {{2}};
  queue.sync_lanes({{2, &b2}}, 0, &popped);
  EXPECT_TRUE(popped.empty());
  auto submit = [&](const std::string& name, int64_t n) {
    TensorRef in(&data[0], DataType::kFloat32, {n}), out = in;
    return queue.try_lane(name, in, out, ReduceOp::kSum, 1.0, 1.0, false,
                          detail::make_handle_state(1), 0);
  };
  EXPECT_NE(submit("a", 1), TensorQueue::LaneResult::kNoLane);
  EXPECT_EQ(submit("b", 2), TensorQueue::LaneResult::kNoLane);
  EXPECT_NE(submit("b2", 2), TensorQueue::LaneResult::kNoLane);
  // The guess after "b2" is "c" (learnt above): other parameters find no lane, and a name whose
  // lane is busy is refused as in flight, guessed or not.
  EXPECT_EQ(submit("c", 7), TensorQueue::LaneResult::kNoLane);
  EXPECT_THROW(submit("a", 1), InvalidArgumentError);
  EXPECT_NE(submit("c", 3), TensorQueue::LaneResult::kNoLane);
  EXPECT_THROW(submit("c", 3), InvalidArgumentError);
  std::vector<Request> requests;
  std::vector<uint32_t> lanes;
  queue.pop_requests(&requests, &lanes);
  EXPECT_EQ(lanes, (std::vector<uint32_t>{7, 2, 9}));
}

// The Lanes type on its own (runtime/lanes.h): a lane's states, open -> submitted -> popped ->
// taken, and a submission handed back as an entry and a request wherever it leaves the lane
// another way (at each state its own answer), with the busy count following.
TEST(Lanes, ALaneGoesThroughItsStatesAndHandsItsSubmissionBack) {
  Lanes lanes;
  EXPECT_TRUE(lanes.none_open());
  Response cached;
  cached.names = {"g"};
  cached.shapes = {{4}};
  cached.prescale = 0.5;
  lanes.open(7, cached, 2);
  EXPECT_EQ(lanes.open_count(), 1u);
  EXPECT_EQ(lanes.name(7), "g");
  EXPECT_TRUE(lanes.serves(7, cached));
  EXPECT_THROW(lanes.open(3, cached, 2), InternalError);  // a name is open once
  uint64_t h = 0;
  EXPECT_EQ(lanes.find("g", &h), 7);
  EXPECT_EQ(h, NameIndex::hash("g"));
  EXPECT_EQ(lanes.find("h", &h), -1);
  float data[4] = {};
  TensorRef in(data, DataType::kFloat32, {4}), out = in;
  EXPECT_FALSE(lanes.takes(7, in, ReduceOp::kSum, 1.0, 1.0, false));  // another prescale
  EXPECT_FALSE(lanes.takes(7, TensorRef(data, DataType::kFloat32, {2}), ReduceOp::kSum, 0.5, 1.0,
                           false));  // another shape
  ASSERT_TRUE(lanes.takes(7, in, ReduceOp::kSum, 0.5, 1.0, false));

  // submitted -> popped -> taken
  const auto since = std::chrono::steady_clock::now();
  auto handle = detail::make_handle_state(1);
  lanes.submit(7, "g", in, out, handle, since);
  EXPECT_TRUE(lanes.busy(7));
  EXPECT_TRUE(lanes.in_flight("g", NameIndex::hash("g")));
  EXPECT_TRUE(lanes.any_submitted());
  EXPECT_EQ(lanes.take(7), nullptr) << "taken before it was popped";
  std::vector<uint32_t> popped;
  lanes.pop(&popped);
  EXPECT_EQ(popped, std::vector<uint32_t>{7});
  EXPECT_FALSE(lanes.any_submitted());
  TensorTableEntry* e = lanes.take(7);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->input.data(), data);
  EXPECT_EQ(e->handle, handle);
  EXPECT_FALSE(lanes.busy(7));
  EXPECT_EQ(lanes.busy_count(), 0u);

  // popped -> handed back (the lane stays open), with the lane's name, parameters and burst time
  TensorRef in2(data, DataType::kFloat32, {4}), out2 = in2;
  lanes.submit(7, "g", in2, out2, handle, since);
  EXPECT_FALSE(lanes.hand_back(7, 2)) << "handed back before it was popped";
  lanes.pop(&popped);
  std::optional<Lanes::Submission> s = lanes.hand_back(7, 2);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->popped);
  EXPECT_EQ(s->entry.name, "g");
  EXPECT_EQ(s->request.name, "g");
  EXPECT_EQ(s->request.rank, 2);
  EXPECT_EQ(s->request.prescale, 0.5);
  EXPECT_EQ(s->request.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(s->request.submitted, since);
  EXPECT_EQ(s->request.name_hash, NameIndex::hash("g"));
  EXPECT_EQ(lanes.open_count(), 1u);
  EXPECT_EQ(lanes.busy_count(), 0u);

  // submitted (not popped) -> closed: handed back as not popped, and no longer listed for the pop
  TensorRef in3(data, DataType::kFloat32, {4}), out3 = in3;
  lanes.submit(7, "g", in3, out3, handle, since);
  s = lanes.close(7, 2);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->popped);
  EXPECT_FALSE(lanes.any_submitted());
  EXPECT_TRUE(lanes.none_open());
  EXPECT_EQ(lanes.name(7), "");
  EXPECT_FALSE(lanes.close(7, 2)) << "closed twice";

  // close_all names what was busy
  lanes.open(1, cached, 2);
  TensorRef in4(data, DataType::kFloat32, {4}), out4 = in4;
  lanes.submit(1, "g", in4, out4, handle, since);
  std::vector<TensorTableEntry> left;
  lanes.close_all(&left);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "g");
  EXPECT_TRUE(lanes.none_open());
  EXPECT_EQ(lanes.busy_count(), 0u);
}

}  // namespace
}  // namespace hvd
