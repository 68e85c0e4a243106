// Ranks enqueue many operations in a different order on every rank (names identify tensors), then
// wait on all of them: negotiation must match them up by name, and every result must be right.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

class AsyncOrder : public HvdTest {};

// 200 allreduces of mixed dtypes, sizes and ops, enqueued in an order shuffled with seed = rank
// and waited on in another per-rank order.
TEST_F(AsyncOrder, TwoHundredAllreducesInDifferentOrdersPerRank) {
  constexpr int kCount = 200;
  const int64_t sizes[] = {1, 7, 0, 33, 1000, 2};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAverage, ReduceOp::kMin};
  struct Item {
    std::string name;
    DataType t;
    ReduceOp op;
    Buffer buf;
    hvd::Handle h;
  };
  std::vector<Item> items(kCount);
  for (int k = 0; k < kCount; ++k) {
    Item& it = items[k];
    it.t = all_dtypes()[k % all_dtypes().size()];
    it.op = ops[k % 4];
    const int64_t n = (k % 50 == 49) ? 100003 : sizes[k % 6];
    it.name = "async." + std::to_string(k);
    it.buf = Buffer(it.t, n);
    it.buf.fill([&](int64_t i) { return reduce_contrib(it.op, it.t, rank_, size_, i + k); });
  }
  std::vector<int> order(kCount);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(rank_)));
  std::vector<int> wait_order = order;
  std::shuffle(wait_order.begin(), wait_order.end(),
               std::mt19937(static_cast<unsigned>(1000 + rank_)));
  {
    Watchdog w("200 shuffled async allreduces");
    for (int k : order) {
      Item& it = items[k];
      hvd::TensorRef t = it.buf.ref();
      it.h = enqueue([&] { return hvd::allreduce_async(t, t, it.name, it.op); }, it.name);
    }
    for (int k : wait_order) wait_ok(items[k].h, items[k].name);
  }
  int64_t wrong = 0;
  for (int k = 0; k < kCount; ++k) {
    Item& it = items[k];
    if (!it.h.valid()) continue;
    EXPECT_TRUE(it.h.ready()) << it.name;
    const double tol = (it.op == ReduceOp::kAverage && is_16bit_float(it.t)) ? 1e-3 : 0.0;
    wrong += check_values(
        it.buf, [&](int64_t i) { return reduce_expected(it.op, it.t, size_, i + k, 1, 1); },
        it.name, tol);
  }
  EXPECT_EQ(wrong, 0);
}

// Different collectives interleaved, each rank in its own order.
TEST_F(AsyncOrder, MixedCollectivesInDifferentOrdersPerRank) {
  constexpr int kEach = 15;
  std::vector<Buffer> ar(kEach), bc(kEach), ag(kEach);
  std::vector<hvd::Handle> h_ar(kEach), h_bc(kEach), h_ag(kEach);
  for (int k = 0; k < kEach; ++k) {
    ar[k] = Buffer(DataType::kInt32, 5 + k);
    ar[k].fill([&](int64_t i) { return static_cast<double>(rank_ + i + k); });
    bc[k] = Buffer(DataType::kFloat64, 3 + k);
    bc[k].fill([&](int64_t i) { return static_cast<double>(rank_ * 1000 + i + k); });
    ag[k] = Buffer(DataType::kInt8, rank_ + k % 3);
    ag[k].fill([&](int64_t i) { return static_cast<double>(rank_ * 10 + i); });
  }
  std::vector<int> order(3 * kEach);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(77 + rank_)));
  {
    Watchdog w("mixed shuffled collectives");
    for (int x : order) {
      const int k = x % kEach;
      if (x / kEach == 0) {
        hvd::TensorRef t = ar[k].ref();
        h_ar[k] = enqueue(
            [&] {
              return hvd::allreduce_async(t, t, "mixed.ar." + std::to_string(k), ReduceOp::kSum);
            },
            "mixed.ar");
      } else if (x / kEach == 1) {
        hvd::TensorRef t = bc[k].ref();
        const int root = k % size_;
        h_bc[k] =
            enqueue([&] { return hvd::broadcast_async(t, root, "mixed.bc." + std::to_string(k)); },
                    "mixed.bc");
      } else {
        hvd::TensorRef t = ag[k].ref();
        h_ag[k] = enqueue([&] { return hvd::allgather_async(t, "mixed.ag." + std::to_string(k)); },
                          "mixed.ag");
      }
    }
    for (int k = kEach - 1; k >= 0; --k) {
      wait_ok(h_ag[k], "mixed.ag." + std::to_string(k));
      wait_ok(h_bc[k], "mixed.bc." + std::to_string(k));
      wait_ok(h_ar[k], "mixed.ar." + std::to_string(k));
    }
  }
  for (int k = 0; k < kEach; ++k) {
    if (h_ar[k].valid()) {
      check_values(
          ar[k],
          [&](int64_t i) { return static_cast<double>(size_ * (i + k) + size_ * (size_ - 1) / 2); },
          "mixed.ar." + std::to_string(k));
    }
    if (h_bc[k].valid()) {
      const int root = k % size_;
      check_values(
          bc[k], [&](int64_t i) { return static_cast<double>(root * 1000 + i + k); },
          "mixed.bc." + std::to_string(k));
    }
    if (h_ag[k].valid()) {
      std::vector<double> want;
      for (int r = 0; r < size_; ++r) {
        for (int i = 0; i < r + k % 3; ++i) want.push_back(r * 10 + i);
      }
      hvd::Tensor& out = h_ag[k].output();
      EXPECT_EQ(out.num_elements(), static_cast<int64_t>(want.size())) << "mixed.ag." << k;
      if (out.num_elements() == static_cast<int64_t>(want.size())) {
        check_values(
            DataType::kInt8, out.data(), out.num_elements(), [&](int64_t i) { return want[i]; },
            "mixed.ag." + std::to_string(k));
      }
    }
  }
}

}  // namespace
}  // namespace hvdtest
