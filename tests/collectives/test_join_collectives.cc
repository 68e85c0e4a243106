// What every collective does while some ranks have joined (docs/architecture.md, "Join"):
//   barrier          releases once every rank that has not joined has called it (as in Horovod);
//   allreduce        joined ranks contribute the identity; kAverage divides by the contributors;
//   grouped          as allreduce, the group still runs as one;
//   allgather        joined ranks contribute no rows;
//   broadcast        runs when the root has not joined; fails on every caller when it has;
//   reducescatter    joined ranks contribute the identity (their block is dropped);
//   alltoall         fails on every caller (a joined rank cannot send its rows).
// Each scenario: rank r runs steps_of(r) steps of one collective (so ranks join at different
// points), then join(); afterwards every rank runs the collective again with everyone. Each rank
// checks its own results against values it computes itself from the set of ranks still active.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

std::vector<int> active_at(int step, int size, const std::function<int(int)>& steps_of) {
  std::vector<int> a;
  for (int r = 0; r < size; ++r)
    if (steps_of(r) > step) a.push_back(r);
  return a;
}

using StepFn = std::function<void(const std::string& name, const std::vector<int>& active)>;

// Runs the scenario for one collective; `step` checks one call with the given active ranks.
void run_scenario(const std::string& tag, const std::function<int(int)>& steps_of,
                  const StepFn& step) {
  const int rank = hvd::rank(), size = hvd::size();
  int max_steps = 0, last = 0;
  for (int r = 0; r < size; ++r)
    if (steps_of(r) > max_steps) max_steps = steps_of(r), last = r;
  for (int s = 0; s < steps_of(rank); ++s) {
    Watchdog w(tag + " step " + std::to_string(s), 60);
    step(tag + ".step" + std::to_string(s), active_at(s, size, steps_of));
  }
  int joined_last = -1;
  try {
    Watchdog w("join() after " + tag, 60);
    joined_last = hvd::join();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "join() threw on rank " << rank << ": " << e.what();
  }
  // steps_of gives the rank with the most steps uniquely, or several with max: any of those.
  if (max_steps > 0) {
    EXPECT_EQ(joined_last, last) << tag << ": join() must return the rank that joined last";
  }
  // Normal operation again: everyone active, twice (the second may take the cached fast path).
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  for (int k = 0; k < 2; ++k) {
    Watchdog w(tag + " after join", 60);
    step(tag + ".after", all);
  }
  // And a barrier with everyone, which used to hang after a barrier some ranks had skipped.
  Watchdog w(tag + " barrier after join", 60);
  hvd::barrier();
}

// Rank r joins after r steps (rank 0 at once), or after size-1-r steps (the last rank at once).
std::function<int(int)> up() {
  return [](int r) { return r; };
}
std::function<int(int)> down() {
  const int size = hvd::size();
  return [size](int r) { return size - 1 - r; };
}
// Only rank 0 does any step: every other rank joins at once.
std::function<int(int)> only_zero() {
  return [](int r) { return r == 0 ? 3 : 0; };
}

const std::vector<std::pair<std::string, std::function<int(int)>>> scenarios() {
  return {{"up", up()}, {"down", down()}, {"only_zero", only_zero()}};
}

class JoinCollectives : public HvdTest {};

TEST_F(JoinCollectives, BarrierReleasesAmongRanksThatHaveNotJoined) {
  for (const auto& [sc, steps_of] : scenarios())
    run_scenario("barrier." + sc, steps_of,
                 [](const std::string&, const std::vector<int>&) { hvd::barrier(); });
}

// The program: rank 0 joins at once, the others barrier and join; then a barrier for all.
TEST_F(JoinCollectives, BarrierAfterABarrierThatAJoinedRankSkipped) {
  {
    Watchdog w("join/barrier", 60);
    if (rank_ == 0) {
      hvd::join();
    } else {
      hvd::barrier();
      hvd::join();
    }
  }
  for (int i = 0; i < 3; ++i) {
    Watchdog w("barrier " + std::to_string(i) + " after join", 60);
    hvd::barrier();
  }
}

