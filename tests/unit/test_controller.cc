// The controller's negotiation protocol over an in-process channel: 1-4 ranks as threads of this
// process (tests/unit/in_process_channel.h), no MPI. Every rank runs its own Controller and checks
// its own results; the main thread then checks that every rank saw the same response list.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/error.h"
#include "runtime/controller.h"
#include "runtime/group_unit.h"
#include "runtime/response_cache.h"
#include "tests/unit/in_process_channel.h"

namespace hvd {
namespace {

using testing::InProcessHub;
using Clock = std::chrono::steady_clock;

// One tensor of a (possibly fused) response, as a rank executed it.
struct Seen {
  ResponseType type;
  std::string name;
  std::vector<int64_t> shape;
  int contributors;
  std::string error;
  int last_joined_rank;
  std::vector<int64_t> first_dims;
  size_t fused_with;  // tensors in the response it came in
  bool operator==(const Seen&) const = default;
};

std::string describe(const std::vector<Seen>& seen) {
  std::string out;
  for (const auto& s : seen)
    out += std::string(response_type_name(s.type)) + " " + s.name + " (" +
           std::to_string(s.contributors) + ")" + (s.error.empty() ? "" : ": " + s.error) + "\n";
  return out;
}

Request request(int rank, const std::string& name, RequestType type = RequestType::kAllreduce,
                std::vector<int64_t> shape = {4}, DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.type = type;
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = dtype;
  if (type == RequestType::kBroadcast) r.root = 0;
  return r;
}

Request join_request(int rank) { return request(rank, "__hvd.join", RequestType::kJoin, {}); }

// One rank: its queue and controller, and the helpers a test body uses.
class Rank {
 public:
  Rank(InProcessHub& hub, int rank, const ControllerOptions& options)
      : rank_(rank), size_(hub.size()), controller_(hub.channel(rank), options, queue_) {}

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Submits requests atomically (as one group would be).
  void submit(std::vector<Request> requests) {
    std::vector<TensorTableEntry> entries;
    for (const auto& r : requests) {
      TensorTableEntry e;
      e.name = r.name;
      e.type = r.type;
      entries.push_back(std::move(e));
    }
    queue_.add(std::move(entries), std::move(requests));
  }
  void submit(Request r) { submit(std::vector<Request>{std::move(r)}); }
  // A group as grouped_allreduce_async() queues it (runtime/group_unit.h): one unit request and
  // one entry holding the members (no data: the controller never touches it).
  void submit_unit(const std::string& group, const std::vector<TensorRef>& members) {
    Request q;
    TensorTableEntry e;
    group_unit::make(rank_, group, ReduceOp::kSum, members, members, detail::make_handle_state(1),
                     &q, &e);
    queue_.add_one(std::move(e), std::move(q));
  }

  // allreduce_async's lane path (runtime/tensor_queue.h, "Lanes"): a float32 sum of this shape,
  // with a handle the test may keep (*handle). Returns what the queue said.
  TensorQueue::LaneResult submit_lane(const std::string& name, std::vector<int64_t> shape = {4},
                                      std::shared_ptr<detail::HandleState>* handle = nullptr) {
    TensorRef in(nullptr, DataType::kFloat32, shape), out(nullptr, DataType::kFloat32, shape);
    auto state = detail::make_handle_state(1);
    if (handle) *handle = state;
    return queue_.try_lane(name, in, out, ReduceOp::kSum, 1.0, 1.0, state, rank_);
  }
  TensorQueue& queue() { return queue_; }
  // A first step of `name` (4 floats), through rank 0, after which its lane is open (the runtime
  // syncs the lanes after running a cycle's responses).
  void negotiate(const std::string& name) {
    submit(request(rank_, name));
    until({name});
    controller_.sync_lanes();
  }
  int lane_members() const { return lane_members_; }

