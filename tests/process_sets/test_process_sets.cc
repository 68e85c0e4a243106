// Process sets (hvd/process_set.h) on 1-4 and 6 ranks: every collective on the even and the odd
// ranks, on overlapping sets with operations of both in flight at once, the same name in two sets,
// and the errors (a list that differs between ranks, out of range, repeated, a set that exists, a
// removed set, a non-member's call, a root outside the set, a shape mismatch naming global ranks).
// Every rank checks its own values. The Horovod* tests translate Horovod's process-set tests
// (test/parallel/test_torch.py, test_horovod_*_process_sets): even and odd sets, each member's
// tensor made from its rank, the result compared with the members' values computed here.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/throws_with.h"

namespace {

class ProcessSets : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

std::vector<int> ranks_where(bool (*keep)(int)) {
  std::vector<int> out;
  for (int r = 0; r < hvd::size(); ++r)
    if (keep(r)) out.push_back(r);
  return out;
}

constexpr int kBusyOps = 30;  // BusySetBesideAnIdleRank (test_process_sets_runs.sh counts them)

bool even(int r) { return r % 2 == 0; }
bool odd(int r) { return r % 2 == 1; }

hvd::TensorRef ref(std::vector<float>& v, std::vector<int64_t> shape) {
  return hvd::TensorRef(v.data(), hvd::DataType::kFloat32, std::move(shape));
}

using hvdtest::throws_with;

// Every collective of one set, checked on each member against values computed from the members.
void check_collectives(const hvd::ProcessSet& set, const std::string& tag) {
  const std::vector<int>& members = set.ranks();
  const int n = set.size(), me = hvd::rank(), idx = set.rank();
  ASSERT_EQ(members[static_cast<size_t>(idx)], me);
  float sum = 0;
  for (int g : members) sum += static_cast<float>(g + 1);

  std::vector<float> a{static_cast<float>(me + 1), 2.0f};
  set.allreduce(ref(a, {2}), tag + ".sum", hvd::ReduceOp::kSum);
  EXPECT_EQ(a[0], sum);
  EXPECT_EQ(a[1], 2.0f * n);

  std::vector<float> avg{static_cast<float>(me + 1)};
  set.allreduce(ref(avg, {1}), tag + ".avg");
  EXPECT_FLOAT_EQ(avg[0], sum / n);

  std::vector<float> g1{static_cast<float>(me)}, g2(3, 1.0f);
  set.grouped_allreduce({ref(g1, {1}), ref(g2, {3})}, tag + ".group", hvd::ReduceOp::kSum);
  EXPECT_EQ(g1[0], sum - n);
  EXPECT_EQ(g2[2], static_cast<float>(n));

  // allgather: member i sends i+1 rows of its global rank.
  std::vector<float> rows(static_cast<size_t>(idx + 1), static_cast<float>(me));
  hvd::Tensor all = set.allgather(ref(rows, {idx + 1}), tag + ".gather");
  std::vector<float> want;
  for (int i = 0; i < n; ++i) want.insert(want.end(), static_cast<size_t>(i + 1), members[i]);
  EXPECT_EQ(all.to_vector<float>(), want);

  // broadcast from the last member, named by its global rank.
  const int root = members.back();
  std::vector<float> b{static_cast<float>(me * 10), 7.0f};
  set.broadcast(ref(b, {2}), root, tag + ".bcast");
  EXPECT_EQ(b[0], static_cast<float>(root * 10));

  // alltoall: one row to every member, worth (sender * 100 + receiver index).
  std::vector<float> out(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) out[static_cast<size_t>(j)] = static_cast<float>(me * 100 + j);
  hvd::Tensor got = set.alltoall(ref(out, {n}), {}, tag + ".a2a");
  std::vector<float> want_a2a;
  for (int i = 0; i < n; ++i) want_a2a.push_back(static_cast<float>(members[i] * 100 + idx));
  EXPECT_EQ(got.to_vector<float>(), want_a2a);

  // reducescatter: n rows of (global rank + 1); member i keeps row i of the sum.
  std::vector<float> rs(static_cast<size_t>(n), static_cast<float>(me + 1));
  hvd::Tensor mine = set.reducescatter(ref(rs, {n}), tag + ".rs", hvd::ReduceOp::kSum);
  EXPECT_EQ(mine.to_vector<float>(), std::vector<float>{sum});

  set.barrier();
}

}  // namespace