TEST_F(JoinCollectives, AllreduceJoinedRanksContributeIdentity) {
  for (const auto& [sc, steps_of] : scenarios()) {
    run_scenario(
        "allreduce." + sc, steps_of, [](const std::string& name, const std::vector<int>& active) {
          const int rank = hvd::rank();
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
            const std::string n = name + "." + op_str(op);
            std::vector<float> v(7);
            for (int i = 0; i < 7; ++i) v[i] = static_cast<float>((rank + 1) * (i + 1));
            try {
              hvd::allreduce(v, n, op);
            } catch (const std::exception& e) {
              ADD_FAILURE() << n << " threw on rank " << rank << ": " << e.what();
              continue;
            }
            for (int i = 0; i < 7; ++i) {
              double sum = 0, mx = -1e30;
              for (int r : active)
                sum += (r + 1) * (i + 1), mx = std::max<double>(mx, (r + 1) * (i + 1));
              const double want = op == ReduceOp::kSum       ? sum
                                  : op == ReduceOp::kAverage ? sum / active.size()
                                                             : mx;
              EXPECT_NEAR(v[i], want, 1e-4 * want) << n << " element " << i << " on rank " << rank;
            }
          }
        });
  }
}

TEST_F(JoinCollectives, GroupedAllreduceJoinedRanksContributeIdentity) {
  for (const auto& [sc, steps_of] : scenarios()) {
    run_scenario(
        "grouped." + sc, steps_of, [](const std::string& name, const std::vector<int>& active) {
          const int rank = hvd::rank();
          std::vector<std::vector<int64_t>> bufs(3);
          std::vector<hvd::TensorRef> refs;
          for (int k = 0; k < 3; ++k) {
            bufs[k].resize(static_cast<size_t>(k + 2));
            for (size_t i = 0; i < bufs[k].size(); ++i)
              bufs[k][i] = (rank + 1) * 10 + k + static_cast<int64_t>(i);
            refs.emplace_back(bufs[k].data(), DataType::kInt64, std::vector<int64_t>{k + 2});
          }
          hvd::Handle h = enqueue(
              [&] { return hvd::grouped_allreduce_async(refs, refs, name, ReduceOp::kSum); }, name);
          if (!wait_ok(h, name)) return;
          for (int k = 0; k < 3; ++k)
            for (size_t i = 0; i < bufs[k].size(); ++i) {
              int64_t want = 0;
              for (int r : active) want += (r + 1) * 10 + k + static_cast<int64_t>(i);
              EXPECT_EQ(bufs[k][i], want)
                  << name << " tensor " << k << " element " << i << " on rank " << rank;
            }
        });
  }
}

TEST_F(JoinCollectives, AllgatherJoinedRanksContributeNoRows) {
  for (const auto& [sc, steps_of] : scenarios()) {
    run_scenario("allgather." + sc, steps_of,
                 [](const std::string& name, const std::vector<int>& active) {
                   const int rank = hvd::rank();
                   // Rank r sends r + 1 rows of 2 values: (r, row).
                   std::vector<int32_t> mine;
                   for (int row = 0; row <= rank; ++row) mine.insert(mine.end(), {rank, row});
                   hvd::TensorRef in(mine.data(), DataType::kInt32, {rank + 1, 2});
                   hvd::Handle h = enqueue([&] { return hvd::allgather_async(in, name); }, name);
                   if (!wait_ok(h, name)) return;
                   std::vector<int32_t> want;
                   for (int r : active)
                     for (int row = 0; row <= r; ++row) want.insert(want.end(), {r, row});
                   EXPECT_EQ(h.output().to_vector<int32_t>(), want) << name << " on rank " << rank;
                 });
  }
}

TEST_F(JoinCollectives, BroadcastFromARankThatHasNotJoined) {
  for (const auto& [sc, steps_of] : scenarios()) {
    run_scenario("broadcast." + sc, steps_of,
                 [](const std::string& name, const std::vector<int>& active) {
                   const int rank = hvd::rank();
                   const int root = active.back();  // active at this step on every caller
                   std::vector<double> v(5);
                   for (int i = 0; i < 5; ++i) v[i] = rank * 100 + i;
                   try {
                     hvd::broadcast(v, root, name);
                   } catch (const std::exception& e) {
                     ADD_FAILURE() << name << " threw on rank " << rank << ": " << e.what();
                     return;
                   }
                   for (int i = 0; i < 5; ++i)
                     EXPECT_EQ(v[i], root * 100 + i) << name << " on rank " << rank;
                 });
  }
}

