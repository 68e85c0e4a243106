// The controller's negotiation protocol over an in-process channel: 1-4 ranks as threads of this
// process (tests/runtime/in_process_channel.h), no MPI. Every rank runs its own Controller and
// checks its own results; the main thread then checks that every rank saw the same response list.
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
#include "tests/runtime/controller_harness.h"
#include "tests/runtime/in_process_channel.h"

namespace hvd {
namespace {

using namespace controller_test;  // NOLINT: the harness is this file's vocabulary

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

TEST_P(ControllerTest, ShutdownOfOneRankStopsEveryRank) {
  const int n = GetParam();
  run_ranks(n, [](Rank& me) {
    bool shutdown = false;
    for (int i = 0; i < 10000 && !shutdown; ++i) me.cycle(me.rank() == me.size() - 1, &shutdown);
    EXPECT_TRUE(shutdown);
  });
}

// hvd/stop.h: a stop request of one rank reaches every rank in the same cycle (the n-th cycle of
// every rank is one AND), and the cycles before it show none; it does not shut anything down.
TEST_P(ControllerTest, StopRequestOfOneRankIsSeenByEveryRankInTheSameCycle) {
  const int n = GetParam();
  constexpr int kAskFrom = 3;  // the asking rank asks from its 4th cycle on
  run_ranks(n, [](Rank& me) {
    const bool asks = me.rank() == me.size() / 2;
    for (int i = 0; i < 8; ++i) {
      bool shutdown = true, stop = false;
      me.cycle(false, &shutdown, asks && i >= kAskFrom, &stop);
      EXPECT_FALSE(shutdown) << "cycle " << i;
      EXPECT_EQ(stop, i >= kAskFrom) << "rank " << me.rank() << " cycle " << i;
    }
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
