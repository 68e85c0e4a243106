// NameIndex (runtime/name_index.h), the flat name -> index table of the per-tensor path: checked
// against std::unordered_map over random inserts and erases, with hashes forced into a few home
// slots so that runs collide, wrap around the end of the table and are shifted back on erase.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/name_index.h"

namespace hvd {
namespace {

struct Model {
  NameIndex index;
  std::vector<std::string> names;  // by index; "" = free
  std::vector<uint64_t> hashes;
  std::unordered_map<std::string, uint32_t> truth;

  int64_t find(const std::string& name, uint64_t h) const {
    return index.find(h, [&](uint32_t i) { return names[i] == name; });
  }
};

void check(const Model& m, const std::vector<std::string>& universe,
           uint64_t (*hash_of)(const std::string&)) {
  ASSERT_EQ(m.index.size(), m.truth.size());
  for (const std::string& name : universe) {
    auto it = m.truth.find(name);
    const int64_t got = m.find(name, hash_of(name));
    if (it == m.truth.end())
      EXPECT_EQ(got, -1) << name;
    else
      EXPECT_EQ(got, static_cast<int64_t>(it->second)) << name;
  }
}

void run(uint64_t (*hash_of)(const std::string&), unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> universe;
  for (int i = 0; i < 300; ++i) universe.push_back("layer" + std::to_string(i) + ".weight.grad");
  Model m;
  for (int step = 0; step < 20000; ++step) {
    const std::string& name = universe[rng() % universe.size()];
    const uint64_t h = hash_of(name);
    auto it = m.truth.find(name);
    if (it == m.truth.end()) {
      uint32_t i = 0;
      while (i < m.names.size() && !m.names[i].empty()) ++i;
      if (i == m.names.size()) {
        m.names.emplace_back();
        m.hashes.emplace_back();
      }
      m.names[i] = name;
      m.hashes[i] = h;
      m.index.insert(h, i);
      m.truth[name] = i;
    } else {
      ASSERT_TRUE(m.index.erase(h, it->second));
      EXPECT_FALSE(m.index.erase(h, it->second));  // a second erase finds nothing
      m.names[it->second].clear();
      m.truth.erase(it);
    }
    if (step % 97 == 0) check(m, universe, hash_of);
  }
  check(m, universe, hash_of);
  m.index.clear();
  EXPECT_EQ(m.index.size(), 0u);
  for (const std::string& name : universe) EXPECT_EQ(m.find(name, hash_of(name)), -1);
}

uint64_t real_hash(const std::string& s) { return NameIndex::hash(s); }
// Every name in one of 3 home slots near the table's end (wrap-around), so runs are long.
uint64_t clashing_hash(const std::string& s) { return ~uint64_t{0} - NameIndex::hash(s) % 3; }
// Equal full hashes for different names: only the name comparison tells them apart.
uint64_t equal_hash(const std::string& s) { return 42 + s.size() % 2; }

TEST(NameIndex, AgreesWithUnorderedMap) { run(real_hash, 1); }
TEST(NameIndex, CollidingRunsWrapAndShiftBack) { run(clashing_hash, 2); }
TEST(NameIndex, EqualHashesComparedByName) { run(equal_hash, 3); }

TEST(NameIndex, EmptyFindsNothing) {
  NameIndex index;
  EXPECT_EQ(index.find(7, [](uint32_t) { return true; }), -1);
  EXPECT_FALSE(index.erase(7, 0));
}

}  // namespace
}  // namespace hvd
