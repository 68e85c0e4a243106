// Every argument check of the public API (runtime/api.cc, "Argument checks"), one test per row of
// docs/errors.md, on every entry point it applies to.
//
// For a rank's own bad argument, ONE rank passes it (rank 0, then the last rank) and the others
// pass good arguments: EVERY rank must throw hvd::InvalidArgumentError within seconds, all with the
// same message, which is the expected text, matches exactly one row of docs/errors.md and repeats
// no prefix. Then good operations work (the messages are compared through an allgather). Bad names,
// which throw at once, are in test_validation_names.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"
#include "tests/errors/validation_util.h"

namespace hvdtest {
namespace {

using hvd::Device;
using hvd::TensorRef;

// ---- A bad tensor in every position of every entry point -------------------------------------

// Where the bad tensor goes.
enum class Slot {
  kAllreduceIn,
  kAllreduceOut,
  kGroupedIn,
  kGroupedOut,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter
};

struct SlotInfo {
  Slot slot;
  const char* label;
  const char* op;      // as the message names it
  const char* role;    // of the bad tensor
  const char* member;  // appended to the name for grouped members
};

const std::vector<SlotInfo>& slots() {
  static const std::vector<SlotInfo> v = {
      {Slot::kAllreduceIn, "allreduce_in", "allreduce", "the input", ""},
      {Slot::kAllreduceOut, "allreduce_out", "allreduce", "the output", ""},
      {Slot::kGroupedIn, "grouped_in", "allreduce", "input 1", ".1"},
      {Slot::kGroupedOut, "grouped_out", "allreduce", "output 1", ".1"},
      {Slot::kAllgather, "allgather", "allgather", "the input", ""},
      {Slot::kBroadcast, "broadcast", "broadcast", "the tensor", ""},
      {Slot::kAlltoall, "alltoall", "alltoall", "the input", ""},
      {Slot::kReducescatter, "reducescatter", "reducescatter", "the input", ""},
  };
  return v;
}

// Good float32 buffers for the other arguments, alive for one operation.
struct Buffers {
  explicit Buffers(int size)
      : rows(2 * size), a(static_cast<size_t>(rows), 1.0f), b(a), c(a), d(a) {}
  int64_t rows;  // divides among the ranks (alltoall without splits)
  std::vector<float> a, b, c, d;
  TensorRef ref(std::vector<float>& v) { return TensorRef(v.data(), DataType::kFloat32, {rows}); }
};

hvd::Handle run_slot(Slot slot, const std::string& name, bool bad, const TensorRef& bad_tensor,
                     Buffers& buf) {
  auto pick = [&](std::vector<float>& v) { return bad ? bad_tensor : buf.ref(v); };
  switch (slot) {
    case Slot::kAllreduceIn:
      return hvd::allreduce_async(pick(buf.a), buf.ref(buf.b), name, ReduceOp::kSum);
    case Slot::kAllreduceOut:
      return hvd::allreduce_async(buf.ref(buf.a), pick(buf.b), name, ReduceOp::kSum);
    case Slot::kGroupedIn:
      return hvd::grouped_allreduce_async({buf.ref(buf.a), pick(buf.b)},
                                          {buf.ref(buf.c), buf.ref(buf.d)}, name, ReduceOp::kSum);
    case Slot::kGroupedOut:
      return hvd::grouped_allreduce_async({buf.ref(buf.a), buf.ref(buf.b)},
                                          {buf.ref(buf.c), pick(buf.d)}, name, ReduceOp::kSum);
    case Slot::kAllgather:
      return hvd::allgather_async(pick(buf.a), name);
    case Slot::kBroadcast:
      return hvd::broadcast_async(pick(buf.a), 0, name);
    case Slot::kAlltoall:
      return hvd::alltoall_async(pick(buf.a), {}, name);
    case Slot::kReducescatter:
      return hvd::reducescatter_async(pick(buf.a), name, ReduceOp::kSum);
  }
  return {};
}

// One bad tensor, in every slot, on rank 0 and on the last rank. `reason(role)` is the expected
// reason, or (when `prefix_only`) the start of it.
void bad_tensor_everywhere(const std::string& check,
                           const std::function<TensorRef(void* data)>& make_bad,
                           const std::function<std::string(const std::string& role)>& reason) {
  for (const auto& s : slots()) {
    for (int bad_rank : bad_ranks()) {
      const std::string name = "v." + check + "." + s.label + ".r" + std::to_string(bad_rank);
      Buffers buf(hvd::size());
      std::vector<float> backing(64, 1.0f);
      const TensorRef bad = make_bad(backing.data());
      expect_everywhere(
          name, bad_rank, [&](bool is_bad) { return run_slot(s.slot, name, is_bad, bad, buf); },
          reported(s.op, name + s.member, bad_rank, reason(s.role)));
    }
  }
}

class Validation : public HvdTest {};

TEST_F(Validation, CatalogueLoads) { EXPECT_GT(catalogue().size(), 40u); }

TEST_F(Validation, UnknownDtype) {
  bad_tensor_everywhere(
      "dtype", [](void* p) { return TensorRef(p, static_cast<DataType>(42), {4}); },
      [](const std::string& role) {
        return role +
               " has dtype 42, which is not a DataType: pass one of uint8, int8, int32, int64, "
               "float16, "
               "bfloat16, float32, float64.";
      });
}

// (A Device's kind is an unscoped enum with two values: any other kind is undefined behaviour in
// the caller already, so only the index can be wrong.)
TEST_F(Validation, NegativeDeviceIndex) {
  bad_tensor_everywhere(
      "device_index",
      [](void* p) { return TensorRef(p, DataType::kFloat32, {4}, Device::cuda(-1)); },
      [](const std::string& role) {
        return role +
               " is on cuda:-1, which is not a device: pass Device::cpu() or Device::cuda(i) with "
               "i >= 0.";
      });
}

TEST_F(Validation, NegativeDimension) {
  bad_tensor_everywhere(
      "negative",
      [](void* p) {
        return TensorRef(p, DataType::kFloat32, {2, -3});
      },
      [](const std::string& role) {
        return role + " has shape [2,-3] with a negative dimension.";
      });
}

TEST_F(Validation, SizeOverflow) {
  // Elements overflow int64 (2^40 * 2^30) ...
  bad_tensor_everywhere(
      "overflow_elements",
      [](void* p) {
        return TensorRef(p, DataType::kFloat32, {int64_t{1} << 40, int64_t{1} << 30});
      },
      [](const std::string& role) {
        return role +
               " has shape [1099511627776,1073741824] of float32: the product of its non-zero "
               "dimensions and the "
               "element size does not fit in 64 bits.";
      });
  // ... or only the bytes do (2^61 float64 elements) ...
  bad_tensor_everywhere(
      "overflow_bytes",
      [](void* p) { return TensorRef(p, DataType::kFloat64, {int64_t{1} << 61}); },
      [](const std::string& role) {
        return role +
               " has shape [2305843009213693952] of float64: the product of its non-zero "
               "dimensions and the "
               "element size does not fit in 64 bits.";
      });
  // ... or the non-zero dimensions do, even though another dimension is 0 (no elements).
  bad_tensor_everywhere(
      "overflow_empty",
      [](void* p) {
        return TensorRef(p, DataType::kFloat32, {0, int64_t{1} << 62});
      },
      [](const std::string& role) {
        return role +
               " has shape [0,4611686018427387904] of float32: the product of its non-zero "
               "dimensions and the "
               "element size does not fit in 64 bits.";
      });
  bad_tensor_everywhere(
      "overflow_partial",
      [](void* p) {
        return TensorRef(p, DataType::kUInt8, {INT64_MAX, 2, 0});
      },
      [](const std::string& role) {
        return role +
               " has shape [9223372036854775807,2,0] of uint8: the product of its non-zero "
               "dimensions and the "
               "element size does not fit in 64 bits.";
      });
}

TEST_F(Validation, NullDataPointer) {
  bad_tensor_everywhere(
      "null", [](void*) { return TensorRef(nullptr, DataType::kFloat32, {4}); },
      [](const std::string& role) { return role + " has 4 elements but a null data pointer."; });
}

TEST_F(Validation, MisalignedDataPointer) {
  bad_tensor_everywhere(
      "misaligned",
      [](void* p) { return TensorRef(static_cast<char*>(p) + 2, DataType::kFloat32, {4}); },
      [](const std::string& role) {
        return role +
               "'s data pointer is not a multiple of 4 bytes, the size of its float32 elements: "
               "pass aligned "
               "memory.";
      });
}

// A CUDA tensor on a device this process was not given: on a CPU machine "has no CUDA device", on a
// GPU machine "was given cuda:N". Either way every rank fails (issue 9, 6b: the prefix once).
TEST_F(Validation, CudaTensorNotOnThisRanksGpu) {
  for (int bad_rank : bad_ranks()) {
    const std::string name = "v.cuda.r" + std::to_string(bad_rank);
    std::vector<float> data(4, 1.0f);
    const bool bad = rank_ == bad_rank;
    std::string msg;
    try {
      Watchdog w(name, 60);
      // cuda:1000 exists nowhere; the data pointer is never touched.
      hvd::Handle h = hvd::allreduce_async(
          TensorRef(data.data(), DataType::kFloat32, {4}, bad ? Device::cuda(1000) : Device::cpu()),
          TensorRef(data.data(), DataType::kFloat32, {4}, bad ? Device::cuda(1000) : Device::cpu()),
          name, ReduceOp::kSum);
      h.wait();
      ADD_FAILURE() << name << ": no error on rank " << rank_;
    } catch (const hvd::InvalidArgumentError& e) {
      msg = e.what();
    }
    const std::string prefix = "allreduce of '" + name + "' failed: rank " +
                               std::to_string(bad_rank) +
                               ": the tensor is on cuda:1000 but this process ";
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    expect_catalogued(msg, name);
    const auto all = gather_messages(msg, name);
    for (const auto& m : all) EXPECT_EQ(m, msg) << name;
    expect_still_usable(name);
  }
}

// A name the response cache knows (two good rounds) fails on every rank when one rank passes a bad
// argument under it, and works again afterwards.
TEST_F(Validation, BadArgumentUnderACachedName) {
  for (int bad_rank : bad_ranks()) {
    const std::string name = "v.cached.r" + std::to_string(bad_rank);
    std::vector<float> data(4, 1.0f);
    auto good_round = [&](const char* when) {
      std::fill(data.begin(), data.end(), 1.0f);
      Watchdog w(name + when, 60);
      hvd::Handle h = hvd::allreduce_async(std::span<float>(data), name, ReduceOp::kSum);
      EXPECT_TRUE(wait_ok(h, name + when));
      EXPECT_EQ(data, std::vector<float>(4, static_cast<float>(size_))) << when;
    };
    good_round(" (first)");
    good_round(" (cached)");
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          return hvd::allreduce_async(bad ? TensorRef(nullptr, DataType::kFloat32, {4})
                                          : TensorRef(data.data(), DataType::kFloat32, {4}),
                                      TensorRef(data.data(), DataType::kFloat32, {4}), name,
                                      ReduceOp::kSum);
        },
        reported("allreduce", name, bad_rank, "the input has 4 elements but a null data pointer."));
    good_round(" (after)");
  }
}

