#pragma once

// A tensor name -> slot index map for the per-tensor hot path (the response cache's names, the
// tensor queue's table). std::unordered_map<std::string, ...> costs, per lookup, a walk along a
// bucket's chain of heap nodes with an integer division per node, and per insert a node and a copy
// of the name; at 1000 tensors per step that was the largest piece of hvd's own bookkeeping
// (docs/benchmarks.md, issue 11). Here the table is one flat array of (hash, index) pairs with
// linear probing: a lookup hashes the name once and usually reads one pair, then compares the name
// the owner keeps at that index (the `same` callback) — the index stores no names, so an insert
// allocates nothing while the table has room. Erase shifts the following pairs back (no
// tombstones), so a long run never degrades.
//
// Thread safety: none; the owner locks.

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace hvd {

class NameIndex {
 public:
  static uint64_t hash(std::string_view name) { return std::hash<std::string_view>{}(name); }

  size_t size() const { return size_; }

  // The index stored for this hash whose name is the one sought (`same(index)` says so), or -1.
  template <typename Same>
  int64_t find(uint64_t h, Same&& same) const {
    if (slots_.empty()) return -1;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.index == kEmpty) return -1;
      if (s.hash == h && same(s.index)) return s.index;
    }
  }

  // Adds (h, index); the caller knows the name is not in the index.
  void insert(uint64_t h, uint32_t index) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    place(h, index);
    ++size_;
  }

  // Removes the pair (h, index); returns whether it was there.
  bool erase(uint64_t h, uint32_t index) {
    if (slots_.empty()) return false;
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].index == kEmpty) return false;
      if (slots_[i].index == index) break;
    }
    // Backward-shift deletion: move each later pair of the run into the hole when its home slot
    // does not lie (cyclically) between the hole and itself.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].index != kEmpty; j = (j + 1) & mask_) {
      const size_t home = slots_[j].hash & mask_;
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole].index = kEmpty;
    --size_;
    return true;
  }

  void clear() {
    for (Slot& s : slots_) s.index = kEmpty;
    size_ = 0;
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t hash = 0;
    uint32_t index = kEmpty;
  };

  void place(uint64_t h, uint32_t index) {
    size_t i = h & mask_;
    while (slots_[i].index != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Slot{h, index};
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old)
      if (s.index != kEmpty) place(s.hash, s.index);
  }

  std::vector<Slot> slots_;  // a power of two, at most half full
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace hvd
