// allgather (per-rank first dimension), broadcast (from every root), alltoall (uneven and zero
// splits), reducescatter (first dimension not divisible by the rank count), and barrier, for every
// dtype x sizes 0, 1, 7, 1000003. Each rank computes its expected values from rank and size alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

// A small integer (exact in every dtype) identifying element j of what `src` contributes; `salt`
// tells cases apart.
double pattern(DataType t, int src, int64_t j, int salt = 0) {
  return static_cast<double>((src * 5 + j * 3 + salt) % 13 - (is_signed(t) ? 6 : 0));
}

std::string case_name(const std::string& op, DataType t, int64_t n, const std::string& extra = "") {
  return op + "." + type_str(t) + "." + std::to_string(n) + extra;
}

// ---- allgather ----------------------------------------------------------------------------------

// Rank r's first dimension: `base` everywhere (uniform) or base + r (ragged, rank 0 has `base`).
int64_t gather_rows(int64_t base, bool ragged, int r) { return ragged ? base + r : base; }

class Allgather : public HvdTest {};

void run_allgather(bool ragged, std::vector<int64_t> inner_shape) {
  const int rank = hvd::rank(), size = hvd::size();
  int64_t inner = 1;
  for (int64_t d : inner_shape) inner *= d;
  struct Case {
    std::string name;
    DataType t;
    int64_t base;
    Buffer in;
    hvd::Handle h;
  };
  std::vector<Case> cases;
  for (DataType t : all_dtypes()) {
    for (int64_t base : all_sizes()) {
      if (inner > 1 && base == kBig) continue;  // keep the 2-D variant small
      Case c;
      c.name = case_name("allgather", t, base,
                         (ragged ? ".ragged" : ".uniform") + std::to_string(inner));
      c.t = t;
      c.base = base;
      std::vector<int64_t> shape = {gather_rows(base, ragged, rank)};
      shape.insert(shape.end(), inner_shape.begin(), inner_shape.end());
      c.in = Buffer(t, shape);
      c.in.fill([&](int64_t j) { return pattern(t, rank, j); });
      cases.push_back(std::move(c));
    }
  }
  {
    Watchdog w(std::string("allgather batch ") + (ragged ? "ragged" : "uniform"));
    for (Case& c : cases) {
      hvd::TensorRef in = c.in.ref();
      c.h = enqueue([&] { return hvd::allgather_async(in, c.name); }, c.name);
    }
    for (Case& c : cases) wait_ok(c.h, c.name);
  }
  for (Case& c : cases) {
    if (!c.h.valid()) continue;
    hvd::Tensor& out = c.h.output();
    int64_t total_rows = 0;
    std::vector<int64_t> offsets;  // element offset of each source rank's block
    for (int r = 0; r < size; ++r) {
      offsets.push_back(total_rows * inner);
      total_rows += gather_rows(c.base, ragged, r);
    }
    std::vector<int64_t> want_shape = {total_rows};
    want_shape.insert(want_shape.end(), inner_shape.begin(), inner_shape.end());
    EXPECT_EQ(out.shape(), want_shape) << c.name;
    EXPECT_EQ(out.dtype(), c.t) << c.name;
    if (out.shape() != want_shape || out.dtype() != c.t) continue;
    check_values(
        c.t, out.data(), total_rows * inner,
        [&](int64_t i) {
          const int src = static_cast<int>(std::upper_bound(offsets.begin(), offsets.end(), i) -
                                           offsets.begin()) -
                          1;
          return pattern(c.t, src, i - offsets[src]);
        },
        c.name);
  }
}

TEST_F(Allgather, UniformFirstDimensionEveryDtypeAndSize) { run_allgather(false, {}); }
TEST_F(Allgather, PerRankFirstDimensionEveryDtypeAndSize) { run_allgather(true, {}); }
TEST_F(Allgather, PerRankFirstDimensionWithInnerDimensions) { run_allgather(true, {3, 2}); }

TEST_F(Allgather, ConvenienceVector) {
  std::vector<int32_t> mine(static_cast<std::size_t>(rank_) + 1, rank_ * 10);
  std::vector<int32_t> all;
  try {
    Watchdog w("hvd::allgather(vector)");
    all = hvd::allgather(mine, "allgather.vector");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "hvd::allgather(vector) threw: " << e.what();
  }
  std::vector<int32_t> want;
  for (int r = 0; r < size_; ++r) want.insert(want.end(), static_cast<std::size_t>(r) + 1, r * 10);
  EXPECT_EQ(all, want);
}