// ---- the operations' own parameters ---------------------------------------------------------

TEST_F(Validation, UnknownReduceOp) {
  for (int bad_rank : bad_ranks()) {
    std::vector<float> a(8, 1.0f), b(a);
    const auto op_for = [](bool bad) { return bad ? static_cast<ReduceOp>(9) : ReduceOp::kSum; };
    const std::string reason =
        "reduce op 9 is not a ReduceOp: pass one of average, sum, min, max, product.";
    const std::string r = ".r" + std::to_string(bad_rank);
    expect_everywhere(
        "v.op.allreduce" + r, bad_rank,
        [&](bool bad) {
          return hvd::allreduce_async(TensorRef(a.data(), DataType::kFloat32, {4}),
                                      TensorRef(a.data(), DataType::kFloat32, {4}),
                                      "v.op.allreduce" + r, op_for(bad));
        },
        reported("allreduce", "v.op.allreduce" + r, bad_rank, reason));
    expect_everywhere(
        "v.op.grouped" + r, bad_rank,
        [&](bool bad) {
          TensorRef t(a.data(), DataType::kFloat32, {4}), u(b.data(), DataType::kFloat32, {4});
          return hvd::grouped_allreduce_async({t, u}, {t, u}, "v.op.grouped" + r, op_for(bad));
        },
        reported("allreduce", "v.op.grouped" + r + ".0", bad_rank, reason));
    expect_everywhere(
        "v.op.reducescatter" + r, bad_rank,
        [&](bool bad) {
          return hvd::reducescatter_async(TensorRef(a.data(), DataType::kFloat32, {4}),
                                          "v.op.reducescatter" + r, op_for(bad));
        },
        reported("reducescatter", "v.op.reducescatter" + r, bad_rank, reason));
  }
}