  // One cycle; the tensors of its responses leave the queue (as the runtime's perform() takes
  // them). Returns them.
  std::vector<Seen> cycle(bool shutdown_requested = false, bool* shutdown = nullptr) {
    bool any_shutdown = false;
    std::vector<Response> responses = controller_.cycle(shutdown_requested, &any_shutdown);
    if (shutdown) *shutdown = any_shutdown;
    std::vector<Seen> out;
    for (const auto& fused : responses) {
      if (!fused.lanes.empty()) {
        // Members in lanes have neither name nor shape: the lane and its tensors have them.
        std::vector<std::optional<TensorTableEntry>> taken;
        queue_.take_all(fused.names, fused.lanes, &taken);
        for (size_t i = 0; i < fused.names.size(); ++i) {
          const bool lane = fused.lanes[i] != kNoLane;
          if (lane && !taken[i])
            throw std::runtime_error("rank " + std::to_string(rank_) + ": lane " +
                                     std::to_string(fused.lanes[i]) + " held no tensor");
          lane_members_ += lane ? 1 : 0;
          out.push_back({fused.type,
                         lane ? queue_.lane_name(fused.lanes[i]) : fused.names[i],
                         lane ? taken[i]->input.shape() : fused.shapes[i],
                         fused.contributors,
                         fused.error,
                         fused.last_joined_rank,
                         {},
                         fused.names.size()});
          if (taken[i] && taken[i]->handle) taken[i]->handle->complete_one();
        }
        continue;
      }
      for (const auto& r : split_response(fused)) {
        out.push_back({r.type, r.names[0], r.shapes[0], r.contributors, r.error, r.last_joined_rank,
                       r.first_dims, fused.names.size()});
        queue_.take(r.names[0]);
      }
    }
    seen_.insert(seen_.end(), out.begin(), out.end());
    return out;
  }

  // Cycles until every one of `names` has had its response (every rank sees them in the same
  // cycle, so every rank runs as many cycles); returns the responses of those cycles.
  std::vector<Seen> until(const std::vector<std::string>& names) {
    std::vector<Seen> out;
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    auto done = [&] {
      for (const auto& n : names) {
        bool found = false;
        for (const auto& s : out) found = found || s.name == n;
        if (!found) return false;
      }
      return true;
    };
    while (!done()) {
      if (Clock::now() > give_up)
        throw std::runtime_error("rank " + std::to_string(rank_) + ": no response for " +
                                 names.front() + " after 20 s; had:\n" + describe(out));
      std::vector<Seen> got = cycle();
      out.insert(out.end(), got.begin(), got.end());
    }
    return out;
  }

  Seen find(const std::vector<Seen>& seen, const std::string& name) const {
    for (const auto& s : seen)
      if (s.name == name) return s;
    throw std::runtime_error("rank " + std::to_string(rank_) + ": no response for " + name);
  }

  const std::vector<Seen>& seen() const { return seen_; }
  Controller& controller() { return controller_; }

 private:
  int rank_, size_;
  TensorQueue queue_;
  Controller controller_;
  std::vector<Seen> seen_;
  int lane_members_ = 0;
};

ControllerOptions test_options() {
  ControllerOptions o;
  o.peer_timeout_seconds = 10;  // a rank that fails its test stops; the others fail, not hang
  o.coordinator_grace_seconds = 0.2;
  return o;
}

// Runs `body` on `n` ranks (threads), each with its own controller on one hub. A rank whose body
// throws fails the test with its message. Returns every rank's responses, by rank.
std::vector<std::vector<Seen>> run_ranks(int n, const std::function<void(Rank&)>& body,
                                         ControllerOptions options = test_options(),
                                         InProcessHub* shared_hub = nullptr) {
  InProcessHub own_hub(n);
  InProcessHub& hub = shared_hub ? *shared_hub : own_hub;
  std::vector<std::vector<Seen>> seen(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        Rank rank(hub, r, options);
        body(rank);
        seen[r] = rank.seen();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " of " << n << ": " << e.what();
        hub.drop(r);  // the others see silence instead of waiting for this rank
      }
    });
  for (auto& t : threads) t.join();
  return seen;
}

void expect_same_everywhere(const std::vector<std::vector<Seen>>& seen) {
  for (size_t r = 1; r < seen.size(); ++r)
    EXPECT_EQ(seen[r], seen[0]) << "rank " << r << ":\n"
                                << describe(seen[r]) << "rank 0:\n"
                                << describe(seen[0]);
}