// ---- broadcast ----------------------------------------------------------------------------------

class Broadcast : public HvdTest {};

TEST_F(Broadcast, FromEveryRootEveryDtypeAndSize) {
  struct Case {
    std::string name;
    DataType t;
    int root;
    Buffer buf;
    hvd::Handle h;
  };
  for (int root = 0; root < size_; ++root) {
    std::vector<Case> cases;
    for (DataType t : all_dtypes()) {
      for (int64_t n : all_sizes()) {
        Case c;
        c.name = case_name("broadcast", t, n, ".root" + std::to_string(root));
        c.t = t;
        c.root = root;
        c.buf = Buffer(t, n);
        // Every rank starts with its own values; only the root's must survive.
        c.buf.fill([&](int64_t j) { return pattern(t, rank_, j, 1); });
        cases.push_back(std::move(c));
      }
    }
    {
      Watchdog w("broadcast batch root " + std::to_string(root));
      for (Case& c : cases) {
        hvd::TensorRef ref = c.buf.ref();
        c.h = enqueue([&] { return hvd::broadcast_async(ref, c.root, c.name); }, c.name);
      }
      for (Case& c : cases) wait_ok(c.h, c.name);
    }
    for (Case& c : cases) {
      if (!c.h.valid()) continue;
      check_values(
          c.buf, [&](int64_t j) { return pattern(c.t, c.root, j, 1); }, c.name);
    }
  }
}

TEST_F(Broadcast, MultiDimensionalAndConvenienceVector) {
  Buffer b(DataType::kFloat64, std::vector<int64_t>{4, 3});
  b.fill([&](int64_t j) { return pattern(DataType::kFloat64, rank_, j); });
  const int root = size_ - 1;
  hvd::TensorRef ref = b.ref();
  hvd::Handle h =
      enqueue([&] { return hvd::broadcast_async(ref, root, "broadcast.2d"); }, "broadcast.2d");
  {
    Watchdog w("broadcast.2d");
    wait_ok(h, "broadcast.2d");
  }
  check_values(
      b, [&](int64_t j) { return pattern(DataType::kFloat64, root, j); }, "broadcast.2d");

  std::vector<int64_t> v(9, rank_ == 0 ? 42 : -1);
  try {
    Watchdog w("hvd::broadcast(vector)");
    hvd::broadcast(v, 0, "broadcast.vector");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "hvd::broadcast(vector) threw: " << e.what();
  }
  EXPECT_EQ(v, std::vector<int64_t>(9, 42));
}

// ---- alltoall -----------------------------------------------------------------------------------

// Rows rank `src` sends to rank `dst` out of `rows` in total, for `size` ranks: uneven weights
// (src + 2 dst) % 3, so that some ranks get nothing (zero splits) and the rest unequal parts.
std::vector<int64_t> splits_of(int src, int size, int64_t rows) {
  std::vector<int64_t> w(size), s(size, 0);
  int64_t wsum = 0;
  for (int d = 0; d < size; ++d) wsum += (w[d] = (src + 2 * d) % 3);
  if (wsum == 0) {  // one rank, weight 0: everything to the one destination
    w[(src + 1) % size] = 1;
    wsum = 1;
  }
  int64_t given = 0;
  int last = 0;
  for (int d = 0; d < size; ++d) {
    s[d] = rows * w[d] / wsum;
    given += s[d];
    if (w[d] > 0) last = d;
  }
  s[last] += rows - given;
  return s;
}

// Element j of the block `src` sends to `dst`.
double a2a_value(DataType t, int src, int dst, int64_t j) {
  return static_cast<double>((src * 3 + dst * 5 + j) % 11 - (is_signed(t) ? 5 : 0));
}

class Alltoall : public HvdTest {};

