// hvd::torch collectives on torch tensors, on 1-3 ranks: every dtype hvd and torch share, in place
// and not, sync and async; the errors (non-contiguous, unsupported dtype or device, undefined)
// on the rank that passes the bad tensor and on the others (no hang). Every rank checks its own
// values. Failures around collectives are EXPECT-style so that every rank takes the same path.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "hvd/torch.h"
#include "tests/torch/torch_test_util.h"

namespace {

namespace ht = hvd::torch;
using namespace hvdtest::torch_util;

const std::vector<c10::ScalarType>& all_types() {
  static const std::vector<c10::ScalarType> v = {at::kByte, at::kChar,     at::kInt,   at::kLong,
                                                 at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};
  return v;
}

class TorchCollectives : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

TEST(TorchTensor, DtypeMapping) {
  for (auto t : all_types()) EXPECT_EQ(ht::scalar_type_of(ht::dtype_of(t)), t) << tname(t);
  EXPECT_EQ(ht::dtype_of(at::kFloat), hvd::DataType::kFloat32);
  EXPECT_EQ(ht::dtype_of(at::kBFloat16), hvd::DataType::kBFloat16);
  for (auto t : {at::kBool, at::kShort, at::kComplexFloat, at::kComplexDouble}) {
    try {
      ht::dtype_of(t);
      ADD_FAILURE() << tname(t) << " was accepted";
    } catch (const hvd::InvalidArgumentError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(tname(t)), std::string::npos) << m;
      EXPECT_NE(m.find("uint8, int8, int32, int64, float16, bfloat16, float32, float64"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("convert it first"), std::string::npos) << m;
    }
  }
}

TEST_F(TorchCollectives, AllreduceEveryDtype) {
  for (auto type : all_types()) {
    const std::string s = tname(type);
    const auto opts = at::TensorOptions().dtype(type);
    // v + (2r - (n-1)): the offsets cancel over ranks, so the average is v exactly.
    const at::Tensor v = at::arange(10, 22, at::kDouble).view({3, 4});
    const at::Tensor mine = (v + (2 * r() - (n() - 1))).to(type);
    const at::Tensor before = mine.clone();
    at::Tensor avg = ht::allreduce(mine, "t.avg." + s);
    EXPECT_TRUE(same(avg, v)) << s << " average: " << avg;
    EXPECT_EQ(avg.scalar_type(), type);
    EXPECT_TRUE(at::equal(mine, before)) << s << ": the input changed";
    // Sum of r + 1.
    const double want = n() * (n() + 1) / 2.0;
    at::Tensor sum = ht::allreduce(at::full({5}, r() + 1, opts), "t.sum." + s, hvd::ReduceOp::kSum);
    EXPECT_TRUE(same(sum, at::full({5}, want, at::kDouble))) << s << " sum: " << sum;
    // In place, and its version counter moves.
    at::Tensor inplace = at::full({2, 3}, r() + 1, opts);
    const int64_t version = inplace._version();
    const at::Tensor& ret = ht::allreduce_(inplace, "t.inplace." + s, hvd::ReduceOp::kSum);
    EXPECT_TRUE(ret.is_same(inplace));
    EXPECT_TRUE(same(inplace, at::full({2, 3}, want, at::kDouble)))
        << s << " in place: " << inplace;
    EXPECT_GT(inplace._version(), version);
    // Async, both forms.
    ht::Handle h1 =
        ht::allreduce_async(at::full({4}, r() + 1, opts), "t.async." + s, hvd::ReduceOp::kSum);
    at::Tensor target = at::full({4}, r() + 1, opts);
    ht::Handle h2 = ht::allreduce_async_(target, "t.async_." + s, hvd::ReduceOp::kMax);
    EXPECT_TRUE(same(ht::synchronize(h1), at::full({4}, want, at::kDouble))) << s;
    h2.wait();
    EXPECT_TRUE(h2.ready());
    EXPECT_TRUE(same(target, at::full({4}, n(), at::kDouble))) << s << " max: " << target;
    EXPECT_TRUE(h2.output().is_same(target));
  }
}

TEST_F(TorchCollectives, AllreduceScalesShapesAndEmpty) {
  at::Tensor t = at::full({3}, r() + 1, at::kFloat);
  at::Tensor out =
      ht::allreduce(t, "t.scaled", hvd::ReduceOp::kSum, /*prescale=*/2.0, /*postscale=*/0.25);
  EXPECT_TRUE(same(out, at::full({3}, 0.5 * n() * (n() + 1) / 2.0, at::kDouble))) << out;
  at::Tensor scalar = at::scalar_tensor(r() + 1, at::kDouble);
  at::Tensor s = ht::allreduce(scalar, "t.scalar", hvd::ReduceOp::kSum);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), n() * (n() + 1) / 2.0);
  at::Tensor empty = at::empty({0, 4}, at::kFloat);
  at::Tensor e = ht::allreduce(empty, "t.empty");
  EXPECT_TRUE(e.sizes().equals({0, 4}));
  // A contiguous view with a storage offset (a row of a matrix) is fine, in place.
  at::Tensor m = at::zeros({3, 4}, at::kInt);
  m[1].fill_(r() + 1);
  ht::allreduce_(m[1], "t.row", hvd::ReduceOp::kSum);
  EXPECT_EQ(m[1].sum().item<int64_t>(), 4 * n() * (n() + 1) / 2);
  EXPECT_EQ(m[0].abs().sum().item<int64_t>() + m[2].abs().sum().item<int64_t>(), 0);
}