TEST_F(Validation, NonFiniteScale) {
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  for (int bad_rank : bad_ranks()) {
    struct Case {
      const char* label;
      double pre, post;
      const char* text;
    };
    for (const Case& k : {Case{"nan", nan, 1.0, "prescale nan and postscale 1"},
                          Case{"inf", 1.0, -inf, "prescale 1 and postscale -inf"}}) {
      const double pre = k.pre, post = k.post;
      const std::string label = k.label, text = k.text;
      std::vector<float> a(4, 1.0f);
      const std::string name = "v.scale." + label + ".r" + std::to_string(bad_rank);
      expect_everywhere(
          name, bad_rank,
          [&](bool bad) {
            TensorRef t(a.data(), DataType::kFloat32, {4});
            return hvd::allreduce_async(t, t, name, ReduceOp::kSum, bad ? pre : 1.0,
                                        bad ? post : 1.0);
          },
          reported("allreduce", name, bad_rank, text + " must both be finite numbers."));
    }
  }
}

TEST_F(Validation, ScalarHasNoFirstDimension) {
  for (int bad_rank : bad_ranks()) {
    const std::string r = ".r" + std::to_string(bad_rank);
    std::vector<float> a(static_cast<size_t>(2 * size_), 1.0f);
    auto t = [&](bool bad) {
      return bad ? TensorRef(a.data(), DataType::kFloat32, {})
                 : TensorRef(a.data(), DataType::kFloat32, {2 * size_});
    };
    auto reason = [](const char* verb) {
      return std::string("a scalar has no first dimension to ") + verb +
             " along; pass shape {1} instead of {}.";
    };
    expect_everywhere(
        "v.scalar.allgather" + r, bad_rank,
        [&](bool bad) { return hvd::allgather_async(t(bad), "v.scalar.allgather" + r); },
        reported("allgather", "v.scalar.allgather" + r, bad_rank, reason("gather")));
    expect_everywhere(
        "v.scalar.alltoall" + r, bad_rank,
        [&](bool bad) { return hvd::alltoall_async(t(bad), {}, "v.scalar.alltoall" + r); },
        reported("alltoall", "v.scalar.alltoall" + r, bad_rank, reason("split")));
    expect_everywhere(
        "v.scalar.reducescatter" + r, bad_rank,
        [&](bool bad) { return hvd::reducescatter_async(t(bad), "v.scalar.reducescatter" + r); },
        reported("reducescatter", "v.scalar.reducescatter" + r, bad_rank, reason("scatter")));
  }
}

