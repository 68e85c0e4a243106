// The blocking collectives on a TensorRef (hvd/collectives.h): allreduce in place and out of place
// for every dtype and reduce op (with and without prescale/postscale), grouped allreduce, broadcast
// from every root, allgather, alltoall (with the received splits), reducescatter; errors reach
// every rank as exceptions from the call itself. Each rank checks its own values, computed from
// rank and size alone. The static_asserts below are the overload-resolution test: a std::vector
// argument still picks the std::vector templates, a TensorRef the new functions, and no call is
// ambiguous.
#include <gtest/gtest.h>

#include <concepts>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

// ---- Overload resolution (compile time) ---------------------------------------------------------

// A vector or span never becomes a TensorRef implicitly, so for a vector argument the TensorRef
// overloads are not viable and the std::vector templates are chosen.
static_assert(!std::is_convertible_v<std::vector<float>&, hvd::TensorRef>);
static_assert(!std::is_convertible_v<const std::vector<float>&, hvd::TensorRef>);
static_assert(!std::is_convertible_v<std::span<float>, hvd::TensorRef>);
static_assert(!std::is_convertible_v<hvd::Tensor&, hvd::TensorRef>);

template <class V>
constexpr bool vector_calls_compile = requires(V& v, const V& cv, const std::vector<int64_t>& s) {
  hvd::allreduce(v, "x");
  hvd::allreduce(v, "x", hvd::ReduceOp::kSum);
  hvd::broadcast(v, 0, "x");
  { hvd::allgather(cv, "x") } -> std::same_as<V>;
  { hvd::alltoall(cv, s, "x") } -> std::same_as<V>;
  { hvd::reducescatter(cv, "x") } -> std::same_as<V>;
  { hvd::reducescatter(cv, "x", hvd::ReduceOp::kMax) } -> std::same_as<V>;
  { hvd::allreduce_async(std::span<typename V::value_type>(v), "x") } -> std::same_as<hvd::Handle>;
};
static_assert(vector_calls_compile<std::vector<float>>);
static_assert(vector_calls_compile<std::vector<double>>);
static_assert(vector_calls_compile<std::vector<int64_t>>);
static_assert(vector_calls_compile<std::vector<uint8_t>>);
// The templates are the ones the calls above resolve to (same signatures as before the additions).
static_assert(std::is_same_v<decltype(&hvd::allreduce<float>),
                             void (*)(std::vector<float>&, const std::string&, hvd::ReduceOp)>);
static_assert(std::is_same_v<decltype(&hvd::broadcast<float>),
                             void (*)(std::vector<float>&, int, const std::string&)>);

constexpr bool tensor_ref_calls_compile =
    requires(hvd::TensorRef t, std::vector<hvd::TensorRef> g, std::vector<int64_t> s) {
  { hvd::allreduce(t, "x") } -> std::same_as<void>;
  { hvd::allreduce(t, "x", hvd::ReduceOp::kSum, 2.0, 0.5) } -> std::same_as<void>;
  { hvd::allreduce(t, t, "x") } -> std::same_as<void>;
  { hvd::allreduce(t, t, "x", hvd::ReduceOp::kMin, 1.0, 1.0) } -> std::same_as<void>;
  { hvd::grouped_allreduce(g, "x") } -> std::same_as<void>;
  { hvd::grouped_allreduce({t, t}, "x", hvd::ReduceOp::kSum) } -> std::same_as<void>;
  { hvd::grouped_allreduce(g, g, "x") } -> std::same_as<void>;
  { hvd::grouped_allreduce({t}, {t}, "x", hvd::ReduceOp::kMax) } -> std::same_as<void>;
  { hvd::broadcast(t, 0, "x") } -> std::same_as<void>;
  { hvd::allgather(t, "x") } -> std::same_as<hvd::Tensor>;
  { hvd::alltoall(t, s, "x") } -> std::same_as<hvd::Tensor>;
  { hvd::alltoall(t, {}, "x", &s) } -> std::same_as<hvd::Tensor>;
  { hvd::reducescatter(t, "x") } -> std::same_as<hvd::Tensor>;
  { hvd::reducescatter(t, "x", hvd::ReduceOp::kSum) } -> std::same_as<hvd::Tensor>;
  // The async forms are unchanged.
  { hvd::allreduce_async(t, t, "x") } -> std::same_as<hvd::Handle>;
};
static_assert(tensor_ref_calls_compile);

