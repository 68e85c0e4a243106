#include "runtime/response_cache.h"

#include "hvd/error.h"
#include "runtime/fusion.h"

namespace hvd {

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity) {}

bool ResponseCache::cacheable(const Response& r) {
  return r.names.size() == 1 && r.error.empty() && has_flag(r.type, op_flags::kCacheable);
}

ResponseCache::Lookup ResponseCache::lookup(const Request& q, uint32_t* position) const {
  const int64_t at = find(q.name, q.name_hash != 0 ? q.name_hash : NameIndex::hash(q.name));
  if (at < 0) return Lookup::kMiss;
  *position = static_cast<uint32_t>(at);
  const Response& r = slots_[at]->response;
  bool same = static_cast<uint8_t>(r.type) == static_cast<uint8_t>(q.type) && r.dtype == q.dtype &&
              r.shapes[0] == q.shape && r.device_kind == q.device.kind && r.group == q.group &&
              q.error.empty();
  if (same && has_flag(q.type, op_flags::kReduces))
    same = r.reduce_op == q.reduce_op && r.prescale == q.prescale && r.postscale == q.postscale &&
           r.deterministic == q.deterministic;
  if (same && has_flag(q.type, op_flags::kRooted)) same = r.root == q.root;
  return same ? Lookup::kHit : Lookup::kInvalid;
}

void ResponseCache::require(uint32_t position) const {
  if (!occupied(position))
    throw InternalError("response cache: no entry at position " + std::to_string(position));
}

const Response& ResponseCache::get(uint32_t position) const {
  require(position);
  return slots_[position]->response;
}

const ResponseCache::Fast& ResponseCache::fast(uint32_t position) const {
  require(position);
  return fast_[position];
}

int64_t ResponseCache::put(const Response& single) {
  if (capacity_ == 0 || !cacheable(single)) return -1;
  const std::string& name = single.names[0];
  const uint64_t h = NameIndex::hash(name);
  uint32_t pos;
  if (const int64_t at = find(name, h); at >= 0) {
    pos = static_cast<uint32_t>(at);
    slots_[pos]->response = single;
    touch(pos);
  } else {
    if (by_name_.size() < capacity_) {
      // Lowest free position: deterministic on every rank.
      pos = 0;
      while (pos < slots_.size() && slots_[pos].has_value()) ++pos;
      if (pos == slots_.size()) {
        slots_.emplace_back();
        fast_.emplace_back();
        lru_prev_.push_back(kEnd);
        lru_next_.push_back(kEnd);
      }
    } else {
      pos = lru_tail_;
      erase(pos);
    }
    slots_[pos] = Slot{single};
    lru_push_front(pos);
    by_name_.insert(h, pos);
  }
  Response& r = slots_[pos]->response;
  r.lanes.clear();
  r.lane_bytes = 0;
  fast_[pos] = Fast{response_bytes(r), fusion_traits(r), !r.group.empty()};
  return pos;
}

void ResponseCache::lru_unlink(uint32_t p) {
  const uint32_t prev = lru_prev_[p], next = lru_next_[p];
  (prev == kEnd ? lru_head_ : lru_next_[prev]) = next;
  (next == kEnd ? lru_tail_ : lru_prev_[next]) = prev;
  lru_prev_[p] = lru_next_[p] = kEnd;
}

void ResponseCache::lru_push_front(uint32_t p) {
  lru_prev_[p] = kEnd;
  lru_next_[p] = lru_head_;
  (lru_head_ == kEnd ? lru_tail_ : lru_prev_[lru_head_]) = p;
  lru_head_ = p;
}

void ResponseCache::touch(uint32_t position) {
  if (!occupied(position) || lru_head_ == position) return;
  lru_unlink(position);
  lru_push_front(position);
}

void ResponseCache::erase(uint32_t position) {
  if (!occupied(position)) return;
  by_name_.erase(NameIndex::hash(slots_[position]->response.names[0]), position);
  lru_unlink(position);
  slots_[position].reset();
}

}  // namespace hvd