TEST_F(Validation, RootOutOfRange) {
  for (int bad_rank : bad_ranks()) {
    for (int root : {size_, -1, INT32_MAX}) {
      const std::string name = "v.root." + std::to_string(root) + ".r" + std::to_string(bad_rank);
      std::vector<int32_t> data(3, 1);
      expect_everywhere(
          name, bad_rank,
          [&](bool bad) {
            return hvd::broadcast_async(TensorRef(data.data(), DataType::kInt32, {3}),
                                        bad ? root : 0, name);
          },
          reported("broadcast", name, bad_rank,
                   "root " + std::to_string(root) + " is out of range for " +
                       std::to_string(size_) + " ranks: pass a root from 0 to " +
                       std::to_string(size_ - 1) + "."));
    }
  }
}

// The std::vector form calls broadcast_async: same check, same message.
TEST_F(Validation, RootOutOfRangeThroughTheVectorForm) {
  for (int bad_rank : bad_ranks()) {
    const std::string name = "v.root.vector.r" + std::to_string(bad_rank);
    std::vector<double> data(3, 1.0);
    std::string msg;
    try {
      Watchdog w(name, 60);
      hvd::broadcast(data, rank_ == bad_rank ? size_ : 0, name);
      ADD_FAILURE() << name << ": no error";
    } catch (const hvd::InvalidArgumentError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg, reported("broadcast", name, bad_rank,
                            "root " + std::to_string(size_) + " is out of range for " +
                                std::to_string(size_) + " ranks: pass a root from 0 to " +
                                std::to_string(size_ - 1) + "."));
    expect_catalogued(msg, name);
    expect_still_usable(name);
  }
}