// ---- Helpers ------------------------------------------------------------------------------------

double tolerance(ReduceOp op, DataType t) {
  return (op == ReduceOp::kAverage && is_16bit_float(t)) ? 1e-3 : 0.0;
}

// Runs one blocking collective under a watchdog; an exception is a test failure (the rank goes on
// along the same path as the others). Returns whether it succeeded.
bool run_ok(const std::string& what, const std::function<void()>& f) {
  Watchdog w(what);
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw on rank " << hvd::rank() << ": " << e.what();
    return false;
  }
}

// Runs one blocking collective that must fail on every rank with hvd::Error naming `needle`.
void expect_error(const std::string& what, const std::string& needle,
                  const std::function<void()>& f) {
  Watchdog w(what);
  try {
    f();
    ADD_FAILURE() << what << ": did not throw on rank " << hvd::rank();
  } catch (const hvd::Error& e) {
    EXPECT_TRUE(contains_ci(e.what(), needle))
        << what << " on rank " << hvd::rank() << ": '" << e.what() << "' does not contain '"
        << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-hvd exception on rank " << hvd::rank() << ": "
                  << e.what();
  }
}

class SyncTensor : public HvdTest {};

// ---- allreduce ----------------------------------------------------------------------------------

struct Scales {
  double pre, post;
};

void run_allreduce(bool in_place) {
  const int rank = hvd::rank(), size = hvd::size();
  for (DataType t : all_dtypes()) {
    for (ReduceOp op : all_ops()) {
      for (Scales s : {Scales{1.0, 1.0}, Scales{2.0, 1.5}}) {
        if (op == ReduceOp::kProduct && s.pre != 1.0) continue;  // 2^4 * 16 leaves int8
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
          const std::string name = std::string("sync.ar.") + (in_place ? "inplace." : "out.") +
                                   type_str(t) + "." + op_str(op) + "." + std::to_string(s.pre) +
                                   "." + std::to_string(n);
          Buffer in(t, n), out(t, n);
          in.fill([&](int64_t i) { return reduce_contrib(op, t, rank, size, i); });
          out.fill([](int64_t) { return 99; });
          const bool ok = run_ok(name, [&] {
            if (in_place) {
              if (s.pre == 1.0 && s.post == 1.0)
                hvd::allreduce(in.ref(), name, op);
              else
                hvd::allreduce(in.ref(), name, op, s.pre, s.post);
            } else {
              hvd::allreduce(in.ref(), out.ref(), name, op, s.pre, s.post);
            }
          });
          if (!ok) continue;
          check_values(
              in_place ? in : out,
              [&](int64_t i) { return reduce_expected(op, t, size, i, s.pre, s.post); }, name,
              tolerance(op, t));
          if (!in_place)
            check_values(
                in, [&](int64_t i) { return reduce_contrib(op, t, rank, size, i); },
                name + " input must be unchanged");
        }
      }
    }
  }
}

TEST_F(SyncTensor, AllreduceInPlaceEveryDtypeAndOp) { run_allreduce(true); }
TEST_F(SyncTensor, AllreduceOutOfPlaceEveryDtypeAndOp) { run_allreduce(false); }

// The default op is the average.
TEST_F(SyncTensor, AllreduceDefaultIsAverage) {
  std::vector<double> v(5);
  for (int i = 0; i < 5; ++i) v[i] = 2.0 * rank_ + i;
  hvd::TensorRef t(v.data(), DataType::kFloat64, {5});
  if (!run_ok("sync.ar.default", [&] { hvd::allreduce(t, "sync.ar.default"); })) return;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(v[i], (size_ - 1) + i) << "element " << i;
}