TEST_F(ProcessSets, GlobalSetIsTheWorld) {
  hvd::ProcessSet g = hvd::global_process_set();
  EXPECT_EQ(g.id(), 0);
  EXPECT_TRUE(g.included());
  EXPECT_EQ(g.rank(), hvd::rank());
  EXPECT_EQ(g.size(), hvd::size());
  std::vector<int> all(static_cast<size_t>(hvd::size()));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(g.ranks(), all);
  ASSERT_FALSE(hvd::process_sets().empty());
  EXPECT_EQ(hvd::process_sets()[0].id(), 0);
  check_collectives(g, "ps.global");
}

TEST_F(ProcessSets, EvenAndOddRanks) {
  if (hvd::size() < 2) {
    // {0} is the global set's list: refused on the one rank.
    EXPECT_TRUE(throws_with([] { hvd::add_process_set({0}); }, "has these ranks already"));
    return;
  }
  hvd::ProcessSet ev = hvd::add_process_set(ranks_where(even));
  hvd::ProcessSet od = hvd::add_process_set(ranks_where(odd));
  EXPECT_NE(ev.id(), od.id());
  EXPECT_EQ(ev.included(), hvd::rank() % 2 == 0);
  EXPECT_EQ(od.included(), hvd::rank() % 2 == 1);
  EXPECT_EQ(ev.rank(), hvd::rank() % 2 == 0 ? hvd::rank() / 2 : -1);
  const hvd::ProcessSet& mine = ev.included() ? ev : od;
  const hvd::ProcessSet& other = ev.included() ? od : ev;
  // The same names in both sets: two operations.
  check_collectives(mine, "ps.parity");
  // A call on a set this rank is not in fails here at once.
  std::vector<float> x{1};
  EXPECT_TRUE(throws_with([&] { other.allreduce(ref(x, {1}), "ps.nonmember"); },
                          "is not a member of process set"));
  EXPECT_EQ(hvd::process_sets().size(), 3u);
  hvd::remove_process_set(ev);
  hvd::remove_process_set(od);
  EXPECT_EQ(hvd::process_sets().size(), 1u);
  // A removed set, used again or removed again, fails on every rank.
  if (mine.included()) {
    EXPECT_TRUE(throws_with([&] { mine.allreduce(ref(x, {1}), "ps.removed"); }, "was removed"));
  }
  EXPECT_TRUE(throws_with([&] { hvd::remove_process_set(ev); }, "was removed already"));
  // The global set still works.
  std::vector<float> y{1};
  hvd::allreduce(ref(y, {1}), "ps.after", hvd::ReduceOp::kSum);
  EXPECT_EQ(y[0], static_cast<float>(hvd::size()));
}

// A busy set beside an idle rank (the last one): the set's all-reduces run in runs of the set's own
// cycles, not one per cycle of the global set, which pairs with the idle rank
// (ProcessSetTable::cycle). Here each member checks its values; test_process_sets_runs.sh counts
// the global set's cycles on rank 0's timeline while the set works.
TEST_F(ProcessSets, BusySetBesideAnIdleRank) {
  const int n = hvd::size();
  if (n < 2) GTEST_SKIP() << "needs a rank outside the set";
  std::vector<int> members(static_cast<size_t>(n - 1));
  std::iota(members.begin(), members.end(), 0);
  hvd::ProcessSet busy = hvd::add_process_set(members);
  EXPECT_EQ(busy.included(), hvd::rank() < n - 1);
  if (busy.included()) {
    for (int i = 0; i < kBusyOps; ++i) {
      std::vector<float> x{static_cast<float>(hvd::rank() + i)};
      busy.allreduce(ref(x, {1}), "ps.run." + std::to_string(i), hvd::ReduceOp::kSum);
      // The sum over members 0..n-2 of (rank + i).
      EXPECT_EQ(x[0], static_cast<float>((n - 1) * (n - 2) / 2 + (n - 1) * i)) << "op " << i;
    }
  }
  hvd::barrier();
  hvd::remove_process_set(busy);
}