TEST_F(TorchCollectives, GroupedAllreduce) {
  std::vector<at::Tensor> in = {at::full({3}, r() + 1, at::kFloat),
                                at::full({2, 2}, r() + 1, at::kLong),
                                at::full({1}, r() + 1, at::kHalf)};
  const double want = n() * (n() + 1) / 2.0;
  std::vector<at::Tensor> out = ht::grouped_allreduce(in, "t.group", hvd::ReduceOp::kSum);
  ASSERT_EQ(out.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(same(out[i], at::full(in[i].sizes(), want, at::kDouble))) << i << ": " << out[i];
    EXPECT_EQ(out[i].scalar_type(), in[i].scalar_type());
    EXPECT_TRUE(same(in[i], at::full(in[i].sizes(), r() + 1, at::kDouble)))
        << "input " << i << " changed";
  }
  ht::grouped_allreduce_(in, "t.group_", hvd::ReduceOp::kSum);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(same(in[i], out[i])) << i;
  ht::Handle h = ht::grouped_allreduce_async(in, "t.group.async", hvd::ReduceOp::kMin);
  std::vector<at::Tensor> mins = h.outputs();
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(same(mins[i], out[i])) << i;
  EXPECT_THROW(h.output(), hvd::InvalidArgumentError);  // three results: outputs()
}

TEST_F(TorchCollectives, AllgatherEveryDtype) {
  for (auto type : all_types()) {
    const std::string s = tname(type);
    // Rank q contributes q + 1 rows of 3 values 10 q + j.
    at::Tensor mine = (at::arange(3, at::kDouble) + 10 * r()).repeat({r() + 1, 1}).to(type);
    at::Tensor all = ht::allgather(mine, "t.allgather." + s);
    EXPECT_EQ(all.scalar_type(), type);
    ASSERT_EQ(all.size(0), n() * (n() + 1) / 2) << s;
    ASSERT_EQ(all.size(1), 3);
    int64_t row = 0;
    for (int q = 0; q < n(); ++q)
      for (int k = 0; k <= q; ++k, ++row)
        EXPECT_TRUE(same(all[row], at::arange(3, at::kDouble) + 10 * q))
            << s << " row " << row << ": " << all[row];
    ht::Handle h = ht::allgather_async(mine, "t.allgather.async." + s);
    EXPECT_TRUE(same(ht::synchronize(h), all)) << s;
  }
}

TEST_F(TorchCollectives, BroadcastEveryDtype) {
  const int root = n() - 1;
  for (auto type : all_types()) {
    const std::string s = tname(type);
    at::Tensor mine = at::full({2, 3}, r() + 5, at::TensorOptions().dtype(type));
    at::Tensor copy = ht::broadcast(mine, root, "t.bcast." + s);
    EXPECT_TRUE(same(copy, at::full({2, 3}, root + 5, at::kDouble))) << s << ": " << copy;
    EXPECT_TRUE(same(mine, at::full({2, 3}, r() + 5, at::kDouble)))
        << s << ": broadcast changed its input";
    const at::Tensor& ret = ht::broadcast_(mine, 0, "t.bcast_." + s);
    EXPECT_TRUE(ret.is_same(mine));
    EXPECT_TRUE(same(mine, at::full({2, 3}, 5, at::kDouble))) << s << ": " << mine;
  }
}