TEST_F(SyncTensor, GroupedAllreduceInPlaceAndOutOfPlace) {
  const int size = size_;
  std::vector<Buffer> in, out;
  for (int k = 0; k < 3; ++k) {
    const DataType t = k == 1 ? DataType::kInt32 : DataType::kFloat32;
    in.emplace_back(t, std::vector<int64_t>{k + 1, 3});
    in.back().fill([&](int64_t i) { return reduce_contrib(ReduceOp::kSum, t, rank_, size, i); });
    out.emplace_back(t, std::vector<int64_t>{k + 1, 3});
  }
  std::vector<hvd::TensorRef> in_refs, out_refs;
  for (int k = 0; k < 3; ++k) {
    in_refs.push_back(in[k].ref());
    out_refs.push_back(out[k].ref());
  }
  if (run_ok("sync.grouped.out", [&] {
        hvd::grouped_allreduce(in_refs, out_refs, "sync.grouped.out", ReduceOp::kSum);
      }))
    for (int k = 0; k < 3; ++k) {
      check_values(
          out[k],
          [&](int64_t i) { return reduce_expected(ReduceOp::kSum, out[k].dtype(), size, i, 1, 1); },
          "sync.grouped.out[" + std::to_string(k) + "]");
      check_values(
          in[k],
          [&](int64_t i) { return reduce_contrib(ReduceOp::kSum, in[k].dtype(), rank_, size, i); },
          "sync.grouped.out input unchanged");
    }
  if (run_ok("sync.grouped.inplace",
             [&] { hvd::grouped_allreduce(in_refs, "sync.grouped.inplace", ReduceOp::kSum); }))
    for (int k = 0; k < 3; ++k)
      check_values(
          in[k],
          [&](int64_t i) { return reduce_expected(ReduceOp::kSum, in[k].dtype(), size, i, 1, 1); },
          "sync.grouped.inplace[" + std::to_string(k) + "]");
  // An empty group completes at once.
  run_ok("sync.grouped.empty", [&] { hvd::grouped_allreduce({}, "sync.grouped.empty"); });
}

// ---- broadcast, allgather, alltoall, reducescatter ---------------------------------------------

TEST_F(SyncTensor, BroadcastFromEveryRoot) {
  for (DataType t : all_dtypes()) {
    for (int root = 0; root < size_; ++root) {
      const std::string name =
          std::string("sync.bcast.") + type_str(t) + "." + std::to_string(root);
      Buffer b(t, std::vector<int64_t>{3, 5});
      b.fill([&](int64_t i) { return (rank_ * 7 + i) % 11; });
      if (!run_ok(name, [&] { hvd::broadcast(b.ref(), root, name); })) continue;
      check_values(
          b, [&](int64_t i) { return (root * 7 + i) % 11; }, name);
    }
  }
}

TEST_F(SyncTensor, AllgatherRaggedRows) {
  for (DataType t : all_dtypes()) {
    const std::string name = std::string("sync.gather.") + type_str(t);
    const int64_t rows = rank_ + 1;  // rank r contributes r + 1 rows of 2
    Buffer b(t, std::vector<int64_t>{rows, 2});
    b.fill([&](int64_t i) { return (rank_ * 5 + i) % 13; });
    hvd::Tensor out;
    if (!run_ok(name, [&] { out = hvd::allgather(b.ref(), name); })) continue;
    const int64_t total = int64_t{size_} * (size_ + 1) / 2;
    EXPECT_EQ(out.dtype(), t) << name;
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{total, 2})) << name;
    std::vector<double> want;
    for (int r = 0; r < size_; ++r)
      for (int64_t i = 0; i < (r + 1) * 2; ++i)
        want.push_back(static_cast<double>((r * 5 + i) % 13));
    if (out.num_elements() == static_cast<int64_t>(want.size()))
      check_values(
          t, out.data(), out.num_elements(), [&](int64_t i) { return want[i]; }, name);
  }
}

