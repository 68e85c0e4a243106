// The response cache: hits, invalidation by changed parameters, LRU eviction, determinism of
// positions (two caches fed the same puts agree).
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <string>
#include <vector>

#include "runtime/response_cache.h"

namespace hvd {
namespace {

Response ar(const std::string& name, std::vector<int64_t> shape) {
  Response r;
  r.type = ResponseType::kAllreduce;
  r.names = {name};
  r.shapes = {shape};
  r.reduce_op = ReduceOp::kSum;
  r.contributors = 2;
  return r;
}

Request req(const std::string& name, std::vector<int64_t> shape) {
  Request q;
  q.type = RequestType::kAllreduce;
  q.name = name;
  q.shape = shape;
  q.reduce_op = ReduceOp::kSum;
  return q;
}

TEST(ResponseCache, HitMissAndInvalid) {
  ResponseCache c(4);
  uint32_t pos = 99;
  EXPECT_EQ(c.lookup(req("a", {3}), &pos), ResponseCache::Lookup::kMiss);
  c.put(ar("a", {3}));
  EXPECT_EQ(c.lookup(req("a", {3}), &pos), ResponseCache::Lookup::kHit);
  EXPECT_EQ(pos, 0u);
  EXPECT_EQ(c.lookup(req("a", {4}), &pos), ResponseCache::Lookup::kInvalid);
  Request other_op = req("a", {3});
  other_op.reduce_op = ReduceOp::kMax;
  EXPECT_EQ(c.lookup(other_op, &pos), ResponseCache::Lookup::kInvalid);
  Request scaled = req("a", {3});
  scaled.postscale = 2;
  EXPECT_EQ(c.lookup(scaled, &pos), ResponseCache::Lookup::kInvalid);
  Request wrong_type = req("a", {3});
  wrong_type.type = RequestType::kBroadcast;
  EXPECT_EQ(c.lookup(wrong_type, &pos), ResponseCache::Lookup::kInvalid);
}

TEST(ResponseCache, OnlySingleNonErrorAllreduceBroadcastReducescatterAreCached) {
  ResponseCache c(8);
  Response g = ar("g", {2});
  g.type = ResponseType::kAllgather;
  c.put(g);
  Response e = ar("e", {2});
  e.type = ResponseType::kError;
  e.error = "x";
  c.put(e);
  Response fused = ar("f", {2});
  fused.names.push_back("f2");
  fused.shapes.push_back({2});
  c.put(fused);
  EXPECT_EQ(c.size(), 0u);
  Response b = ar("b", {2});
  b.type = ResponseType::kBroadcast;
  c.put(b);
  EXPECT_EQ(c.size(), 1u);
}

TEST(ResponseCache, EvictsLeastRecentlyUsedAndReusesItsPosition) {
  ResponseCache c(3);
  c.put(ar("a", {1}));
  c.put(ar("b", {1}));
  c.put(ar("c", {1}));
  uint32_t pa, pb, pc;
  ASSERT_EQ(c.lookup(req("a", {1}), &pa), ResponseCache::Lookup::kHit);
  ASSERT_EQ(c.lookup(req("b", {1}), &pb), ResponseCache::Lookup::kHit);
  ASSERT_EQ(c.lookup(req("c", {1}), &pc), ResponseCache::Lookup::kHit);
  c.touch(pa);  // b is now the least recently used
  c.put(ar("d", {1}));
  uint32_t pd;
  EXPECT_EQ(c.lookup(req("b", {1}), &pb), ResponseCache::Lookup::kMiss);
  ASSERT_EQ(c.lookup(req("d", {1}), &pd), ResponseCache::Lookup::kHit);
  EXPECT_EQ(pd, 1u);  // b's old position
  EXPECT_EQ(c.size(), 3u);
}

TEST(ResponseCache, EraseFreesThePositionForTheNextPut) {
  ResponseCache c(4);
  c.put(ar("a", {1}));
  c.put(ar("b", {1}));
  c.erase(0);
  EXPECT_FALSE(c.occupied(0));
  c.put(ar("c", {1}));
  uint32_t p;
  ASSERT_EQ(c.lookup(req("c", {1}), &p), ResponseCache::Lookup::kHit);
  EXPECT_EQ(p, 0u);
}

TEST(ResponseCache, TwoCachesFedTheSameSequenceAgreeOnEveryPosition) {
  ResponseCache x(16), y(16);
  for (int i = 0; i < 200; ++i) {
    Response r = ar("t" + std::to_string((i * 7) % 40), {i % 5});
    x.put(r);
    y.put(r);
    if (i % 11 == 0) {
      x.erase(static_cast<uint32_t>(i % 16));
      y.erase(static_cast<uint32_t>(i % 16));
    }
  }
  for (uint32_t p = 0; p < 16; ++p) {
    ASSERT_EQ(x.occupied(p), y.occupied(p));
    if (x.occupied(p)) {
      EXPECT_EQ(x.get(p).names, y.get(p).names);
    }
  }
}

// The cache's LRU order (a list through positions) against a plain model of it, over random puts,
// touches and erases: the same entries are evicted and every position holds the same name.
TEST(ResponseCache, LeastRecentlyUsedOrderMatchesAModel) {
  const size_t capacity = 8;
  ResponseCache c(capacity);
  std::vector<std::string> at;  // the model: the name at each position ("" free)
  std::list<uint32_t> lru;      // the model's order, front: most recently used
  auto model_touch = [&](uint32_t p) {
    lru.remove(p);
    lru.push_front(p);
  };
  uint64_t x = 12345;
  auto next = [&](uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % n;
  };
  for (int i = 0; i < 5000; ++i) {
    const uint64_t what = next(10);
    if (what < 6) {
      const std::string name = "t" + std::to_string(next(20));
      auto it = std::find(at.begin(), at.end(), name);
      uint32_t p;
      if (it != at.end()) {
        p = static_cast<uint32_t>(it - at.begin());
      } else if (lru.size() < capacity) {
        p = static_cast<uint32_t>(std::find(at.begin(), at.end(), "") - at.begin());
        if (p == at.size()) at.emplace_back();
      } else {
        p = lru.back();
      }
      at[p] = name;
      model_touch(p);
      ASSERT_EQ(c.put(ar(name, {1})), static_cast<int64_t>(p)) << "step " << i;
    } else if (what < 9) {
      const uint32_t p = static_cast<uint32_t>(next(capacity + 2));
      if (p < at.size() && !at[p].empty()) model_touch(p);
      c.touch(p);
    } else {
      const uint32_t p = static_cast<uint32_t>(next(capacity + 2));
      if (p < at.size() && !at[p].empty()) {
        at[p].clear();
        lru.remove(p);
      }
      c.erase(p);
    }
    ASSERT_EQ(c.size(), lru.size()) << "step " << i;
  }
  for (uint32_t p = 0; p < capacity + 2; ++p) {
    const bool used = p < at.size() && !at[p].empty();
    ASSERT_EQ(c.occupied(p), used) << p;
    if (used) {
      EXPECT_EQ(c.get(p).names[0], at[p]);
    }
  }
}

TEST(ResponseCache, ZeroCapacityCachesNothing) {
  ResponseCache c(0);
  c.put(ar("a", {1}));
  uint32_t p;
  EXPECT_EQ(c.lookup(req("a", {1}), &p), ResponseCache::Lookup::kMiss);
}

}  // namespace
}  // namespace hvd