TEST_F(TorchCollectives, AlltoallEveryDtype) {
  for (auto type : all_types()) {
    const std::string s = tname(type);
    // To rank j: j + 1 rows of value 10 r + j, 2 columns.
    std::vector<int64_t> splits;
    std::vector<at::Tensor> parts;
    for (int j = 0; j < n(); ++j) {
      splits.push_back(j + 1);
      parts.push_back(at::full({j + 1, 2}, 10 * r() + j, at::kDouble));
    }
    at::Tensor mine = at::cat(parts).to(type);
    std::vector<int64_t> received;
    at::Tensor got = ht::alltoall(mine, splits, "t.alltoall." + s, &received);
    EXPECT_EQ(got.scalar_type(), type);
    EXPECT_EQ(received, std::vector<int64_t>(static_cast<std::size_t>(n()), r() + 1)) << s;
    ASSERT_EQ(got.size(0), n() * (r() + 1)) << s;
    for (int q = 0; q < n(); ++q)
      EXPECT_TRUE(same(got.narrow(0, q * (r() + 1), r() + 1),
                       at::full({r() + 1, 2}, 10 * q + r(), at::kDouble)))
          << s << " from " << q << ": " << got;
  }
  // Equal parts (no splits).
  at::Tensor even = at::full({2 * n()}, r(), at::kInt);
  at::Tensor got = ht::alltoall(even, {}, "t.alltoall.even");
  EXPECT_TRUE(same(got, at::arange(n(), at::kDouble).repeat_interleave(2))) << got;
}

TEST_F(TorchCollectives, ReducescatterEveryDtype) {
  // 2n + 1 rows: rank 0 keeps 3, the others 2. Row k of rank q holds k + q.
  const int64_t rows = 2 * n() + 1;
  const int64_t first = r() == 0 ? 0 : 3 + 2 * (r() - 1);
  const int64_t count = r() == 0 ? 3 : 2;
  for (auto type : all_types()) {
    const std::string s = tname(type);
    at::Tensor mine = (at::arange(rows, at::kDouble).view({rows, 1}).repeat({1, 2}) + r()).to(type);
    at::Tensor got = ht::reducescatter(mine, "t.rs." + s, hvd::ReduceOp::kSum);
    at::Tensor want =
        at::arange(first, first + count, at::kDouble).view({count, 1}).repeat({1, 2}) * n() +
        n() * (n() - 1) / 2.0;
    EXPECT_TRUE(same(got, want)) << s << ": " << got << " want " << want;
  }
}

// ---- Errors -------------------------------------------------------------------------------------

// Runs `op` on every rank (the last rank, or every rank when `all`, with a bad tensor); the bad
// ranks must throw hvd::InvalidArgumentError with every part of `want`; the others hvd::Error
// naming the last rank. Afterwards a good allreduce still works.
template <class Op>
void expect_failure(const std::string& what, bool all, const std::vector<std::string>& want,
                    Op op) {
  const bool bad = all || r() == n() - 1;
  try {
    op(bad);
    ADD_FAILURE() << what << ": no error on rank " << r();
  } catch (const hvd::InvalidArgumentError& e) {
    const std::string m = e.what();
    if (bad) {
      for (const auto& w : want)
        EXPECT_NE(m.find(w), std::string::npos) << what << ": '" << w << "' not in: " << m;
    } else {
      EXPECT_NE(m.find("rank " + std::to_string(n() - 1)), std::string::npos) << what << ": " << m;
    }
  } catch (const hvd::Error& e) {
    EXPECT_FALSE(bad) << what << ": the bad rank threw a plain hvd::Error: " << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(n() - 1)), std::string::npos)
        << e.what();
  }
  at::Tensor ok = ht::allreduce(at::ones({2}), "t.after." + what, hvd::ReduceOp::kSum);
  EXPECT_TRUE(same(ok, at::full({2}, n(), at::kDouble))) << what << ": the next operation failed";
}

at::Tensor good() { return at::arange(12, at::kFloat).view({3, 4}); }
at::Tensor transposed() {
  return at::arange(12, at::kFloat).view({4, 3}).t();
}  // 3x4, not contiguous