// Two overlapping sets with operations of both, and of the global set, in flight at once.
TEST_F(ProcessSets, OverlappingSetsInFlightTogether) {
  const int n = hvd::size();
  if (n < 3) GTEST_SKIP() << "needs 3 ranks for two overlapping sets that differ from the world";
  hvd::ProcessSet low = hvd::add_process_set({0, 1});
  std::vector<int> high_ranks(static_cast<size_t>(n - 1));
  std::iota(high_ranks.begin(), high_ranks.end(), 1);
  hvd::ProcessSet high = hvd::add_process_set(high_ranks);  // 1..n-1: rank 1 in both
  const int me = hvd::rank();
  std::vector<float> a{static_cast<float>(me)}, b{static_cast<float>(me)}, c{1};
  std::vector<hvd::Handle> hs;
  for (int round = 0; round < 20; ++round) {
    a = {static_cast<float>(me + round)};
    b = {static_cast<float>(me + round)};
    c = {1};
    hs.clear();
    if (high.included())
      hs.push_back(high.allreduce_async(ref(b, {1}), ref(b, {1}), "ps.same", hvd::ReduceOp::kSum));
    hs.push_back(hvd::allreduce_async(ref(c, {1}), ref(c, {1}), "ps.world", hvd::ReduceOp::kSum));
    if (low.included())
      hs.push_back(low.allreduce_async(ref(a, {1}), ref(a, {1}), "ps.same", hvd::ReduceOp::kSum));
    for (auto& h : hs) h.wait();
    if (low.included()) {
      EXPECT_EQ(a[0], static_cast<float>(0 + 1 + 2 * round)) << round;
    }
    if (high.included()) {
      float want = 0;
      for (int r = 1; r < n; ++r) want += static_cast<float>(r + round);
      EXPECT_EQ(b[0], want) << round;
    }
    EXPECT_EQ(c[0], static_cast<float>(n));
  }
  hvd::remove_process_set(low);
  hvd::remove_process_set(high);
}