void run_alltoall(bool equal_parts, int64_t inner) {
  const int rank = hvd::rank(), size = hvd::size();
  struct Case {
    std::string name;
    DataType t;
    int64_t rows;
    Buffer in;
    hvd::Handle h;
  };
  std::vector<Case> cases;
  for (DataType t : all_dtypes()) {
    for (int64_t rows : all_sizes()) {
      if (equal_parts)
        rows = (rows / size) * size + (rows == 1 ? size : 0);  // divisible, 1 -> one row each
      if (inner > 1 && rows > 1000) continue;
      Case c;
      c.name = case_name("alltoall", t, rows,
                         (equal_parts ? ".equal" : ".uneven") + std::to_string(inner) + "." +
                             std::to_string(cases.size()));
      c.t = t;
      c.rows = rows;
      const std::vector<int64_t> splits =
          equal_parts ? std::vector<int64_t>(size, rows / size) : splits_of(rank, size, rows);
      c.in = Buffer(t, std::vector<int64_t>{rows, inner});
      int64_t off = 0;
      for (int d = 0; d < size; ++d) {
        for (int64_t j = 0; j < splits[d] * inner; ++j) c.in.set(off + j, a2a_value(t, rank, d, j));
        off += splits[d] * inner;
      }
      cases.push_back(std::move(c));
    }
  }
  {
    Watchdog w(std::string("alltoall batch ") + (equal_parts ? "equal" : "uneven"));
    for (Case& c : cases) {
      hvd::TensorRef in = c.in.ref();
      std::vector<int64_t> splits =
          equal_parts ? std::vector<int64_t>{} : splits_of(rank, size, c.rows);
      c.h = enqueue([&] { return hvd::alltoall_async(in, splits, c.name); }, c.name);
    }
    for (Case& c : cases) wait_ok(c.h, c.name);
  }
  for (Case& c : cases) {
    if (!c.h.valid()) continue;
    std::vector<int64_t> recv(size);
    for (int s = 0; s < size; ++s) {
      recv[s] = equal_parts ? c.rows / size : splits_of(s, size, c.rows)[rank];
    }
    const int64_t total = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    hvd::Tensor& out = c.h.output();
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{total, inner})) << c.name;
    EXPECT_EQ(c.h.received_splits(), recv) << c.name;
    if (out.shape() != std::vector<int64_t>{total, inner}) continue;
    std::vector<int64_t> offsets;
    int64_t off = 0;
    for (int s = 0; s < size; ++s) {
      offsets.push_back(off);
      off += recv[s] * inner;
    }
    check_values(
        c.t, out.data(), total * inner,
        [&](int64_t i) {
          // The last source whose block starts at or before i (zero-sized blocks skipped).
          int s = static_cast<int>(std::upper_bound(offsets.begin(), offsets.end(), i) -
                                   offsets.begin()) -
                  1;
          return a2a_value(c.t, s, rank, i - offsets[s]);
        },
        c.name);
  }
}

TEST_F(Alltoall, UnevenAndZeroSplitsEveryDtypeAndSize) { run_alltoall(false, 1); }
TEST_F(Alltoall, EmptySplitsMeanEqualParts) { run_alltoall(true, 1); }
TEST_F(Alltoall, SplitsCountRowsOfMultiDimensionalTensors) { run_alltoall(false, 3); }

TEST_F(Alltoall, ConvenienceVector) {
  // Rank r sends d+1 copies of (r*100 + d) to rank d.
  std::vector<float> data;
  std::vector<int64_t> splits;
  for (int d = 0; d < size_; ++d) {
    data.insert(data.end(), static_cast<std::size_t>(d) + 1, static_cast<float>(rank_ * 100 + d));
    splits.push_back(d + 1);
  }
  std::vector<float> got;
  try {
    Watchdog w("hvd::alltoall(vector)");
    got = hvd::alltoall(data, splits, "alltoall.vector");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "hvd::alltoall(vector) threw: " << e.what();
  }
  std::vector<float> want;
  for (int s = 0; s < size_; ++s)
    want.insert(want.end(), static_cast<std::size_t>(rank_) + 1,
                static_cast<float>(s * 100 + rank_));
  EXPECT_EQ(got, want);
}

// ---- reducescatter ------------------------------------------------------------------------------

class Reducescatter : public HvdTest {};