TEST_F(JoinCollectives, BroadcastFromAJoinedRootFailsOnEveryCaller) {
  if (size_ < 2) GTEST_SKIP() << "needs a joined rank besides the caller";
  // Rank 0 joins at once; the others broadcast from root 0, then a good broadcast, then join.
  if (rank_ == 0) {
    Watchdog w("join", 60);
    hvd::join();
    return;
  }
  std::vector<float> v(3, static_cast<float>(rank_));
  {
    Watchdog w("broadcast from joined root", 60);
    try {
      hvd::broadcast(v, 0, "bcast.joined_root");
      ADD_FAILURE() << "broadcast from a joined root succeeded on rank " << rank_;
    } catch (const hvd::Error& e) {
      EXPECT_TRUE(contains_ci(e.what(), "root rank 0 has already called join()")) << e.what();
    }
  }
  {
    Watchdog w("good broadcast", 60);
    hvd::broadcast(v, size_ - 1, "bcast.good_root");
    for (float x : v) EXPECT_EQ(x, static_cast<float>(size_ - 1));
  }
  Watchdog w("join", 60);
  hvd::join();
}

TEST_F(JoinCollectives, ReducescatterJoinedRanksContributeIdentity) {
  for (const auto& [sc, steps_of] : scenarios()) {
    run_scenario("reducescatter." + sc, steps_of,
                 [](const std::string& name, const std::vector<int>& active) {
                   const int rank = hvd::rank(), size = hvd::size();
                   const int rows =
                       2 * size + 1;  // not divisible: the first rank's block is one row larger
                   std::vector<float> in(static_cast<size_t>(rows) * 3);
                   for (size_t i = 0; i < in.size(); ++i)
                     in[i] = static_cast<float>((rank + 1) * (static_cast<int>(i) + 1));
                   hvd::TensorRef ref(in.data(), DataType::kFloat32, {rows, 3});
                   hvd::Handle h = enqueue(
                       [&] { return hvd::reducescatter_async(ref, name, ReduceOp::kSum); }, name);
                   if (!wait_ok(h, name)) return;
                   const int base = rows / size, extra = rows % size;
                   const int my_rows = base + (rank < extra ? 1 : 0);
                   const int first = rank * base + std::min(rank, extra);
                   std::vector<float> got = h.output().to_vector<float>();
                   ASSERT_EQ(got.size(), static_cast<size_t>(my_rows) * 3) << name;
                   double coef = 0;
                   for (int r : active) coef += r + 1;
                   for (int i = 0; i < my_rows * 3; ++i)
                     EXPECT_FLOAT_EQ(got[i], static_cast<float>(coef * (first * 3 + i + 1)))
                         << name << " on rank " << rank;
                 });
  }
}

TEST_F(JoinCollectives, AlltoallFailsOnEveryCallerWhileRanksHaveJoined) {
  for (const auto& [sc, steps_of] : scenarios()) {
    run_scenario(
        "alltoall." + sc, steps_of, [](const std::string& name, const std::vector<int>& active) {
          const int rank = hvd::rank(), size = hvd::size();
          std::vector<int32_t> in(static_cast<size_t>(size));
          for (int r = 0; r < size; ++r) in[r] = rank * 10 + r;
          hvd::TensorRef ref(in.data(), DataType::kInt32, {size});
          hvd::Handle h = enqueue([&] { return hvd::alltoall_async(ref, {}, name); }, name);
          if (!h.valid()) return;
          if (static_cast<int>(active.size()) < size) {
            try {
              h.wait();
              ADD_FAILURE() << name << " succeeded on rank " << rank << " while ranks had joined";
            } catch (const hvd::Error& e) {
              EXPECT_TRUE(contains_ci(e.what(), "call it before join()")) << e.what();
            }
            return;
          }
          if (!wait_ok(h, name)) return;
          std::vector<int32_t> want(static_cast<size_t>(size));
          for (int r = 0; r < size; ++r) want[r] = r * 10 + rank;
          EXPECT_EQ(h.output().to_vector<int32_t>(), want) << name << " on rank " << rank;
        });
  }
}

}  // namespace
}  // namespace hvdtest