// Rank r sends (r + d) % 3 rows of 2 to rank d; row k of what r sends to d holds 100r + 10d + k.
TEST_F(SyncTensor, AlltoallWithReceivedSplits) {
  for (DataType t : {DataType::kInt32, DataType::kFloat64, DataType::kUInt8}) {
    const std::string name = std::string("sync.a2a.") + type_str(t);
    std::vector<int64_t> splits;
    std::vector<double> values;
    for (int d = 0; d < size_; ++d) {
      splits.push_back((rank_ + d) % 3);
      for (int64_t k = 0; k < splits.back(); ++k)
        for (int c = 0; c < 2; ++c) values.push_back(((100 * rank_ + 10 * d + k) + c) % 250);
    }
    int64_t rows = 0;
    for (int64_t s : splits) rows += s;
    Buffer b(t, std::vector<int64_t>{rows, 2});
    b.fill([&](int64_t i) { return values[i]; });
    hvd::Tensor out;
    std::vector<int64_t> received;
    if (!run_ok(name, [&] { out = hvd::alltoall(b.ref(), splits, name, &received); })) continue;
    std::vector<int64_t> want_splits;
    std::vector<double> want;
    for (int r = 0; r < size_; ++r) {
      want_splits.push_back((r + rank_) % 3);
      for (int64_t k = 0; k < want_splits.back(); ++k)
        for (int c = 0; c < 2; ++c) want.push_back(((100 * r + 10 * rank_ + k) + c) % 250);
    }
    EXPECT_EQ(received, want_splits) << name;
    int64_t want_rows = 0;
    for (int64_t s : want_splits) want_rows += s;
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{want_rows, 2})) << name;
    if (out.num_elements() == static_cast<int64_t>(want.size()))
      check_values(
          t, out.data(), out.num_elements(), [&](int64_t i) { return want[i]; }, name);
  }
  // Equal parts without splits, and no received_splits wanted.
  std::vector<int32_t> v(static_cast<size_t>(size_));
  for (int d = 0; d < size_; ++d) v[d] = 10 * rank_ + d;
  hvd::Tensor out;
  if (run_ok("sync.a2a.equal", [&] {
        out = hvd::alltoall(hvd::as_tensor(std::span<int32_t>(v)), {}, "sync.a2a.equal");
      })) {
    const std::vector<int32_t> got = out.to_vector<int32_t>();
    ASSERT_EQ(got.size(), static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) EXPECT_EQ(got[r], 10 * r + rank_) << "from rank " << r;
  }
}

TEST_F(SyncTensor, ReducescatterUnevenRows) {
  const int64_t rows = 2 * size_ + 1;  // rank 0 gets one row more
  for (DataType t : all_dtypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      const std::string name = std::string("sync.rs.") + type_str(t) + "." + op_str(op);
      Buffer b(t, std::vector<int64_t>{rows, 3});
      b.fill([&](int64_t i) { return reduce_contrib(op, t, rank_, size_, i); });
      hvd::Tensor out;
      if (!run_ok(name, [&] { out = hvd::reducescatter(b.ref(), name, op); })) continue;
      const int64_t my_rows = rows / size_ + (rank_ < rows % size_ ? 1 : 0);
      int64_t first = 0;
      for (int r = 0; r < rank_; ++r) first += rows / size_ + (r < rows % size_ ? 1 : 0);
      EXPECT_EQ(out.dtype(), t) << name;
      EXPECT_EQ(out.shape(), (std::vector<int64_t>{my_rows, 3})) << name;
      if (out.num_elements() == my_rows * 3)
        check_values(
            t, out.data(), out.num_elements(),
            [&](int64_t i) { return reduce_expected(op, t, size_, first * 3 + i, 1, 1); }, name,
            tolerance(op, t));
    }
  }
}

