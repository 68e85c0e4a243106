// allreduce and grouped_allreduce on CPU tensors: every reduce op x every dtype x sizes 0, 1, 7,
// 1000003, in place and out of place, with prescale/postscale, the vector/span convenience layer,
// scalars, and repeated names (the response-cache path). Each rank computes its expected values
// from rank and size alone.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

double tolerance(ReduceOp op, DataType t) {
  return (op == ReduceOp::kAverage && is_16bit_float(t)) ? 1e-3 : 0.0;
}

struct Case {
  std::string name;
  DataType dtype;
  int64_t n;
  bool in_place;
  Buffer in, out;
  hvd::Handle handle;
};

// Every dtype x size for one op, all enqueued at once (the big ones fuse), then waited on.
void run_all(ReduceOp op, double prescale, double postscale, const std::string& tag) {
  const int rank = hvd::rank(), size = hvd::size();
  std::vector<Case> cases;
  int k = 0;
  for (DataType t : all_dtypes()) {
    for (int64_t n : all_sizes()) {
      Case c;
      c.name = "ar." + tag + "." + op_str(op) + "." + type_str(t) + "." + std::to_string(n);
      c.dtype = t;
      c.n = n;
      c.in_place = (k++ % 2) == 0;
      c.in = Buffer(t, n);
      c.in.fill([&](int64_t i) { return reduce_contrib(op, t, rank, size, i); });
      if (!c.in_place) {
        c.out = Buffer(t, n);
        c.out.fill([](int64_t) { return 99; });
      }
      cases.push_back(std::move(c));
    }
  }
  {
    Watchdog w("allreduce batch " + tag + "." + op_str(op));
    for (Case& c : cases) {
      hvd::TensorRef in = c.in.ref();
      hvd::TensorRef out = c.in_place ? in : c.out.ref();
      c.handle = enqueue(
          [&] { return hvd::allreduce_async(in, out, c.name, op, prescale, postscale); }, c.name);
    }
    for (Case& c : cases) wait_ok(c.handle, c.name);
  }
  for (Case& c : cases) {
    if (!c.handle.valid()) continue;
    const Buffer& result = c.in_place ? c.in : c.out;
    check_values(
        result,
        [&](int64_t i) { return reduce_expected(op, c.dtype, size, i, prescale, postscale); },
        c.name, tolerance(op, c.dtype));
    if (!c.in_place) {
      check_values(
          c.in, [&](int64_t i) { return reduce_contrib(op, c.dtype, rank, size, i); },
          c.name + " input must be unchanged");
    }
  }
}

class Allreduce : public HvdTest {};

TEST_F(Allreduce, AverageEveryDtypeAndSize) { run_all(ReduceOp::kAverage, 1.0, 1.0, "plain"); }
TEST_F(Allreduce, SumEveryDtypeAndSize) { run_all(ReduceOp::kSum, 1.0, 1.0, "plain"); }
TEST_F(Allreduce, MinEveryDtypeAndSize) { run_all(ReduceOp::kMin, 1.0, 1.0, "plain"); }
TEST_F(Allreduce, MaxEveryDtypeAndSize) { run_all(ReduceOp::kMax, 1.0, 1.0, "plain"); }
TEST_F(Allreduce, ProductEveryDtypeAndSize) { run_all(ReduceOp::kProduct, 1.0, 1.0, "plain"); }

// prescale 2 and postscale 1.5: out = 1.5 * op(2 * in); everything stays an exact small integer.
TEST_F(Allreduce, PrescaleAndPostscaleSum) { run_all(ReduceOp::kSum, 2.0, 1.5, "scaled"); }
TEST_F(Allreduce, PrescaleAndPostscaleAverage) { run_all(ReduceOp::kAverage, 2.0, 1.5, "scaled"); }
TEST_F(Allreduce, PrescaleAndPostscaleMinMax) {
  run_all(ReduceOp::kMin, 2.0, 1.5, "scaled");
  run_all(ReduceOp::kMax, 2.0, 1.5, "scaled");
}

// A postscale alone that is not a power of two (1/3 of a multiple of 3 is exact after rounding).
TEST_F(Allreduce, PostscaleOneThird) {
  std::vector<double> v(11);
  for (int i = 0; i < 11; ++i) v[i] = 3.0 * (i + rank_);
  hvd::TensorRef t(v.data(), DataType::kFloat64, {11});
  hvd::Handle h = enqueue(
      [&] { return hvd::allreduce_async(t, t, "ar.third", ReduceOp::kSum, 1.0, 1.0 / 3.0); },
      "ar.third");
  {
    Watchdog w("ar.third");
    wait_ok(h, "ar.third");
  }
  for (int i = 0; i < 11; ++i) {
    double sum = 0;
    for (int r = 0; r < size_; ++r) sum += 3.0 * (i + r);
    EXPECT_NEAR(v[i], sum / 3.0, 1e-12) << i;
  }
}