TEST_F(ProcessSets, ListsThatDifferFailOnEveryRank) {
  if (hvd::size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 0 asks for {0, 1}, the others for {0} (or {1}).
  std::vector<int> mine = hvd::rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{1};
  EXPECT_TRUE(throws_with([&] { hvd::add_process_set(mine); },
                          "Every rank must pass the same ranks to add_process_set()"));
  EXPECT_EQ(hvd::process_sets().size(), 1u);
}

TEST_F(ProcessSets, BadListsFailOnEveryRank) {
  const int n = hvd::size();
  EXPECT_TRUE(throws_with([&] { hvd::add_process_set({0, n}); }, "is out of range for"));
  EXPECT_TRUE(throws_with([&] { hvd::add_process_set({0, 0}); }, "is listed twice"));
  EXPECT_TRUE(throws_with([&] { hvd::add_process_set({}); }, "at least one rank"));
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::reverse(all.begin(), all.end());  // any order
  EXPECT_TRUE(throws_with([&] { hvd::add_process_set(all); }, "process set 0 has these ranks"));
  EXPECT_TRUE(
      throws_with([] { hvd::remove_process_set(hvd::global_process_set()); }, "cannot be removed"));
  hvd::ProcessSet empty;
  EXPECT_EQ(empty.id(), -1);
  std::vector<float> x{1};
  EXPECT_TRUE(throws_with([&] { empty.allreduce(ref(x, {1}), "ps.empty"); }, "is empty"));
  // The runtime is unharmed.
  hvd::allreduce(ref(x, {1}), "ps.still", hvd::ReduceOp::kSum);
  EXPECT_EQ(x[0], static_cast<float>(n));
}

TEST_F(ProcessSets, MismatchesInASetNameGlobalRanks) {
  if (hvd::size() < 3) GTEST_SKIP() << "needs a set of ranks 1 and 2";
  hvd::ProcessSet s = hvd::add_process_set({1, 2});
  if (s.included()) {
    // Rank 2 sends 3 elements, rank 1 sends 2: the message names global ranks 1 and 2.
    std::vector<float> v(static_cast<size_t>(hvd::rank()), 1.0f);
    EXPECT_TRUE(throws_with([&] { s.allreduce(ref(v, {hvd::rank()}), "ps.shape"); },
                            "rank 2 sent shape [2], rank 1 sent [1]"));
    // A root outside the set fails on both members.
    std::vector<float> b{1};
    EXPECT_TRUE(throws_with([&] { s.broadcast(ref(b, {1}), 0, "ps.root"); },
                            "root 0 is not a member of process set"));
  }
  hvd::remove_process_set(s);
}

// Horovod's test_horovod_allreduce_process_sets and friends, translated: even and odd sets, every
// dtype and 1-3 dimensions, each rank's tensor made from its rank; the result against the sum of
// the members' tensors.
TEST_F(ProcessSets, HorovodAllreduceAndBroadcastProcessSets) {
  if (hvd::size() < 2) GTEST_SKIP() << "Horovod's process-set tests need 2 ranks";
  hvd::ProcessSet ev = hvd::add_process_set(ranks_where(even));
  hvd::ProcessSet od = hvd::add_process_set(ranks_where(odd));
  const hvd::ProcessSet& set = hvd::rank() % 2 == 0 ? ev : od;
  for (int dim = 1; dim <= 3; ++dim) {
    std::vector<int64_t> shape(static_cast<size_t>(dim), 4);
    const size_t count = static_cast<size_t>(std::pow(4, dim));
    auto value = [](int rank, size_t i) { return static_cast<double>((rank + 1) * 3 + i % 7); };
    std::vector<double> t(count), want(count, 0.0);
    for (size_t i = 0; i < count; ++i) t[i] = value(hvd::rank(), i);
    for (int g : set.ranks())
      for (size_t i = 0; i < count; ++i) want[i] += value(g, i);
    set.allreduce(hvd::TensorRef(t.data(), hvd::DataType::kFloat64, shape),
                  "hvd.ps.allreduce." + std::to_string(dim), hvd::ReduceOp::kSum);
    EXPECT_EQ(t, want) << "dim " << dim;
    std::vector<int32_t> b(count, hvd::rank());
    const int root = set.ranks().front();
    set.broadcast(hvd::TensorRef(b.data(), hvd::DataType::kInt32, shape), root,
                  "hvd.ps.broadcast." + std::to_string(dim));
    EXPECT_EQ(b, std::vector<int32_t>(count, root)) << "dim " << dim;
  }
  hvd::remove_process_set(ev);
  hvd::remove_process_set(od);
}

// Horovod's test_horovod_allgather_process_sets, test_horovod_alltoall_process_sets,
// test_horovod_reducescatter_process_sets and test_horovod_grouped_allreduce_process_sets,
// translated: even and odd sets; a member's tensor is filled with its global rank (allgather: with
// its index in the set + 1 rows of 17 per dimension, as Horovod varies the first dimension);
// every result is checked against the members' values.
TEST_F(ProcessSets, HorovodGatherScatterGroupedProcessSets) {
  if (hvd::size() < 2) GTEST_SKIP() << "Horovod's process-set tests need 2 ranks";
  hvd::ProcessSet ev = hvd::add_process_set(ranks_where(even));
  hvd::ProcessSet od = hvd::add_process_set(ranks_where(odd));
  const hvd::ProcessSet& set = hvd::rank() % 2 == 0 ? ev : od;
  const int n = set.size(), idx = set.rank(), me = hvd::rank();
  const std::vector<int>& members = set.ranks();
  for (int dim = 1; dim <= 3; ++dim) {
    const std::string d = std::to_string(dim);
    // allgather: (idx + 1) x 17 x ... of the global rank.
    std::vector<int64_t> shape(static_cast<size_t>(dim), 17);
    shape[0] = idx + 1;
    int64_t row = 1;
    for (int k = 1; k < dim; ++k) row *= 17;
    std::vector<int32_t> mine(static_cast<size_t>((idx + 1) * row), me);
    hvd::Tensor all =
        set.allgather(hvd::TensorRef(mine.data(), hvd::DataType::kInt32, shape), "hvd.ps.ag." + d);
    std::vector<int32_t> want;
    for (int i = 0; i < n; ++i)
      want.insert(want.end(), static_cast<size_t>((i + 1) * row), members[i]);
    EXPECT_EQ(all.to_vector<int32_t>(), want) << "allgather dim " << dim;
    EXPECT_EQ(all.shape()[0], n * (n + 1) / 2);

    // alltoall: member j gets (j + 1) rows from every member, each row the sender's rank.
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int j = 0; j < n; ++j) {
      splits.push_back(j + 1);
      rows += j + 1;
    }
    std::vector<int64_t> a2a_shape(static_cast<size_t>(dim), 17);
    a2a_shape[0] = rows;
    std::vector<float> out(static_cast<size_t>(rows * row), static_cast<float>(me));
    std::vector<int64_t> received;
    hvd::Tensor got = set.alltoall(hvd::TensorRef(out.data(), hvd::DataType::kFloat32, a2a_shape),
                                   splits, "hvd.ps.a2a." + d, &received);
    std::vector<float> want_a2a;
    for (int i = 0; i < n; ++i)
      want_a2a.insert(want_a2a.end(), static_cast<size_t>((idx + 1) * row),
                      static_cast<float>(members[i]));
    EXPECT_EQ(got.to_vector<float>(), want_a2a) << "alltoall dim " << dim;
    EXPECT_EQ(received, std::vector<int64_t>(static_cast<size_t>(n), idx + 1));

    // reducescatter: n * 2 rows of the global rank, summed; member i keeps rows 2i, 2i+1.
    std::vector<int64_t> rs_shape(static_cast<size_t>(dim), 17);
    rs_shape[0] = 2 * n;
    std::vector<double> rs(static_cast<size_t>(2 * n * row), static_cast<double>(me));
    hvd::Tensor block =
        set.reducescatter(hvd::TensorRef(rs.data(), hvd::DataType::kFloat64, rs_shape),
                          "hvd.ps.rs." + d, hvd::ReduceOp::kSum);
    double sum = 0;
    for (int g : members) sum += g;
    EXPECT_EQ(block.to_vector<double>(), std::vector<double>(static_cast<size_t>(2 * row), sum))
        << "reducescatter dim " << dim;

    // grouped allreduce: three tensors of (global rank + k), averaged.
    std::vector<std::vector<float>> group(3, std::vector<float>(static_cast<size_t>(row)));
    std::vector<hvd::TensorRef> refs;
    for (int k = 0; k < 3; ++k) {
      std::fill(group[k].begin(), group[k].end(), static_cast<float>(me + k));
      refs.emplace_back(group[k].data(), hvd::DataType::kFloat32, std::vector<int64_t>{row});
    }
    set.grouped_allreduce(refs, "hvd.ps.grouped." + d);
    for (int k = 0; k < 3; ++k)
      EXPECT_FLOAT_EQ(group[k][0], static_cast<float>(sum / n + k)) << "grouped " << k;
  }
  hvd::remove_process_set(ev);
  hvd::remove_process_set(od);
}