// The std::vector templates still do what they did, next to the TensorRef forms.
TEST_F(SyncTensor, VectorTemplatesUnchanged) {
  std::vector<float> v = {1.0f * rank_, 2.0f};
  if (run_ok("sync.vec.ar", [&] { hvd::allreduce(v, "sync.vec.ar", ReduceOp::kSum); })) {
    EXPECT_EQ(v[0], size_ * (size_ - 1) / 2.0f);
    EXPECT_EQ(v[1], 2.0f * size_);
  }
  std::vector<float> g;
  if (run_ok("sync.vec.ag",
             [&] { g = hvd::allgather(std::vector<float>{1.0f * rank_}, "sync.vec.ag"); })) {
    ASSERT_EQ(g.size(), static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) EXPECT_EQ(g[r], 1.0f * r);
  }
}

// ---- errors: every rank gets the exception from the blocking call ------------------------------

TEST_F(SyncTensor, ErrorsReachEveryRank) {
  const int last = size_ - 1;
  // The last rank passes an output that does not match its input.
  {
    std::vector<float> in(4, 1.0f), out(rank_ == last ? 3 : 4);
    hvd::TensorRef o(out.data(), DataType::kFloat32, {static_cast<int64_t>(out.size())});
    expect_error("sync.err.mismatch", "does not match", [&] {
      hvd::allreduce(hvd::as_tensor(std::span<float>(in)), o, "sync.err.mismatch");
    });
  }
  // Every rank passes a root out of range.
  {
    std::vector<int32_t> v(3);
    expect_error("sync.err.root", "out of range", [&] {
      hvd::broadcast(hvd::as_tensor(std::span<int32_t>(v)), size_, "sync.err.root");
    });
  }
  // The last rank's splits do not add up.
  {
    std::vector<float> v(static_cast<size_t>(size_), 1.0f);
    std::vector<int64_t> splits(static_cast<size_t>(size_), 1);
    if (rank_ == last) splits[0] = 2;
    expect_error("sync.err.splits", "add up to", [&] {
      hvd::alltoall(hvd::as_tensor(std::span<float>(v)), splits, "sync.err.splits");
    });
  }
  // A scalar has no first dimension (reducescatter and allgather), on every rank.
  {
    float x = 1.0f;
    hvd::TensorRef scalar(&x, DataType::kFloat32, {});
    expect_error("sync.err.rs", "no first dimension",
                 [&] { hvd::reducescatter(scalar, "sync.err.rs"); });
    expect_error("sync.err.ag", "no first dimension",
                 [&] { hvd::allgather(scalar, "sync.err.ag"); });
  }
  // The last rank passes three outputs for two inputs: the whole group fails on every rank.
  {
    std::vector<float> a(2, 1.0f), c(3);
    std::vector<hvd::TensorRef> in = {hvd::TensorRef(a.data(), DataType::kFloat32, {1}),
                                      hvd::TensorRef(a.data() + 1, DataType::kFloat32, {1})};
    std::vector<hvd::TensorRef> out = {hvd::TensorRef(c.data(), DataType::kFloat32, {1}),
                                       hvd::TensorRef(c.data() + 1, DataType::kFloat32, {1})};
    if (rank_ == last) out.push_back(hvd::TensorRef(c.data() + 2, DataType::kFloat32, {1}));
    expect_error("sync.err.group", "pass one output per input",
                 [&] { hvd::grouped_allreduce(in, out, "sync.err.group"); });
  }
  // A bad name throws at once, on every rank.
  {
    std::vector<float> v(2);
    EXPECT_THROW(hvd::allreduce(hvd::as_tensor(std::span<float>(v)), ""),
                 hvd::InvalidArgumentError);
  }
  // After the errors, a good operation works.
  std::vector<int64_t> v = {rank_ + 1};
  if (run_ok("sync.err.after", [&] {
        hvd::allreduce(hvd::as_tensor(std::span<int64_t>(v)), "sync.err.after", ReduceOp::kSum);
      })) {
    EXPECT_EQ(v[0], int64_t{size_} * (size_ + 1) / 2);
  }
}

}  // namespace
}  // namespace hvdtest
