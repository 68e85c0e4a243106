// send/recv (hvd/collectives.h, hvd/process_set.h) on 1-4 ranks: a ring exchange, many tags in
// flight at once received in another order, sends with one tag arriving in order, a receive
// buffer that does not match what was sent (both ranks fail with one message, the others go on),
// bad peers, and exchanges inside a process set by the set's ranks. Every rank checks its own
// values.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/throws_with.h"

namespace {

class PointToPoint : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
};

hvd::TensorRef ref(std::vector<float>& v) {
  return hvd::TensorRef(v.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(v.size())});
}

using hvdtest::throws_with;

}  // namespace

TEST_F(PointToPoint, RingExchange) {
  const int n = hvd::size(), me = hvd::rank();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (int round = 0; round < 10; ++round) {
    std::vector<float> out(5, static_cast<float>(me * 1000 + round)), in(5, -1.0f);
    hvd::Handle s = hvd::send_async(ref(out), next);
    hvd::Handle r = hvd::recv_async(ref(in), prev);
    r.wait();
    s.wait();
    EXPECT_EQ(in, std::vector<float>(5, static_cast<float>(prev * 1000 + round))) << round;
  }
}

// Sixteen tags in flight from every rank to the next, received in the reverse order.
TEST_F(PointToPoint, ManyTagsInFlight) {
  const int n = hvd::size(), me = hvd::rank();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  constexpr int kTags = 16;
  std::vector<std::vector<float>> out(kTags), in(kTags);
  std::vector<hvd::Handle> handles;
  for (int tag = 0; tag < kTags; ++tag) {
    out[tag].assign(static_cast<size_t>(tag + 1), static_cast<float>(me * 100 + tag));
    handles.push_back(hvd::send_async(ref(out[tag]), next, tag));
  }
  for (int tag = kTags - 1; tag >= 0; --tag) {
    in[tag].assign(static_cast<size_t>(tag + 1), -1.0f);
    handles.push_back(hvd::recv_async(ref(in[tag]), prev, tag));
  }
  for (auto& h : handles) h.wait();
  for (int tag = 0; tag < kTags; ++tag)
    EXPECT_EQ(in[tag], std::vector<float>(static_cast<size_t>(tag + 1),
                                          static_cast<float>(prev * 100 + tag)))
        << "tag " << tag;
}

// Three sends with one tag arrive in the order they were sent.
TEST_F(PointToPoint, OneTagKeepsOrder) {
  if (hvd::size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (hvd::rank() == 0) {
    std::vector<float> a{1}, b{2}, c{3};
    std::vector<hvd::Handle> hs{hvd::send_async(ref(a), 1, 7), hvd::send_async(ref(b), 1, 7),
                                hvd::send_async(ref(c), 1, 7)};
    for (auto& h : hs) h.wait();
  } else if (hvd::rank() == 1) {
    std::vector<float> x{0}, y{0}, z{0};
    hvd::recv(ref(x), 0, 7);
    hvd::recv(ref(y), 0, 7);
    hvd::recv(ref(z), 0, 7);
    EXPECT_EQ(x[0], 1.0f);
    EXPECT_EQ(y[0], 2.0f);
    EXPECT_EQ(z[0], 3.0f);
  }
  hvd::barrier();
}

// Rank 1 receives 4 elements where rank 0 sent 8: both fail with one message, nothing is written;
// the other ranks are not involved; the next exchange works.
TEST_F(PointToPoint, MismatchedBufferFailsBothEnds) {
  if (hvd::size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string want = "rank 1 receives into float32 [4] but rank 0 sent float32 [8]";
  if (hvd::rank() == 0) {
    std::vector<float> v(8, 1.0f);
    EXPECT_TRUE(throws_with([&] { hvd::send(ref(v), 1); }, want));
  } else if (hvd::rank() == 1) {
    std::vector<float> v(4, -1.0f);
    EXPECT_TRUE(throws_with([&] { hvd::recv(ref(v), 0); }, want));
    EXPECT_EQ(v, std::vector<float>(4, -1.0f));
  }
  // A dtype mismatch, the other way round.
  if (hvd::rank() == 1) {
    std::vector<double> d(3, 2.0);
    EXPECT_TRUE(
        throws_with([&] { hvd::send(hvd::TensorRef(d.data(), hvd::DataType::kFloat64, {3}), 0); },
                    "rank 0 receives into float32 [3] but rank 1 sent float64 [3]"));
  } else if (hvd::rank() == 0) {
    std::vector<float> f(3);
    EXPECT_TRUE(throws_with([&] { hvd::recv(ref(f), 1); }, "rank 1 sent float64 [3]"));
  }
  hvd::barrier();
  if (hvd::rank() <= 1) {
    std::vector<float> v(2, static_cast<float>(hvd::rank()));
    if (hvd::rank() == 0)
      hvd::send(ref(v), 1);
    else
      hvd::recv(ref(v), 0);
    EXPECT_EQ(v[1], 0.0f);
  }
}

TEST_F(PointToPoint, BadPeersThrowAtOnce) {
  std::vector<float> v{1};
  EXPECT_TRUE(throws_with([&] { hvd::send(ref(v), hvd::rank()); }, "that is this rank"));
  EXPECT_TRUE(throws_with([&] { hvd::recv(ref(v), hvd::size()); }, "pass a rank from 0 to"));
  EXPECT_TRUE(throws_with([&] { hvd::send(ref(v), -1); }, "pass a rank from 0 to"));
}

// Inside a process set of the odd ranks (or every rank but 0), peers are ranks of the set.
TEST_F(PointToPoint, InsideAProcessSet) {
  const int n = hvd::size();
  if (n < 3) GTEST_SKIP() << "needs a set of 2 ranks besides the world";
  std::vector<int> members;
  for (int r = 1; r < n; ++r) members.push_back(r);
  hvd::ProcessSet set = hvd::add_process_set(members);
  if (set.included()) {
    const int k = set.size(), me = set.rank();
    std::vector<float> out(3, static_cast<float>(hvd::rank())), in(3, -1.0f);
    hvd::Handle s = set.send_async(ref(out), (me + 1) % k, 2);
    set.recv(ref(in), (me + k - 1) % k, 2);
    s.wait();
    EXPECT_EQ(in[0], static_cast<float>(set.ranks()[static_cast<size_t>((me + k - 1) % k)]));
    EXPECT_TRUE(throws_with([&] { set.send(ref(out), k); }, "in process set"));
  }
  hvd::remove_process_set(set);
}