void run_reducescatter(ReduceOp op, const std::vector<int64_t>& row_counts, int64_t inner) {
  const int rank = hvd::rank(), size = hvd::size();
  struct Case {
    std::string name;
    DataType t;
    int64_t rows;
    Buffer in;
    hvd::Handle h;
  };
  std::vector<Case> cases;
  for (DataType t : all_dtypes()) {
    for (int64_t rows : row_counts) {
      Case c;
      c.name = case_name(std::string("reducescatter.") + op_str(op), t, rows,
                         "x" + std::to_string(inner));
      c.t = t;
      c.rows = rows;
      c.in = Buffer(t, std::vector<int64_t>{rows, inner});
      c.in.fill([&](int64_t i) { return reduce_contrib(op, t, rank, size, i); });
      cases.push_back(std::move(c));
    }
  }
  {
    Watchdog w(std::string("reducescatter batch ") + op_str(op));
    for (Case& c : cases) {
      hvd::TensorRef in = c.in.ref();
      c.h = enqueue([&] { return hvd::reducescatter_async(in, c.name, op); }, c.name);
    }
    for (Case& c : cases) wait_ok(c.h, c.name);
  }
  for (Case& c : cases) {
    if (!c.h.valid()) continue;
    // Blocks as even as possible, the first rows % size ranks one row larger.
    const int64_t base = c.rows / size, extra = c.rows % size;
    const int64_t my_rows = base + (rank < extra ? 1 : 0);
    const int64_t first_row = rank * base + std::min<int64_t>(rank, extra);
    hvd::Tensor& out = c.h.output();
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{my_rows, inner})) << c.name;
    if (out.shape() != std::vector<int64_t>{my_rows, inner}) continue;
    const double tol = (op == ReduceOp::kAverage && is_16bit_float(c.t)) ? 1e-3 : 0.0;
    check_values(
        c.t, out.data(), my_rows * inner,
        [&](int64_t i) { return reduce_expected(op, c.t, size, first_row * inner + i, 1, 1); },
        c.name, tol);
  }
}

TEST_F(Reducescatter, SumEveryDtypeAndSize) { run_reducescatter(ReduceOp::kSum, all_sizes(), 1); }
TEST_F(Reducescatter, AverageEveryDtypeAndSize) {
  run_reducescatter(ReduceOp::kAverage, all_sizes(), 1);
}
TEST_F(Reducescatter, MinMaxProductSmall) {
  run_reducescatter(ReduceOp::kMin, {0, 1, 7, 1001}, 1);
  run_reducescatter(ReduceOp::kMax, {0, 1, 7, 1001}, 1);
  run_reducescatter(ReduceOp::kProduct, {0, 1, 7, 1001}, 1);
}
TEST_F(Reducescatter, RowsNotDivisibleWithInnerDimensions) {
  run_reducescatter(ReduceOp::kSum, {1, 2, 3, 5, 7, 10, 11}, 3);
}

TEST_F(Reducescatter, ConvenienceVector) {
  std::vector<int64_t> data(10);
  for (int i = 0; i < 10; ++i) data[i] = i * 10 + rank_;
  std::vector<int64_t> got;
  try {
    Watchdog w("hvd::reducescatter(vector)");
    got = hvd::reducescatter(data, "reducescatter.vector", ReduceOp::kSum);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "hvd::reducescatter(vector) threw: " << e.what();
  }
  const int64_t base = 10 / size_, extra = 10 % size_;
  const int64_t first = rank_ * base + std::min<int64_t>(rank_, extra);
  const int64_t count = base + (rank_ < extra ? 1 : 0);
  std::vector<int64_t> want;
  for (int64_t i = first; i < first + count; ++i)
    want.push_back(size_ * i * 10 + size_ * (size_ - 1) / 2);
  EXPECT_EQ(got, want);
}

// ---- barrier ------------------------------------------------------------------------------------

// Rank 0 arrives 300 ms late; nobody may leave the barrier before it arrives.
TEST(Barrier, NobodyLeavesBeforeEveryRankArrived) {
  hvd::init();
  const auto start = std::chrono::steady_clock::now();
  if (hvd::rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  try {
    Watchdog w("hvd::barrier()");
    hvd::barrier();
    hvd::barrier();  // twice in a row
  } catch (const std::exception& e) {
    ADD_FAILURE() << "barrier threw: " << e.what();
  }
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited_ms, 250.0) << "rank " << hvd::rank()
                              << " left the barrier before rank 0 arrived";
}

}  // namespace
}  // namespace hvdtest