// A scalar (shape {}) has one element.
TEST_F(Allreduce, ScalarTensor) {
  int64_t x = 10 + rank_;
  hvd::TensorRef t(&x, DataType::kInt64, {});
  hvd::Handle h =
      enqueue([&] { return hvd::allreduce_async(t, t, "ar.scalar", ReduceOp::kSum); }, "ar.scalar");
  {
    Watchdog w("ar.scalar");
    wait_ok(h, "ar.scalar");
  }
  EXPECT_EQ(x, 10 * size_ + size_ * (size_ - 1) / 2);
}

// A multi-dimensional tensor reduces element-wise like a flat one.
TEST_F(Allreduce, MultiDimensionalTensor) {
  Buffer b(DataType::kFloat32, std::vector<int64_t>{3, 5, 2});
  b.fill([&](int64_t i) {
    return reduce_contrib(ReduceOp::kSum, DataType::kFloat32, rank_, size_, i);
  });
  hvd::TensorRef t = b.ref();
  hvd::Handle h =
      enqueue([&] { return hvd::allreduce_async(t, t, "ar.3d", ReduceOp::kSum); }, "ar.3d");
  {
    Watchdog w("ar.3d");
    wait_ok(h, "ar.3d");
  }
  check_values(
      b,
      [&](int64_t i) {
        return reduce_expected(ReduceOp::kSum, DataType::kFloat32, size_, i, 1, 1);
      },
      "ar.3d");
}

// The same name again and again (after the first time the ranks agree through the response cache).
TEST_F(Allreduce, RepeatedNameGetsFreshValuesEachTime) {
  std::vector<int32_t> v(13);
  for (int step = 0; step < 20; ++step) {
    for (int i = 0; i < 13; ++i) v[i] = step * 100 + i + rank_;
    hvd::Handle h = enqueue(
        [&] { return hvd::allreduce_async(std::span<int32_t>(v), "ar.repeat", ReduceOp::kSum); },
        "ar.repeat");
    {
      Watchdog w("ar.repeat step " + std::to_string(step));
      wait_ok(h, "ar.repeat");
    }
    int64_t wrong = 0;
    for (int i = 0; i < 13; ++i)
      wrong += v[i] != size_ * (step * 100 + i) + size_ * (size_ - 1) / 2;
    EXPECT_EQ(wrong, 0) << "step " << step;
  }
}

// One allreduce_async per tensor, step after step, as a trainer without groups submits its
// gradients: from the second step on the tensors go through their lanes (runtime/tensor_queue.h).
// Mixed dtypes, ops and scale factors, in place and out of place, values that change every step,
// another submission order on odd ranks, a tensor reshaped and one given another op at step 4
// (renegotiated, then in their lanes again), one submitted only every other step, and a name
// reused at once after its wait. Registered again with HVD_CACHE_CAPACITY=8 (test_allreduce.lanes):
// then the cache evicts every step, and lanes close and open under the submissions.
TEST_F(Allreduce, PerTensorStepsThroughLanes) {
  const int rank = hvd::rank(), size = hvd::size();
  const int tensors = 40;
  for (int step = 0; step < 8; ++step) {
    struct T {
      std::string name;
      DataType dtype;
      ReduceOp op;
      double prescale, postscale;
      bool in_place;
      Buffer in, out;
      hvd::Handle handle;
    };
    std::vector<T> ts;
    for (int k = 0; k < tensors; ++k) {
      if (k == 13 && step % 2 == 1) continue;  // every other step only
      T t;
      t.name = "lanes." + std::to_string(k);
      t.dtype = k % 5 == 1   ? DataType::kFloat64
                : k % 5 == 3 ? DataType::kInt32
                             : DataType::kFloat32;
      t.op = k % 7 == 2 ? ReduceOp::kMax : k % 7 == 4 ? ReduceOp::kAverage : ReduceOp::kSum;
      if (k == 9 && step >= 4) t.op = ReduceOp::kMin;
      const bool scaled = k % 11 == 5 && t.dtype != DataType::kInt32 && t.op == ReduceOp::kSum;
      t.prescale = scaled ? 2.0 : 1.0;
      t.postscale = scaled ? 0.5 : 1.0;
      t.in_place = k % 3 == 0;
      int64_t n = 1 + (k * 37) % 300;
      if (k == 7 && step >= 4) n += 5;  // reshaped
      const int64_t shift = step * 3 + k;
      t.in = Buffer(t.dtype, n);
      t.in.fill([&](int64_t i) { return reduce_contrib(t.op, t.dtype, rank, size, i + shift); });
      if (!t.in_place) {
        t.out = Buffer(t.dtype, n);
        t.out.fill([](int64_t) { return 99; });
      }
      ts.push_back(std::move(t));
    }
    const std::string label = "lanes step " + std::to_string(step);
    {
      Watchdog w(label);
      for (size_t j = 0; j < ts.size(); ++j) {
        T& t = ts[rank % 2 ? ts.size() - 1 - j : j];
        hvd::TensorRef in = t.in.ref();
        hvd::TensorRef out = t.in_place ? in : t.out.ref();
        t.handle = enqueue(
            [&] { return hvd::allreduce_async(in, out, t.name, t.op, t.prescale, t.postscale); },
            t.name);
      }
      for (T& t : ts) wait_ok(t.handle, label + " " + t.name);
      // The same name again right after its wait, alone.
      T& first = ts.front();
      hvd::TensorRef again = first.in.ref();
      hvd::Handle h = enqueue(
          [&] {
            return hvd::allreduce_async(again, again, "lanes.again", ReduceOp::kSum, 1.0, 1.0);
          },
          "lanes.again");
      wait_ok(h, label + " lanes.again");
    }
    for (T& t : ts) {
      const int k = std::stoi(t.name.substr(6));
      const int64_t shift = step * 3 + k;
      const Buffer& result = t.in_place ? t.in : t.out;
      if (&t == &ts.front()) continue;  // reduced twice (lanes.again); checked below
      check_values(
          result,
          [&](int64_t i) {
            return reduce_expected(t.op, t.dtype, size, i + shift, t.prescale, t.postscale);
          },
          label + " " + t.name, tolerance(t.op, t.dtype));
    }
    // ts.front() (lanes.0: float32 sum, in place): reduced once by its own name, then again.
    const int64_t shift0 = step * 3;
    check_values(
        ts.front().in,
        [&](int64_t i) {
          return size * reduce_expected(ReduceOp::kSum, DataType::kFloat32, size, i + shift0, 1, 1);
        },
        label + " lanes.0 then lanes.again");
  }
}