// Splits that are bad on one rank only (make(size)); the good ranks pass equal parts of 2 rows.
// reason(size, bad splits) is the expected reason.
void bad_splits(
    const std::string& label, const std::function<std::vector<int64_t>(int size)>& make,
    const std::function<std::string(int size, const std::vector<int64_t>& splits)>& reason,
    bool vector_form = false) {
  constexpr int64_t kRows = 2;  // per rank
  for (int bad_rank : bad_ranks()) {
    const int n = hvd::size();
    const std::string name = "v.splits." + label + ".r" + std::to_string(bad_rank);
    std::vector<float> data(static_cast<size_t>(kRows * n), 1.0f);
    const auto splits_for = [&](bool bad) {
      return bad ? make(n) : std::vector<int64_t>(static_cast<size_t>(n), kRows);
    };
    const std::string expected = reported("alltoall", name, bad_rank, reason(n, make(n)));
    if (!vector_form) {
      expect_everywhere(
          name, bad_rank,
          [&](bool bad) {
            return hvd::alltoall_async(TensorRef(data.data(), DataType::kFloat32, {kRows * n}),
                                       splits_for(bad), name);
          },
          expected);
      continue;
    }
    std::string msg;
    try {
      Watchdog w(name, 60);
      hvd::alltoall(data, splits_for(hvd::rank() == bad_rank), name);
      ADD_FAILURE() << name << ": no error";
    } catch (const hvd::InvalidArgumentError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg, expected);
    expect_catalogued(msg, name);
    expect_still_usable(name);
  }
}

// "its splits [...] add up to <sum>, but ...", the sum computed here independently.
std::string does_not_add_up(int n, const std::vector<int64_t>& s) {
  long double sum = 0;
  for (int64_t v : s) sum += static_cast<long double>(v);
  const std::string total = sum > static_cast<long double>(INT64_MAX)
                                ? "more than 9223372036854775807"
                                : std::to_string(static_cast<int64_t>(sum));
  return "its splits " + hvd::shape_string(s) + " add up to " + total + ", but its tensor has " +
         std::to_string(2 * n) + " rows in its first dimension.";
}

TEST_F(Validation, SplitsWithTheWrongCount) {
  bad_splits(
      "count",
      [](int n) {
        std::vector<int64_t> s(static_cast<size_t>(n) + 1, 0);
        s[0] = 2 * n;
        return s;
      },
      [](int n, const std::vector<int64_t>&) {
        return "it gave " + std::to_string(n + 1) + " splits for " + std::to_string(n) +
               " ranks: pass one split per rank.";
      });
}

TEST_F(Validation, NegativeSplit) {
  bad_splits(
      "negative",
      [](int n) {
        std::vector<int64_t> s(static_cast<size_t>(n), 2);
        s[0] = -1;
        if (n > 1) s.back() += 3;  // still adds up
        return s;
      },
      [](int, const std::vector<int64_t>& s) {
        return "it gave a negative split " + hvd::shape_string(s) + ": pass splits >= 0.";
      });
}

TEST_F(Validation, SplitsThatDoNotAddUp) {
  bad_splits(
      "sum",
      [](int n) {
        std::vector<int64_t> s(static_cast<size_t>(n), 2);
        s[0] = 3;
        return s;
      },
      does_not_add_up);
}

TEST_F(Validation, SplitsThatOverflow) {
  // Two splits of INT64_MAX overflow int64 (one rank: a single huge split).
  bad_splits(
      "overflow",
      [](int n) {
        std::vector<int64_t> s(static_cast<size_t>(n), 0);
        s[0] = INT64_MAX;
        s.back() = INT64_MAX;
        return s;
      },
      does_not_add_up);
}

TEST_F(Validation, SplitsThroughTheVectorForm) {
  bad_splits(
      "vector",
      [](int n) {
        std::vector<int64_t> s(static_cast<size_t>(n), 2);
        s[0] = 3;
        return s;
      },
      does_not_add_up,
      /*vector_form=*/true);
}

TEST_F(Validation, EqualPartsThatDoNotDivide) {
  if (size_ < 2) GTEST_SKIP() << "every row count divides by one rank";
  for (int bad_rank : bad_ranks()) {
    const std::string name = "v.splits.equal.r" + std::to_string(bad_rank);
    std::vector<float> data(static_cast<size_t>(2 * size_ + 1), 1.0f);
    expect_everywhere(
        name, bad_rank,
        [&](bool bad) {
          return hvd::alltoall_async(
              TensorRef(data.data(), DataType::kFloat32, {bad ? 2 * size_ + 1 : 2 * size_}), {},
              name);
        },
        reported("alltoall", name, bad_rank,
                 "no splits were given and the first dimension " + std::to_string(2 * size_ + 1) +
                     " does not divide evenly among " + std::to_string(size_) +
                     " ranks; pass splits."));
  }
}

}  // namespace
}  // namespace hvdtest
