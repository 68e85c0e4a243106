// join(): rank r runs r + 1 steps of allreduce and then joins. A joined rank contributes the
// identity of the op (zeros for sum), kAverage divides by the ranks that contributed, and join()
// returns the rank that joined last (the one with the most steps, unique by construction).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

const DataType kJoinTypes[] = {DataType::kInt32, DataType::kFloat32, DataType::kFloat16,
                               DataType::kFloat64};

// Rank r's element i at a step where ranks [lo, hi] contribute. Average: symmetric around
// 3 + i%5 over the contributors, so the average over exactly those ranks is exact (dividing by
// all ranks instead would be visibly wrong).
double join_value(ReduceOp op, DataType t, int r, int lo, int hi, int64_t i) {
  switch (op) {
    case ReduceOp::kAverage:
      return static_cast<double>(3 + i % 5 + 2 * r - (lo + hi));
    case ReduceOp::kSum:
      return static_cast<double>(1 + i % 5 + r);
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((i * 7 + r * 3) % 11 - 5);
    case ReduceOp::kProduct:
      return static_cast<double>(((i + r) % 2) ? -2 : 1);
  }
  (void)t;
  return 0;
}

double join_expected(ReduceOp op, DataType t, int lo, int hi, int64_t i) {
  double acc = join_value(op, t, lo, lo, hi, i);
  for (int r = lo + 1; r <= hi; ++r) {
    const double v = join_value(op, t, r, lo, hi, i);
    switch (op) {
      case ReduceOp::kAverage:
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc /= (hi - lo + 1);
  return acc;
}

// Runs `steps_of(rank)` steps (unique per rank), each an allreduce of every op x kJoinTypes, then
// join(); checks every result and join()'s return value.
void run_join(const std::function<int(int)>& steps_of, const std::string& tag) {
  const int rank = hvd::rank(), size = hvd::size();
  const int my_steps = steps_of(rank);
  int max_steps = 0, last = 0;
  for (int r = 0; r < size; ++r) {
    if (steps_of(r) > max_steps) max_steps = steps_of(r), last = r;
  }
  constexpr int64_t kLen = 9;
  for (int s = 0; s < my_steps; ++s) {
    // Contributors at step s: the ranks with more than s steps. Here they are a contiguous range.
    int lo = size, hi = -1;
    for (int r = 0; r < size; ++r) {
      if (steps_of(r) > s) lo = std::min(lo, r), hi = std::max(hi, r);
    }
    struct Item {
      std::string name;
      ReduceOp op;
      DataType t;
      Buffer buf;
      hvd::Handle h;
    };
    std::vector<Item> items;
    for (ReduceOp op : all_ops()) {
      for (DataType t : kJoinTypes) {
        Item it;
        it.name =
            "join." + tag + "." + op_str(op) + "." + type_str(t) + ".step" + std::to_string(s);
        it.op = op;
        it.t = t;
        it.buf = Buffer(t, kLen);
        it.buf.fill([&](int64_t i) { return join_value(op, t, rank, lo, hi, i); });
        items.push_back(std::move(it));
      }
    }
    {
      Watchdog w("join " + tag + " step " + std::to_string(s));
      for (Item& it : items) {
        hvd::TensorRef ref = it.buf.ref();
        it.h = enqueue([&] { return hvd::allreduce_async(ref, ref, it.name, it.op); }, it.name);
      }
      for (Item& it : items) wait_ok(it.h, it.name);
    }
    for (Item& it : items) {
      if (!it.h.valid()) continue;
      const double tol = (it.op == ReduceOp::kAverage && it.t == DataType::kFloat16) ? 1e-3 : 0.0;
      check_values(
          it.buf, [&](int64_t i) { return join_expected(it.op, it.t, lo, hi, i); },
          it.name + " (contributors: ranks " + std::to_string(lo) + ".." + std::to_string(hi) + ")",
          tol);
    }
  }
  int joined_last = -1;
  try {
    Watchdog w("hvd::join() " + tag);
    joined_last = hvd::join();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "join() threw on rank " << rank << ": " << e.what();
  }
  EXPECT_EQ(joined_last, last) << "join() must return the rank that joined last";

  // After everyone joined, every rank contributes again.
  std::vector<int64_t> v(4);
  for (int i = 0; i < 4; ++i) v[i] = rank + i;
  try {
    Watchdog w("allreduce after join " + tag);
    hvd::allreduce(v, "join." + tag + ".after", ReduceOp::kSum);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "allreduce after join threw: " << e.what();
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(v[i], size * i + size * (size - 1) / 2) << "after join, element " << i;
}

class Join : public HvdTest {};

TEST_F(Join, RankRRunsRPlusOneStepsJoinedRanksContributeIdentity) {
  run_join([](int r) { return r + 1; }, "up");
}

// A second round in the opposite direction: join state must reset; now rank 0 joins last.
TEST_F(Join, SecondRoundWithReversedStepsRankZeroJoinsLast) {
  const int size = hvd::size();
  run_join([size](int r) { return size - r; }, "down");
}

// Every rank joins at once without any step: join() still returns and names a valid rank.
TEST_F(Join, JoinWithoutStepsReturnsAValidRank) {
  int last = -1;
  try {
    Watchdog w("hvd::join() without steps");
    last = hvd::join();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "join() threw: " << e.what();
  }
  EXPECT_GE(last, 0);
  EXPECT_LT(last, size_);
}

}  // namespace
}  // namespace hvdtest