// The vector/span convenience layer: blocking allreduce (default average) and the span overload.
TEST_F(Allreduce, ConvenienceVectorAndSpan) {
  std::vector<float> f(1001);
  for (int i = 0; i < 1001; ++i)
    f[i] =
        static_cast<float>(reduce_contrib(ReduceOp::kAverage, DataType::kFloat32, rank_, size_, i));
  try {
    Watchdog w("hvd::allreduce(vector)");
    hvd::allreduce(f, "ar.vector");  // kAverage by default
  } catch (const std::exception& e) {
    ADD_FAILURE() << "hvd::allreduce(vector) threw: " << e.what();
  }
  check_values(
      DataType::kFloat32, f.data(), 1001,
      [&](int64_t i) {
        return reduce_expected(ReduceOp::kAverage, DataType::kFloat32, size_, i, 1, 1);
      },
      "ar.vector");

  std::vector<uint8_t> u(7);
  for (int i = 0; i < 7; ++i)
    u[i] = static_cast<uint8_t>(reduce_contrib(ReduceOp::kMax, DataType::kUInt8, rank_, size_, i));
  hvd::Handle h = enqueue(
      [&] { return hvd::allreduce_async(std::span<uint8_t>(u), "ar.span", ReduceOp::kMax); },
      "ar.span");
  {
    Watchdog w("ar.span");
    wait_ok(h, "ar.span");
  }
  EXPECT_TRUE(h.ready());
  check_values(
      DataType::kUInt8, u.data(), 7,
      [&](int64_t i) { return reduce_expected(ReduceOp::kMax, DataType::kUInt8, size_, i, 1, 1); },
      "ar.span");

  std::vector<double> empty;
  try {
    Watchdog w("hvd::allreduce(empty vector)");
    hvd::allreduce(empty, "ar.vector.empty", ReduceOp::kSum);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "hvd::allreduce(empty vector) threw: " << e.what();
  }
  EXPECT_TRUE(empty.empty());
}

// ---- grouped_allreduce --------------------------------------------------------------------------

