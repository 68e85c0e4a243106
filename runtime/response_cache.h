#pragma once

// The response cache: the fast path of negotiation.
//
// Why it works: every rank executes the same responses in the same order, and every rank updates
// its cache only from executed responses (put/touch) and from collective decisions (erase after the
// cycle's bit vector says an entry is invalid somewhere). So the caches of all ranks are identical
// at every cycle boundary: same names at the same positions, same LRU order. A rank whose request
// matches a cached response sets the bit of that position; one bitwise-AND all-reduce tells every
// rank which cached tensors are ready everywhere, with no round trip to rank 0.
//
// A request "hits" only if its parameters equal the cached response's (type, dtype, shape, reduce
// op, scale factors, root, device kind, group). The same name with other parameters is "invalid":
// the rank clears that entry's valid bit, every rank erases it, and the request goes the slow way.
// Only allreduce, broadcast and reducescatter are cached: allgather and alltoall sizes are
// per-rank and may change from call to call.
//
// Thread safety: used by the background thread only.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/fusion.h"
#include "runtime/message.h"
#include "runtime/name_index.h"

namespace hvd {

class ResponseCache {
 public:
  enum class Lookup { kMiss, kHit, kInvalid };

  explicit ResponseCache(size_t capacity);

  size_t capacity() const { return capacity_; }
  size_t size() const { return by_name_.size(); }
  static bool cacheable(const Response& single);

  // Does this request match the cached response for its name? On kHit and kInvalid, *position is
  // the entry's position.
  Lookup lookup(const Request& request, uint32_t* position) const;
  const Response& get(uint32_t position) const;
  // What the fast path reads of an entry, computed once when it was put: response_bytes(),
  // fusion_traits() and whether it belongs to a group. Throws as get() does.
  struct Fast {
    int64_t bytes = 0;
    FusionTraits traits;
    bool grouped = false;
  };
  const Fast& fast(uint32_t position) const;
  // Inserts or replaces a single-tensor response (names.size() == 1) and marks it most recently
  // used. When full, the least recently used entry is evicted and its position reused. Returns
  // the position it holds now, or -1 when not cached (not cacheable, capacity 0).
  int64_t put(const Response& single);
  void touch(uint32_t position);
  void erase(uint32_t position);
  bool occupied(uint32_t position) const {
    return position < slots_.size() && slots_[position].has_value();
  }

 private:
  struct Slot {
    Response response;
  };
  int64_t find(const std::string& name, uint64_t h) const {
    return by_name_.find(h, [&](uint32_t pos) { return slots_[pos]->response.names[0] == name; });
  }
  size_t capacity_;
  std::vector<std::optional<Slot>> slots_;
  NameIndex by_name_;  // names[0] of every occupied slot -> its position
  // Per position, beside the slots: the fast path reads these for every hit of every cycle, and
  // dense arrays keep them in a few cache lines (a slot's response, or a node of a std::list per
  // entry, is a line of its own, out of the cache again by the next step).
  std::vector<Fast> fast_;
  void require(uint32_t position) const;  // occupied, or the InternalError
  // The LRU order, a doubly linked list through positions (kEnd: none); head: most recently used.
  static constexpr uint32_t kEnd = UINT32_MAX;
  std::vector<uint32_t> lru_prev_, lru_next_;
  uint32_t lru_head_ = kEnd, lru_tail_ = kEnd;
  void lru_unlink(uint32_t position);
  void lru_push_front(uint32_t position);
};

}  // namespace hvd