class ControllerTest : public ::testing::TestWithParam<int> {};
class ControllerMismatchTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, ControllerTest, ::testing::Values(1, 2, 3, 4),
                         ::testing::PrintToStringParamName());
INSTANTIATE_TEST_SUITE_P(Ranks, ControllerMismatchTest, ::testing::Values(2, 3, 4),
                         ::testing::PrintToStringParamName());

TEST_P(ControllerTest, MatchingRequestsGiveTheSameResponsesOnEveryRank) {
  const int n = GetParam();
  auto seen = run_ranks(n, [](Rank& me) {
    const int r = me.rank();
    // Different submission orders on different ranks; allgather rows differ per rank.
    if (r % 2) {
      me.submit(request(r, "b"));
      me.submit(request(r, "a"));
    } else {
      me.submit(request(r, "a"));
      me.submit(request(r, "b"));
    }
    me.submit(request(r, "c", RequestType::kAllgather, {r + 1, 3}));
    me.submit(request(r, "d", RequestType::kBroadcast, {2, 2}));
    me.submit(request(r, "__hvd.barrier", RequestType::kBarrier, {}));
    std::vector<Seen> got = me.until({"a", "b", "c", "d", "__hvd.barrier"});
    for (const auto& s : got) {
      EXPECT_TRUE(s.error.empty()) << s.error;
      EXPECT_EQ(s.contributors, me.size()) << s.name;
    }
    EXPECT_EQ(me.find(got, "a").type, ResponseType::kAllreduce);
    EXPECT_EQ(me.find(got, "a").shape, (std::vector<int64_t>{4}));
    const Seen& c = me.find(got, "c");
    EXPECT_EQ(c.type, ResponseType::kAllgather);
    ASSERT_EQ(static_cast<int>(c.first_dims.size()), me.size());
    for (int q = 0; q < me.size(); ++q) EXPECT_EQ(c.first_dims[q], q + 1);
    EXPECT_EQ(me.find(got, "d").type, ResponseType::kBroadcast);
    EXPECT_EQ(me.find(got, "__hvd.barrier").type, ResponseType::kBarrier);
  });
  expect_same_everywhere(seen);
}

void expect_mismatch(int n, const std::function<Request(int rank)>& make,
                     const std::string& expected) {
  auto seen = run_ranks(n, [&](Rank& me) {
    me.submit(make(me.rank()));
    std::vector<Seen> got = me.until({"t"});
    const Seen& t = me.find(got, "t");
    EXPECT_EQ(t.type, ResponseType::kError);
    EXPECT_NE(t.error.find(expected), std::string::npos) << t.error;
  });
  expect_same_everywhere(seen);
}

TEST_P(ControllerMismatchTest, DtypeMismatchIsOneErrorEverywhere) {
  expect_mismatch(
      GetParam(),
      [](int r) {
        return request(r, "t", RequestType::kAllreduce, {4},
                       r == 1 ? DataType::kFloat64 : DataType::kFloat32);
      },
      "rank 1 sent dtype float64");
}

TEST_P(ControllerMismatchTest, ShapeMismatchIsOneErrorEverywhere) {
  expect_mismatch(
      GetParam(), [](int r) { return request(r, "t", RequestType::kAllreduce, {r == 1 ? 5 : 4}); },
      "rank 1 sent shape");
}

TEST_P(ControllerMismatchTest, ReduceOpMismatchIsOneErrorEverywhere) {
  expect_mismatch(
      GetParam(),
      [](int r) {
        Request q = request(r, "t");
        if (r == 1) q.reduce_op = ReduceOp::kMax;
        return q;
      },
      "rank 1 asked for reduce op");
}

TEST_P(ControllerMismatchTest, CollectiveMismatchIsOneErrorEverywhere) {
  expect_mismatch(
      GetParam(),
      [](int r) {
        return request(r, "t", r == 1 ? RequestType::kBroadcast : RequestType::kAllreduce);
      },
      "rank 1 called broadcast");
}