const std::vector<std::string> kNotContiguous = {"is not contiguous", "strides [1,3]",
                                                 ".contiguous()"};

TEST_F(TorchCollectives, NonContiguousFailsEveryRank) {
  for (bool all : {false, true}) {
    const std::string tag = all ? ".all" : ".one";
    auto want = kNotContiguous;
    want.push_back("hvd::torch::allreduce of 'e.nc" + tag +
                   "' failed: the tensor is not contiguous");
    expect_failure("allreduce" + tag, all, want,
                   [&](bool bad) { ht::allreduce(bad ? transposed() : good(), "e.nc" + tag); });
    expect_failure("allreduce_" + tag, all, kNotContiguous, [&](bool bad) {
      at::Tensor t = bad ? transposed() : good();
      ht::allreduce_(t, "e.nc_" + tag);
    });
    expect_failure("allgather" + tag, all, kNotContiguous,
                   [&](bool bad) { ht::allgather(bad ? transposed() : good(), "e.ag" + tag); });
    expect_failure("broadcast_" + tag, all, kNotContiguous,
                   [&](bool bad) { ht::broadcast_(bad ? transposed() : good(), 0, "e.bc" + tag); });
    expect_failure("alltoall" + tag, all, kNotContiguous, [&](bool bad) {
      std::vector<int64_t> splits(static_cast<std::size_t>(n()), 0);
      splits[0] = 3;  // every row to rank 0
      ht::alltoall(bad ? transposed() : good(), splits, "e.a2a" + tag);
    });
    expect_failure("reducescatter" + tag, all, kNotContiguous,
                   [&](bool bad) { ht::reducescatter(bad ? transposed() : good(), "e.rs" + tag); });
    expect_failure("grouped" + tag, all,
                   {"tensor 1 ('e.grp" + tag + ".1') is not contiguous", ".contiguous()"},
                   [&](bool bad) {
                     ht::grouped_allreduce({good(), bad ? transposed() : good()}, "e.grp" + tag);
                   });
  }
}

TEST_F(TorchCollectives, UnsupportedDtypeFailsEveryRank) {
  expect_failure("bool", false,
                 {"dtype Bool", "uint8, int8, int32, int64, float16, bfloat16, float32, float64",
                  ".to(torch::kUInt8)"},
                 [](bool bad) {
                   ht::allreduce(bad ? at::ones({4}, at::kBool) : at::ones({4}, at::kByte),
                                 "e.bool");
                 });
  expect_failure("complex", true, {"dtype ComplexFloat", "view_as_real"},
                 [](bool) { ht::allreduce(at::ones({4}, at::kComplexFloat), "e.complex"); });
  expect_failure("int16", false, {"dtype Short", ".to(torch::kInt32)"}, [](bool bad) {
    ht::broadcast_(bad ? at::ones({4}, at::kShort) : at::ones({4}, at::kInt), 0, "e.short");
  });
}

TEST_F(TorchCollectives, OtherBadTensorsFailEveryRank) {
  expect_failure("undefined", false, {"is undefined"}, [](bool bad) {
    ht::allreduce(bad ? at::Tensor() : at::ones({4}), "e.undefined");
  });
  expect_failure("meta", false, {"is on meta", "CPU or CUDA"}, [](bool bad) {
    ht::allreduce(at::ones({4}, at::TensorOptions().device(bad ? at::kMeta : at::kCPU)), "e.meta");
  });
  expect_failure("sparse", true, {"layout Sparse", ".to_dense()"},
                 [](bool) { ht::allreduce(at::ones({4}).to_sparse(), "e.sparse"); });
}

TEST_F(TorchCollectives, TensorRefAndEmptyHandle) {
  at::Tensor t = at::zeros({2, 5}, at::kDouble);
  hvd::TensorRef ref = ht::tensor_ref(t, "t");
  EXPECT_EQ(ref.data(), t.data_ptr());
  EXPECT_EQ(ref.dtype(), hvd::DataType::kFloat64);
  EXPECT_EQ(ref.shape(), (std::vector<int64_t>{2, 5}));
  EXPECT_TRUE(ref.device() == hvd::Device::cpu());
  EXPECT_THROW(ht::tensor_ref(transposed(), "x"), hvd::InvalidArgumentError);
  ht::Handle empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.wait(), hvd::Error);
}

}  // namespace
