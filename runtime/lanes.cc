#include "runtime/lanes.h"

#include <algorithm>

#include "hvd/error.h"

namespace hvd {

void Lanes::pop(std::vector<uint32_t>* out) {
  for (uint32_t pos : submitted_) lanes_[pos].state = State::kPopped;
  if (out->empty()) {
    out->swap(submitted_);  // submitted_ gets the caller's (cleared) buffer back: no copies
  } else {
    out->insert(out->end(), submitted_.begin(), submitted_.end());
  }
  submitted_.clear();
}

Lanes::Submission Lanes::to_submission(Lane& l, int rank) {
  Submission s;
  s.popped = l.state == State::kPopped;
  Request& r = s.request;
  r.rank = rank;
  r.type = RequestType::kAllreduce;
  r.dtype = l.dtype;
  r.reduce_op = l.reduce_op;
  r.device = l.entry.input.device();
  r.prescale = l.prescale;
  r.postscale = l.postscale;
  r.deterministic = l.deterministic;
  r.name = l.name;
  r.shape = l.shape.vec();
  r.submitted = l.submitted;
  r.name_hash = l.hash;
  s.entry = std::move(l.entry);  // (left empty: submit() sets every field that is read)
  s.entry.name = l.name;
  s.entry.type = RequestType::kAllreduce;
  l.state = State::kIdle;
  --busy_;
  return s;
}

std::optional<Lanes::Submission> Lanes::hand_back(uint32_t pos, int rank) {
  if (pos >= lanes_.size() || lanes_[pos].state != State::kPopped) return std::nullopt;
  return to_submission(lanes_[pos], rank);
}

std::optional<Lanes::Submission> Lanes::close(uint32_t pos, int rank) {
  if (pos >= lanes_.size() || lanes_[pos].state == State::kClosed) return std::nullopt;
  Lane& l = lanes_[pos];
  std::optional<Submission> s;
  if (l.state == State::kSubmitted)
    submitted_.erase(std::find(submitted_.begin(), submitted_.end(), pos));
  if (l.busy()) s = to_submission(l, rank);
  index_.erase(l.hash, pos);
  l.state = State::kClosed;
  l.name.clear();
  return s;
}

bool Lanes::serves(uint32_t pos, const Response& cached) const {
  if (pos >= lanes_.size()) return false;
  const Lane& l = lanes_[pos];
  return l.state != State::kClosed && l.name == cached.names.at(0) &&
         l.takes(cached.dtype, cached.device_kind, cached.reduce_op, cached.prescale,
                 cached.postscale, cached.deterministic, cached.shapes.at(0));
}

void Lanes::open(uint32_t pos, const Response& cached, int rank) {
  const std::string& name = cached.names.at(0);
  const uint64_t h = NameIndex::hash(name);
  if (find_hashed(name, h) >= 0)
    throw InternalError("tensor queue of rank " + std::to_string(rank) + ": a lane for '" + name +
                        "' is open at another position: please report this bug.");
  if (pos >= lanes_.size()) lanes_.resize(pos + 1);
  Lane& l = lanes_[pos];
  l.name = name;
  l.hash = h;
  l.dtype = cached.dtype;
  l.device_kind = cached.device_kind;
  l.reduce_op = cached.reduce_op;
  l.prescale = cached.prescale;
  l.postscale = cached.postscale;
  l.deterministic = cached.deterministic;
  l.shape = cached.shapes.at(0);
  l.state = State::kIdle;
  index_.insert(h, pos);
}

void Lanes::close_all(std::vector<TensorTableEntry>* left) {
  for (Lane& l : lanes_) {
    if (!l.busy()) continue;
    left->push_back(std::move(l.entry));
    left->back().name = l.name;
    left->back().type = RequestType::kAllreduce;
  }
  lanes_.clear();
  index_.clear();
  submitted_.clear();
  busy_ = 0;
  last_ = kNoLane;
}

}  // namespace hvd