TEST_P(ControllerTest, GroupIsReleasedOnlyWhenWholeGroupIsReady) {
  const int n = GetParam();
  auto member = [](int r, int i) {
    Request q = request(r, "g." + std::to_string(i));
    q.group = "g";
    q.group_size = 3;
    return q;
  };
  auto seen = run_ranks(n, [&](Rank& me) {
    const int r = me.rank();
    const int late = me.size() - 1;  // this rank submits the last member later
    if (r == late) {
      me.submit(std::vector<Request>{member(r, 0), member(r, 1)});
    } else {
      me.submit(std::vector<Request>{member(r, 0), member(r, 1), member(r, 2)});
    }
    // Several cycles, the same number on every rank: nothing of the group may be released.
    for (int i = 0; i < 20; ++i) {
      std::vector<Seen> got = me.cycle();
      EXPECT_TRUE(got.empty()) << describe(got);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (r == late) me.submit(member(r, 2));
    std::vector<Seen> got = me.until({"g.0", "g.1", "g.2"});
    ASSERT_EQ(got.size(), 3u) << describe(got);  // all in one cycle
    for (const auto& s : got) {
      EXPECT_EQ(s.type, ResponseType::kAllreduce);
      EXPECT_EQ(s.fused_with, 3u);  // fused as one unit
      EXPECT_EQ(s.contributors, me.size());
    }
  });
  expect_same_everywhere(seen);
}

// A group served from the cache (the steady state of a trainer's grouped gradients) comes out as
// the slow path gave it: the whole group in one response, beside ungrouped tensors and another
// group, the same on every rank; a member of another dtype still runs apart from the others.
TEST_P(ControllerTest, CachedGroupsComeOutWholeAsTheyDidTheFirstTime) {
  // A group unit's first step goes to rank 0 as its members; from then on the unit is one cache
  // hit and one response, with no slow path, on every rank. A reshaped member sends the group
  // the slow way again (as members, with the new shape), after which the new unit hits.
  const int n = GetParam();
  InProcessHub hub(n);
  auto members = [](int size, DataType odd_dtype = DataType::kFloat32, int odd = -1,
                    int64_t odd_rows = 0) {
    std::vector<TensorRef> m;
    for (int i = 0; i < size; ++i)
      m.emplace_back(nullptr, i == odd ? odd_dtype : DataType::kFloat32,
                     std::vector<int64_t>{i == odd && odd_rows > 0 ? odd_rows : i + 1});
    return m;
  };
  auto member_names = [](const std::string& g, int size) {
    std::vector<std::string> out;
    for (int i = 0; i < size; ++i) out.push_back(g + "." + std::to_string(i));
    return out;
  };
  std::vector<std::string> first_names = {"a", "b"};
  for (const auto& m : member_names("g", 40)) first_names.push_back(m);
  for (const auto& m : member_names("h", 5)) first_names.push_back(m);
  const std::vector<std::string> unit_names = {"a", "b", "g", "h"};
  auto seen = run_ranks(
      n,
      [&](Rank& me) {
        const int r = me.rank();
        auto round = [&](const std::vector<std::string>& expect, int64_t h_rows) {
          me.submit(request(r, "a"));
          me.submit_unit("g", members(40));
          me.submit_unit("h", members(5, DataType::kFloat64, 2, h_rows));
          me.submit(request(r, "b"));
          return me.until(expect);
        };
        std::vector<Seen> first = round(first_names, 0);
        for (int i = 0; i < 40; ++i)
          EXPECT_EQ(me.find(first, "g." + std::to_string(i)).shape, std::vector<int64_t>{i + 1});
        EXPECT_EQ(me.find(first, "h.2").fused_with, 1u);  // the float64 member apart
        int slow_paths = hub.gathers(r);
        std::vector<int64_t> g_signature, h_signature;
        group_unit::signature(members(40), &g_signature);
        group_unit::signature(members(5, DataType::kFloat64, 2), &h_signature);
        for (int k = 0; k < 3; ++k) {
          std::vector<Seen> again = round(unit_names, 0);
          EXPECT_EQ(hub.gathers(r), slow_paths) << "round " << k << " took the slow path";
          for (const auto& name : unit_names) {
            const Seen s = me.find(again, name);
            EXPECT_EQ(s.type, ResponseType::kAllreduce) << name << ": " << s.error;
            EXPECT_EQ(s.contributors, me.size()) << name;
          }
          EXPECT_EQ(me.find(again, "g").shape, g_signature);
          EXPECT_EQ(me.find(again, "h").shape, h_signature);
          EXPECT_EQ(me.find(again, "g").fused_with, 1u);  // a unit stands alone
          EXPECT_EQ(me.find(again, "h").fused_with, 1u);
          for (const auto& s : again) EXPECT_NE(s.name.rfind("g.", 0), 0u) << s.name;
        }
        // h.2 reshaped: h goes to rank 0 as members again, then its new unit hits.
        std::vector<std::string> reshaped = {"a", "b", "g"};
        for (const auto& m : member_names("h", 5)) reshaped.push_back(m);
        std::vector<Seen> re = round(reshaped, 9);
        EXPECT_GT(hub.gathers(r), slow_paths);
        EXPECT_EQ(me.find(re, "h.2").shape, std::vector<int64_t>{9});
        slow_paths = hub.gathers(r);
        std::vector<Seen> after = round(unit_names, 9);
        EXPECT_EQ(hub.gathers(r), slow_paths) << "the reshaped group's unit missed";
        group_unit::signature(members(5, DataType::kFloat64, 2, 9), &h_signature);
        EXPECT_EQ(me.find(after, "h").shape, h_signature);
      },
      test_options(), &hub);
  expect_same_everywhere(seen);
}

// TensorQueue::add of a group whose member clashes with a name in flight (or appears twice in the
// group) refuses the whole group and leaves the queue as it was: the members placed before the
// clash are taken out again, so the group can be submitted once the name is free.
TEST(TensorQueueAdd, AClashLeavesNothingOfTheGroupBehind) {
  TensorQueue queue;
  auto entries = [](const std::vector<std::string>& names) {
    std::vector<TensorTableEntry> out;
    for (const auto& n : names) {
      TensorTableEntry e;
      e.name = n;
      out.push_back(std::move(e));
    }
    return out;
  };
  auto requests = [](const std::vector<std::string>& names) {
    std::vector<Request> out;
    for (const auto& n : names) out.push_back(request(0, n));
    return out;
  };
  const std::vector<std::string> group = {"g.0", "g.1", "g.2", "g.3"};
  queue.add(entries({"g.2"}), requests({"g.2"}));
  try {
    queue.add(entries(group), requests(group));
    ADD_FAILURE() << "a member already in flight was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'g.2' is already in flight"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_FALSE(queue.take("g.0").has_value());
  EXPECT_FALSE(queue.take("g.1").has_value());
  const std::vector<std::string> twice = {"t.0", "t.1", "t.0"};
  EXPECT_THROW(queue.add(entries(twice), requests(twice)), InvalidArgumentError);
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_TRUE(queue.take("g.2").has_value());
  queue.add(entries(group), requests(group));  // now free: accepted whole
  EXPECT_EQ(queue.size(), 4u);
  std::vector<Request> popped;
  std::vector<uint32_t> lanes;
  queue.pop_requests(&popped, &lanes);
  EXPECT_EQ(popped.size(), 5u);  // "g.2" of the first add and the group; none of the refused
}

TEST_P(ControllerTest, JoinCountsContributorsAndNamesTheLastRank) {
  const int n = GetParam();
  auto seen = run_ranks(n, [](Rank& me) {
    const int r = me.rank(), n = me.size();
    if (n > 1) {
      // The last rank joins at once; the others allreduce "x" without it.
      me.submit(r == n - 1 ? join_request(r) : request(r, "x"));
      EXPECT_EQ(me.find(me.until({"x"}), "x").contributors, n - 1);
      // Then every rank but 0 joins; rank 0's "y" runs alone once they have.
      if (r == 0)
        me.submit(request(r, "y"));
      else if (r != n - 1)
        me.submit(join_request(r));
      EXPECT_EQ(me.find(me.until({"y"}), "y").contributors, 1);
    }
    if (r == 0) me.submit(join_request(r));
    const Seen& j = me.find(me.until({"__hvd.join"}), "__hvd.join");
    EXPECT_EQ(j.type, ResponseType::kJoin);
    EXPECT_EQ(j.last_joined_rank, 0);
    // After the join, every rank contributes again.
    me.submit(request(r, "z"));
    EXPECT_EQ(me.find(me.until({"z"}), "z").contributors, n);
  });
  expect_same_everywhere(seen);
}

TEST_P(ControllerTest, CacheServesRepeatsEverywhereAndChangedParametersEvict) {
  const int n = GetParam();
  InProcessHub hub(n);
  const std::vector<std::string> names = {"a", "b", "c"};
  auto seen = run_ranks(
      n,
      [&](Rank& me) {
        const int r = me.rank();
        for (const auto& name : names) me.submit(request(r, name));
        me.until(names);
        const int slow_paths = hub.gathers(r);
        // Again, in another order on odd ranks: served from the cache (no gather), in the cache's
        // order, on every rank.
        for (int i = 0; i < 3; ++i) me.submit(request(r, names[r % 2 ? 2 - i : i]));
        std::vector<Seen> again = me.until(names);
        EXPECT_EQ(hub.gathers(r), slow_paths) << "the repeat took the slow path";
        for (const auto& s : again) EXPECT_EQ(s.contributors, me.size());
        // "b" with another shape on rank 0 only: an error everywhere (with more than one rank),
        // and "b" leaves every cache.
        me.submit(request(r, "b", RequestType::kAllreduce, {r == 0 ? 8 : 4}));
        const Seen& b = me.find(me.until({"b"}), "b");
        EXPECT_EQ(b.type, me.size() > 1 ? ResponseType::kError : ResponseType::kAllreduce)
            << b.error;
        // The original "b" again: not in any cache, so the slow path.
        const int before = hub.gathers(r);
        me.submit(request(r, "b"));
        const Seen& b2 = me.find(me.until({"b"}), "b");
        EXPECT_EQ(b2.type, ResponseType::kAllreduce) << b2.error;
        EXPECT_GT(hub.gathers(r), before) << "an evicted entry was served from the cache";
        // A changed shape everywhere: evicted and renegotiated, with the new shape.
        me.submit(request(r, "a", RequestType::kAllreduce, {6}));
        const Seen& a = me.find(me.until({"a"}), "a");
        EXPECT_EQ(a.type, ResponseType::kAllreduce) << a.error;
        EXPECT_EQ(a.shape, (std::vector<int64_t>{6}));
        // And that one is cached in turn.
        const int after = hub.gathers(r);
        me.submit(request(r, "a", RequestType::kAllreduce, {6}));
        me.until({"a"});
        EXPECT_EQ(hub.gathers(r), after);
      },
      test_options(), &hub);
  expect_same_everywhere(seen);
}

// Lanes (runtime/tensor_queue.h): from the second step on, a cached tensor submitted through its
// lane gives the same responses as through the queue's table, with no slow path, on every rank;
// a rank that submits some steps the ordinary way (a rank with a timeline) still fuses the same
// tensors into the same responses as the ranks using lanes.
TEST_P(ControllerTest, LanesServeCachedTensorsLikeTheOrdinaryPath) {
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
TEST_P(ControllerTest, ALaneTakesOnlyItsParametersAndOneTensorAtATime) {
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
TEST_P(ControllerTest, ALaneSubmissionThatWaitsTooLongGoesToRankZero) {
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
TEST_P(ControllerTest, LaneSubmissionsBesideAJoinedRankGoTheSlowWay) {
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
TEST_P(ControllerTest, AnEvictionClosesTheLaneAndSendsItsWaitingSubmissionToRankZero) {
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
  EXPECT_EQ(queue.try_lane("w", in, out, ReduceOp::kSum, 1.0, 1.0, h, 0),
            TensorQueue::LaneResult::kQueuedFirst);
  EXPECT_TRUE(queue.waiting().any);
  queue.close(detail::ErrorKind::kInvalidArgument, "closed for the test");
  EXPECT_TRUE(h->done);
  EXPECT_NE(h->error.find("allreduce of 'w' did not complete: closed for the test"),
            std::string::npos)
      << h->error;
  // No lane is left: the caller goes the ordinary way, which refuses it with the closing error.
  TensorRef in2(nullptr, DataType::kFloat32, {3}), out2 = in2;
  EXPECT_EQ(
      queue.try_lane("w", in2, out2, ReduceOp::kSum, 1.0, 1.0, detail::make_handle_state(1), 0),
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
  EXPECT_NE(queue.try_lane("a", in, out, ReduceOp::kSum, 1.0, 1.0, detail::make_handle_state(1), 3),
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
  EXPECT_NE(
      queue.try_lane("b", in2, out2, ReduceOp::kSum, 1.0, 1.0, detail::make_handle_state(1), 3),
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

TEST_P(ControllerTest, ShutdownOfOneRankStopsEveryRank) {
  const int n = GetParam();
  run_ranks(n, [](Rank& me) {
    bool shutdown = false;
    for (int i = 0; i < 10000 && !shutdown; ++i) me.cycle(me.rank() == me.size() - 1, &shutdown);
    EXPECT_TRUE(shutdown);
  });
}

// A rank that stops answering: every other rank fails with a CommunicationError naming it.
void expect_lost(int n, int dropped) {
  InProcessHub hub(n);
  ControllerOptions o = test_options();
  o.peer_timeout_seconds = 0.3;
  o.unresponsive = [&hub](const std::vector<int>& ranks) { return hub.unresponsive(ranks); };
  std::mutex mu;
  std::vector<std::vector<int>> announced;
  o.announce_lost = [&](const std::vector<int>& lost) {
    std::lock_guard<std::mutex> lock(mu);
    announced.push_back(lost);
  };
  std::atomic<int> failed{0};
  run_ranks(
      n,
      [&](Rank& me) {
        const int r = me.rank();
        me.submit(request(r, "first"));
        me.until({"first"});
        if (r == dropped) {
          hub.drop(r);
          return;
        }
        try {
          me.submit(request(r, "second"));
          me.until({"second"});
          ADD_FAILURE() << "rank " << r << ": no error after rank " << dropped << " was dropped";
        } catch (const CommunicationError& e) {
          const std::string want = "rank " + std::to_string(dropped) + " was lost";
          EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
          ++failed;
        }
      },
      o, &hub);
  EXPECT_EQ(failed, n - 1);
  if (dropped != 0) {
    ASSERT_EQ(announced.size(), 1u);
    EXPECT_EQ(announced[0], std::vector<int>{dropped});
  }
}

TEST(ControllerLostRank, DroppedRankIsNamedByEveryOtherRank) {
  expect_lost(2, 1);
  expect_lost(3, 1);
  expect_lost(4, 2);
}

TEST(ControllerLostRank, DroppedCoordinatorIsNamedByEveryOtherRank) {
  expect_lost(2, 0);
  expect_lost(3, 0);
}

// Silence alone is not death: a rank that misses the deadline but answers the liveness probe gets
// more time, and the cycle completes.
TEST(ControllerLostRank, SlowRankThatAnswersTheProbeIsWaitedFor) {
  const int n = 3;
  ControllerOptions o = test_options();
  o.peer_timeout_seconds = 0.2;
  std::atomic<int> probes{0};
  o.unresponsive = [&probes](const std::vector<int>&) {
    ++probes;
    return std::vector<int>{};
  };
  auto seen = run_ranks(
      n,
      [](Rank& me) {
        me.submit(request(me.rank(), "first"));
        me.until({"first"});
        if (me.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(700));
        me.submit(request(me.rank(), "second"));
        EXPECT_EQ(me.find(me.until({"second"}), "second").contributors, 3);
      },
      o);
  EXPECT_GT(probes, 0);
  expect_same_everywhere(seen);
}

}  // namespace
}  // namespace hvd