// One group per dtype holding a tensor of every size; values differ per tensor of the group.
void run_grouped(ReduceOp op, const std::vector<int64_t>& sizes, const std::string& tag) {
  const int rank = hvd::rank(), size = hvd::size();
  struct Group {
    std::string name;
    DataType dtype;
    std::vector<Buffer> in, out;
    hvd::Handle handle;
  };
  std::vector<Group> groups;
  for (DataType t : all_dtypes()) {
    Group g;
    g.name = "grouped." + tag + "." + type_str(t);
    g.dtype = t;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      Buffer in(t, sizes[k]);
      in.fill([&](int64_t i) {
        return reduce_contrib(op, t, rank, size, i + 3 * static_cast<int64_t>(k));
      });
      Buffer out(t, sizes[k]);
      out.fill([](int64_t) { return 7; });
      g.in.push_back(std::move(in));
      g.out.push_back(std::move(out));
    }
    groups.push_back(std::move(g));
  }
  {
    Watchdog w("grouped_allreduce " + tag);
    for (Group& g : groups) {
      std::vector<hvd::TensorRef> ins, outs;
      for (std::size_t k = 0; k < g.in.size(); ++k) {
        ins.push_back(g.in[k].ref());
        outs.push_back(g.out[k].ref());
      }
      g.handle =
          enqueue([&] { return hvd::grouped_allreduce_async(ins, outs, g.name, op); }, g.name);
    }
    for (Group& g : groups) wait_ok(g.handle, g.name);
  }
  for (Group& g : groups) {
    if (!g.handle.valid()) continue;
    for (std::size_t k = 0; k < g.out.size(); ++k) {
      check_values(
          g.out[k],
          [&](int64_t i) {
            return reduce_expected(op, g.dtype, size, i + 3 * static_cast<int64_t>(k), 1, 1);
          },
          g.name + "[" + std::to_string(k) + "]", tolerance(op, g.dtype));
    }
  }
}

// A group repeated step after step, as a trainer's gradients are: the first step negotiates its
// members through rank 0, later steps run the group as one cached unit (runtime/group_unit.h),
// one batch per run of members with the same dtype. Mixed dtypes, an empty member, an in-place
// member, values that change every step, a member reshaped at step 3 (the group goes the slow
// way again, then hits as the new unit), and an ungrouped tensor beside the group.
TEST_F(Allreduce, GroupedRepeatsAsOneUnitThroughReshapes) {
  const int rank = hvd::rank(), size = hvd::size();
  const std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat32, DataType::kFloat64,
                                        DataType::kInt32,   DataType::kFloat32, DataType::kInt64};
  for (int step = 0; step < 6; ++step) {
    std::vector<int64_t> sizes = {5, 0, 7, 3, 1024, 2};
    if (step >= 3) sizes[2] = 11;  // reshaped from step 3 on
    const int64_t shift = 10 * step;
    std::vector<Buffer> in, out;
    for (size_t k = 0; k < dtypes.size(); ++k) {
      Buffer b(dtypes[k], sizes[k]);
      b.fill([&](int64_t i) {
        return reduce_contrib(ReduceOp::kSum, dtypes[k], rank, size,
                              i + shift + static_cast<int64_t>(k));
      });
      in.push_back(std::move(b));
      Buffer o(dtypes[k], sizes[k]);
      o.fill([](int64_t) { return 7; });
      out.push_back(std::move(o));
    }
    std::vector<hvd::TensorRef> ins, outs;
    for (size_t k = 0; k < dtypes.size(); ++k) {
      ins.push_back(in[k].ref());
      outs.push_back(k == 3 ? in[k].ref() : out[k].ref());  // member 3 in place
    }
    Buffer lone(DataType::kFloat32, 9);
    lone.fill([&](int64_t i) {
      return reduce_contrib(ReduceOp::kSum, DataType::kFloat32, rank, size, i + shift);
    });
    const std::string label = "grouped.repeat step " + std::to_string(step);
    {
      Watchdog w(label);
      hvd::Handle g = enqueue(
          [&] { return hvd::grouped_allreduce_async(ins, outs, "grouped.repeat", ReduceOp::kSum); },
          "grouped.repeat");
      hvd::Handle l = enqueue(
          [&] {
            return hvd::allreduce_async(lone.ref(), lone.ref(), "grouped.repeat.lone",
                                        ReduceOp::kSum);
          },
          "grouped.repeat.lone");
      wait_ok(g, label);
      wait_ok(l, label + " (lone)");
    }
    for (size_t k = 0; k < dtypes.size(); ++k)
      check_values(
          k == 3 ? in[k] : out[k],
          [&](int64_t i) {
            return reduce_expected(ReduceOp::kSum, dtypes[k], size,
                                   i + shift + static_cast<int64_t>(k), 1, 1);
          },
          label + " member " + std::to_string(k), tolerance(ReduceOp::kSum, dtypes[k]));
    check_values(
        lone,
        [&](int64_t i) {
          return reduce_expected(ReduceOp::kSum, DataType::kFloat32, size, i + shift, 1, 1);
        },
        label + " lone", tolerance(ReduceOp::kSum, DataType::kFloat32));
  }
}

TEST_F(Allreduce, GroupedSumEveryDtypeAndSize) { run_grouped(ReduceOp::kSum, all_sizes(), "sum"); }
TEST_F(Allreduce, GroupedAverageAndProduct) {
  run_grouped(ReduceOp::kAverage, {7, 1, 0, 33}, "average");
  run_grouped(ReduceOp::kProduct, {5, 1}, "product");
}

}  // namespace
}  // namespace hvdtest
