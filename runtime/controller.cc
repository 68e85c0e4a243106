#include "runtime/controller.h"

#include <algorithm>
#include <bit>
#include <set>

#include "common/logging.h"
#include "common/ranks.h"
#include "hvd/error.h"
#include "runtime/fusion.h"
#include "runtime/group_unit.h"

namespace hvd {
namespace {

constexpr uint64_t kNoShutdown = 1;
constexpr uint64_t kNoUncached = 2;
constexpr uint64_t kNoJoined = 4;
constexpr uint64_t kNoStop = 8;    // hvd::request_stop() on no rank (hvd/stop.h)
constexpr uint64_t kNoLeave = 16;  // no rank asks to end its set's run (runtime/process_set.h)
constexpr uint64_t kNoMore = 32;   // no rank took new requests this cycle

// The `why` of a lost-rank message.
std::string no_word(size_t ranks, double seconds) {
  return std::string("no word from ") + (ranks == 1 ? "it" : "them") + " for " +
         std::to_string(static_cast<int>(seconds)) + " s (HVD_PEER_TIMEOUT_SECONDS)";
}

}  // namespace

Controller::Controller(std::unique_ptr<comm::ControlChannel> channel,
                       const ControllerOptions& options, TensorQueue& queue)
    : channel_(std::move(channel)),
      rank_(channel_->rank()),
      size_(channel_->size()),
      options_(options),
      queue_(queue),
      cache_(options.cache_capacity),
      cache_words_((options.cache_capacity + 63) / 64),
      // At most 10^9 s (no stall inspector: 10^18 s), which fits the clock's 64-bit nanoseconds.
      patience_(
          static_cast<int64_t>(std::clamp(options.fast_path_patience_seconds, 0.0, 1e9) * 1e9)),
      coordinator_(size_, options.global_ranks) {
  if (!options_.params) options_.params = std::make_shared<const Parameters>(ParameterValues{});
  measure_ = options_.straggler && size_ > 1 && size_ <= straggler::kMaxRanks;
  if (measure_) channel_->set_max_words(straggler::kWords);
}

std::vector<int> Controller::global(std::vector<int> ranks) const {
  for (int& r : ranks)
    if (r >= 0 && r < static_cast<int>(options_.global_ranks.size())) r = options_.global_ranks[r];
  return ranks;
}

// `looked`: r's lookup, done while the cache could serve this rank (none: kMiss).
void Controller::classify(Request&& r, const Looked& looked) {
  if (r.type == RequestType::kJoin) {
    joined_ = true;
    uncached_.push_back(std::move(r));
    return;
  }
  const uint32_t pos = looked.pos;
  if (cache_.capacity() > 0 && !joined_) {
    switch (looked.result) {
      case ResponseCache::Lookup::kHit: {
        // Patience counts from the user's submission, not from this cycle.
        const auto since = r.submitted == std::chrono::steady_clock::time_point{}
                               ? std::chrono::steady_clock::now()
                               : r.submitted;
        if (has_pending(pos)) break;  // cannot happen (one name in flight per rank): go slow
        add_pending(pos, &r, since);
        return;
      }
      case ResponseCache::Lookup::kInvalid:
        invalid_positions_.push_back(pos);
        break;
      case ResponseCache::Lookup::kMiss:
        break;
    }
  }
  go_slow(std::move(r));
}

// A request for rank 0. A group unit goes as its members, and its entry in the queue becomes
// theirs (runtime/group_unit.h).
void Controller::go_slow(Request&& r) {
  if (!group_unit::is_unit(r)) {
    uncached_.push_back(std::move(r));
    return;
  }
  // A member name clashes with a tensor of this rank in flight: the queue failed the unit's handle,
  // and no member request may go to rank 0 (one named like that tensor would be taken for it).
  if (!queue_.expand_unit(r.name, rank_).empty()) return;
  group_unit::expand(r, &uncached_);
  if (options_.on_unit_expanded) options_.on_unit_expanded(r.name, r.group_size);
}

// Step 1 of the protocol: this rank's new requests, sorted into cache hits and slow ones.
void Controller::take_requests() {
  std::vector<Request>& fresh = fresh_;
  fresh.clear();  // keeps its capacity for the queue
  sync_lanes();
  popped_lanes_.clear();
  queue_.pop_requests(&fresh, &popped_lanes_);
  took_ = !fresh.empty() || !popped_lanes_.empty();
  // A group is negotiated as a whole: rank 0 releases it when every member is there. If some
  // members were served from the cache while others (reshaped, say) went to rank 0, the group would
  // wait for members that had already run, on every rank, forever. So a group takes the fast path
  // only when every member hits; otherwise all its members go the slow way, and the hits' cache
  // entries are invalidated everywhere so that no rank runs them alone. (A group's members arrive
  // in one pop: TensorQueue::add hands them over atomically.)
  // Each request is looked up once (the cache does not change in between): the results serve
  // the groups' verdict and classify().
  std::set<std::string> slow_groups;
  looked_.assign(fresh.size(), Looked{});
  if (cache_.capacity() > 0 && !joined_) {
    for (size_t i = 0; i < fresh.size(); ++i) {
      looked_[i].result = cache_.lookup(fresh[i], &looked_[i].pos);
      if (!fresh[i].group.empty() && !group_unit::is_unit(fresh[i]) &&
          looked_[i].result != ResponseCache::Lookup::kHit)
        slow_groups.insert(fresh[i].group);
    }
  }
  for (size_t i = 0; i < fresh.size(); ++i) {
    Request& r = fresh[i];
    if (!r.group.empty() && !group_unit::is_unit(r) &&
        looked_[i].result == ResponseCache::Lookup::kHit && slow_groups.count(r.group)) {
      invalid_positions_.push_back(looked_[i].pos);
      uncached_.push_back(std::move(r));
      continue;
    }
    classify(std::move(r), looked_[i]);
  }
  // A lane's submission is a cache hit by construction (its lane mirrors the cache's entry), but
  // goes the slow way wherever a hit would not be pending: after this rank joined.
  const auto now = std::chrono::steady_clock::now();
  for (uint32_t pos : popped_lanes_) {
    if (joined_ || has_pending(pos)) {
      go_slow(queue_.lane_to_request(pos, rank_));
      continue;
    }
    add_pending(pos, nullptr, now);
  }
  // Hits that waited too long go to rank 0 (after invalidating their entry everywhere), where the
  // stall inspector sees them.
  std::vector<uint32_t> late;
  for_each_pending([&](uint32_t pos) {
    if (now - pending_since_[pos] > patience_) late.push_back(pos);
  });
  for (uint32_t pos : late) {
    invalid_positions_.push_back(pos);
    if (pending_lane(pos))
      lane_goes_slow(pos);
    else
      go_slow(std::move(take_pending(pos)));
  }
}

void Controller::add_pending(uint32_t pos, Request* request,
                             std::chrono::steady_clock::time_point since) {
  if (pos >= pending_since_.size()) {
    pending_since_.resize(pos + 1);
    pending_requests_.resize(pos + 1);
  }
  if (pos / 64 >= pending_bits_.size()) {
    pending_bits_.resize(pos / 64 + 1, 0);
    pending_lane_bits_.resize(pos / 64 + 1, 0);
  }
  const uint64_t bit = uint64_t{1} << (pos % 64);
  if (request) {
    pending_requests_[pos] = std::move(*request);
    pending_lane_bits_[pos / 64] &= ~bit;
  } else {
    pending_lane_bits_[pos / 64] |= bit;
  }
  pending_since_[pos] = since;
  pending_bits_[pos / 64] |= bit;
}

Request& Controller::take_pending(uint32_t pos) {
  pending_bits_[pos / 64] &= ~(uint64_t{1} << (pos % 64));
  return pending_requests_[pos];
}

void Controller::lane_goes_slow(uint32_t pos) {
  take_pending(pos);
  go_slow(queue_.lane_to_request(pos, rank_));
}

// Until the lanes are synced, a submission may still enter a lane whose position the cache gave to
// another tensor: it is then handed back as a request, which misses the cache (the slow way).
void Controller::sync_lanes() {
  if (lanes_to_sync_.empty()) return;
  std::sort(lanes_to_sync_.begin(), lanes_to_sync_.end());
  lanes_to_sync_.erase(std::unique(lanes_to_sync_.begin(), lanes_to_sync_.end()),
                       lanes_to_sync_.end());
  std::vector<std::pair<uint32_t, const Response*>> wanted;
  for (uint32_t pos : lanes_to_sync_) {
    const Response* c = cache_.occupied(pos) ? &cache_.get(pos) : nullptr;
    const bool lane = c && options_.lanes && c->type == ResponseType::kAllreduce &&
                      c->group.empty() && c->error.empty() && c->names.size() == 1;
    wanted.emplace_back(pos, lane ? c : nullptr);
  }
  lanes_to_sync_.clear();
  std::vector<std::pair<uint32_t, Request>> popped;
  queue_.sync_lanes(wanted, rank_, &popped);
  for (auto& [pos, r] : popped) {
    // A submission this rank had counted as a hit for the lane's old tensor.
    if (has_pending(pos) && pending_lane(pos)) take_pending(pos);
    go_slow(std::move(r));
  }
}

template <typename F>
void Controller::for_each_pending(F&& f) const {
  for (size_t w = 0; w < pending_bits_.size(); ++w)
    for (uint64_t bits = pending_bits_[w]; bits; bits &= bits - 1)
      f(static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits)));
}

// Every pending hit goes the slow way (in position order, as before).
void Controller::requeue_all_pending() {
  for_each_pending([&](uint32_t pos) {
    if (pending_lane(pos))
      go_slow(queue_.lane_to_request(pos, rank_));
    else
      go_slow(std::move(pending_requests_[pos]));
  });
  for (uint64_t& w : pending_bits_) w = 0;
}

// [flags | hit bits | valid bits] of this rank, to be ANDed across ranks.
std::vector<uint64_t> Controller::local_bits(const CycleFlags& mine) {
  tuning_ = options_.tuner && options_.tuner->active();
  tuning_offset_ = 1 + 2 * cache_words_;
  straggler_offset_ = tuning_offset_ + (tuning_ ? autotune::kWords : 0);
  std::vector<uint64_t> bits(straggler_offset_ + (measure_ ? straggler::kWords : 0), 0);
  uint64_t flags = 0;
  if (!mine.shutdown) flags |= kNoShutdown;
  if (!mine.stop) flags |= kNoStop;
  if (uncached_.empty() && !joined_ && !coordinator_.has_notices()) flags |= kNoUncached;
  if (!joined_) flags |= kNoJoined;
  if (!mine.leave) flags |= kNoLeave;
  if (!took_) flags |= kNoMore;
  bits[0] = flags;
  if (!joined_)
    for (size_t w = 0; w < pending_bits_.size() && w < cache_words_; ++w)
      bits[1 + w] = pending_bits_[w];
  for (size_t w = 0; w < cache_words_; ++w) bits[1 + cache_words_ + w] = ~uint64_t{0};
  for (uint32_t pos : invalid_positions_)
    bits[1 + cache_words_ + pos / 64] &= ~(uint64_t{1} << (pos % 64));
  invalid_positions_.clear();
  if (tuning_) options_.tuner->encode(bits.data() + tuning_offset_);
  if (measure_)
    straggler::encode(measure_pending_ ? measure_wait_us_ : -1, rank_,
                      bits.data() + straggler_offset_);
  return bits;
}

std::vector<Response> Controller::cycle(const CycleFlags& mine, CycleFlags* any) {
  take_requests();
  std::vector<uint64_t> bits = local_bits(mine);
  exchange_bits(bits);
  any->shutdown = !(bits[0] & kNoShutdown);
  any->stop = !(bits[0] & kNoStop);
  any->leave = !(bits[0] & kNoLeave);
  any->more = !(bits[0] & kNoMore);
  const bool any_uncached = !(bits[0] & kNoUncached);
  const bool any_joined = !(bits[0] & kNoJoined);
  if (measure_pending_) {
    measure_pending_ = false;
    options_.straggler->add(straggler::decode(bits.data() + straggler_offset_));
  }
  // The tuner's verdict takes effect here, before this cycle fuses, at the same cycle everywhere.
  if (tuning_) options_.tuner->decode(bits.data() + tuning_offset_);
  watch_marker_ = options_.tuner && options_.tuner->wants_marker();
  marker_seen_ = false;

  erase_invalid(bits);
  std::vector<Response> ready;
  if (any_joined) {
    requeue_all_pending();
  } else {
    ready = fast_path(bits);
  }
  if (any_uncached) {
    std::vector<Response> slow = slow_path();
    // A group whose members all succeeded is cached as its unit response, not member by member
    // (runtime/group_unit.h); the same on every rank.
    const std::vector<Response> units = group_unit::units_of(slow, size_);
    for (const auto& r : slow)
      if (r.contributors == size_ && !group_unit::in_unit(r, units)) lane_to_sync(cache_.put(r));
    for (const auto& u : units) lane_to_sync(cache_.put(u));
    requeue_evicted_hits();
    if (watch_marker_ && cache_.capacity() == 0) find_marker(slow);
    ready.insert(ready.end(), std::make_move_iterator(slow.begin()),
                 std::make_move_iterator(slow.end()));
  }
  if (measure_) measure_release(!ready.empty());
  if (watch_marker_) options_.tuner->cycle_done(marker_seen_, std::chrono::steady_clock::now());
  FusionOptions fo;
  fo.threshold_bytes = threshold();
  return plan_fusion(std::move(ready), fo);
}

// HVD_AUTOTUNE, rank 0, the cache off: the step marker is a name of the slow path's responses.
void Controller::find_marker(const std::vector<Response>& responses) {
  for (const auto& r : responses) {
    if (!r.error.empty()) continue;
    for (const auto& name : r.names) {
      if (marker_name_.empty()) marker_name_ = name;
      if (name == marker_name_) marker_seen_ = true;
    }
  }
}

// After a cycle's negotiation: when it released operations (the same on every rank), this rank's
// wait for them goes with the next cycle (runtime/straggler.h).
void Controller::measure_release(bool released) {
  if (!released) return;
  measure_pending_ = true;
  measure_wait_us_ = -1;
  if (latest_arrival_ != TimePoint{}) {
    const auto waited = std::chrono::steady_clock::now() - latest_arrival_;
    measure_wait_us_ =
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
  }
  latest_arrival_ = TimePoint{};
  options_.straggler->released();
}

// Step 2: the AND across ranks, and what a lost rank means for this one.
void Controller::exchange_bits(std::vector<uint64_t>& bits) {
  comm::StarPatience patience;
  patience.first_seconds =
      options_.peer_timeout_seconds + (rank_ == 0 ? 0.0 : options_.coordinator_grace_seconds);
  patience.again_seconds = options_.peer_timeout_seconds;
  if (options_.unresponsive)
    patience.silent = [this](const std::vector<int>& ranks, double waited) {
      return probe_silent(ranks, waited);
    };
  const comm::StarOutcome outcome = channel_->star_and(bits, patience);
  switch (outcome.status) {
    case comm::StarOutcome::Status::kDone:
      return;
    case comm::StarOutcome::Status::kReported:
      throw CommunicationError(lost_ranks_message(
          global(outcome.lost), no_word(outcome.lost.size(), options_.peer_timeout_seconds)));
    case comm::StarOutcome::Status::kSilent:
      break;
  }
  if (rank_ != 0)
    throw CommunicationError(lost_ranks_message(global({0}), no_word(1, outcome.waited_seconds)) +
                             (options_.global_ranks.empty()
                                  ? std::string(" Rank 0 coordinates every cycle.")
                                  : " It coordinates its process set."));
  if (options_.announce_lost) options_.announce_lost(outcome.lost);
  throw CommunicationError(lost_ranks_message(
      global(outcome.lost), no_word(outcome.lost.size(), outcome.waited_seconds)));
}

// Silence is not death: a rank on an overloaded node (or under a sanitizer) can miss the deadline
// while alive. Ask the silent ranks' watchdogs; those that answer get another timeout, as often as
// it takes (a rank stuck for good ends itself through its own watchdog and then stops answering).
// Only ranks that do not answer are lost. On the other ranks the silent one is rank 0: if its
// watchdog still answers, rank 0 is alive but busy (in a collective with a rank that is really
// lost, which it will name): wait again. A rank other than 0 that is shown other ranks waits for
// the ranks below it in the channel's tree (comm/mpi_control_channel.h): it probes them as rank 0
// does, so the warning names the slow rank from its parent.
std::vector<int> Controller::probe_silent(const std::vector<int>& ranks, double waited) const {
  if (rank_ != 0 && ranks == std::vector<int>{0}) return options_.unresponsive(ranks);
  HVD_LOG(Debug) << rank_list(global(ranks)) << " silent for " << waited
                 << " s: asking their watchdogs";
  std::vector<int> dead = options_.unresponsive(ranks);
  HVD_LOG(Debug) << "liveness probe: "
                 << (dead.empty() ? "every silent rank answered"
                                  : rank_list(global(dead)) + " did not answer");
  if (dead.empty())
    HVD_LOG(Warning) << rank_list(global(ranks)) << (ranks.size() == 1 ? " has" : " have")
                     << " not taken part in the negotiation for " << static_cast<int>(waited)
                     << " s, but " << (ranks.size() == 1 ? "answers" : "answer")
                     << " the liveness probe: alive but slow (an overloaded node?); waiting "
                     << options_.peer_timeout_seconds << " s more (HVD_PEER_TIMEOUT_SECONDS).";
  return dead;
}

// Step 3: invalidated entries are erased everywhere; their pending hits go the slow way.
void Controller::erase_invalid(const std::vector<uint64_t>& bits) {
  for (size_t w = 0; w < cache_words_; ++w) {
    uint64_t invalid = ~bits[1 + cache_words_ + w];
    while (invalid) {
      uint32_t pos = static_cast<uint32_t>(w * 64 + __builtin_ctzll(invalid));
      invalid &= invalid - 1;
      cache_.erase(pos);
      if (pos == marker_pos_) {  // the step marker went: rank 0 picks another
        marker_pos_ = -1;
        options_.tuner->marker_lost();
      }
      if (has_pending(pos)) {
        const bool lane = pending_lane(pos);
        Request& r = take_pending(pos);
        if (!lane) go_slow(std::move(r));
      }
      // The lane closes with its entry: a popped submission in it (pending above) comes back as a
      // request.
      if (std::optional<Request> popped = queue_.close_lane(pos, rank_))
        go_slow(std::move(*popped));
    }
  }
}

// Step 3: the cached responses whose hit bit survived the AND, in position order. A run of hits
// that plan_fusion would pack together anyway (ungrouped allreduces with the same parameters, up
// to the threshold; a group's members, whole) is appended to one response here instead of copying
// each cached response whole: a cycle of 1000 cached gradients, or one group of 1000, hands
// plan_fusion a few responses, not 1000. The result depends only on the bits and the cache, which
// are the same on every rank.
std::vector<Response> Controller::fast_path(const std::vector<uint64_t>& bits) {
  std::vector<Response> ready;
  bool open = false;  // ready.back() may take more cached tensors
  int64_t bytes = 0;  // ready.back()'s bytes while open
  // ready.back()'s fusion traits (those of the hit that opened it, with every rank contributing)
  // and whether it is a group's: a hit is fused after it without reading its cached response.
  FusionTraits open_traits;
  bool open_grouped = false;
  const int64_t threshold = this->threshold();
  // The hits not yet placed: a new response reserves room for all of them (one allocation per
  // member vector, not one per doubling of a 1000-tensor response).
  size_t left = 0;
  for (size_t w = 0; w < cache_words_; ++w) left += std::popcount(bits[1 + w]);
  for (size_t w = 0; w < cache_words_; ++w) {
    uint64_t hits = bits[1 + w];
    while (hits) {
      uint32_t pos = static_cast<uint32_t>(w * 64 + __builtin_ctzll(hits));
      hits &= hits - 1;
      --left;
      const ResponseCache::Fast& hit = cache_.fast(pos);
      const int64_t b = hit.bytes;
      const bool grouped = hit.grouped;
      // This rank's own request for the position (its bit is in the AND): its name and shape are
      // the cached ones (the lookup compared them), and are moved, not copied, into the response.
      // A lane's submission has none: its member is left without them.
      const bool lane = pending_lane(pos);
      if (measure_) arrived(pending_since_[pos]);
      if (watch_marker_) {
        if (marker_pos_ < 0) marker_pos_ = pos;
        if (pos == marker_pos_) marker_seen_ = true;
      }
      Request& mine = take_pending(pos);
      // A group's members join the open response of their group whatever the threshold (a group
      // is one unit for plan_fusion, run whole); ungrouped ones join an ungrouped response up to
      // the threshold. (can_fuse(ready.back(), the cached response), from the traits.)
      const bool joins = open && can_fuse(open_traits, hit.traits) &&
                         (!grouped ? !open_grouped && bytes + b <= threshold
                                   : ready.back().group == cache_.get(pos).group);
      if (joins) {
        Response& r = ready.back();
        if (lane) {
          // Neither name nor shape: the lane has them (Response::lanes).
          r.names.emplace_back();
          r.shapes.emplace_back();
          r.lane_bytes += b;
        } else {
          r.names.push_back(std::move(mine.name));
          r.shapes.push_back(std::move(mine.shape));
        }
        bytes += b;
      } else {
        const Response& cached = cache_.get(pos);
        ready.push_back(cached);
        ready.back().names.reserve(ready.back().names.size() + left);
        ready.back().shapes.reserve(ready.back().shapes.size() + left);
        ready.back().contributors = size_;
        if (lane) ready.back().lane_bytes = b;
        open = threshold > 0 || grouped;
        bytes = b;
        open_traits = hit.traits;
        open_traits.contributors = size_;
        open_grouped = grouped;
      }
      // Response::lanes: empty while no member is in a lane, else one position per name.
      if (Response& r = ready.back(); lane || !r.lanes.empty()) {
        if (r.lanes.empty()) r.lanes.reserve(r.names.size() + left);
        r.lanes.resize(r.names.size() - 1, kNoLane);  // (no-op once every member has an entry)
        r.lanes.push_back(lane ? pos : kNoLane);
      }
      cache_.touch(pos);
    }
  }
  return ready;
}

// Step 4: requests to rank 0, responses from it.
std::vector<Response> Controller::slow_path() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& r : uncached_) {
    if (r.submitted != std::chrono::steady_clock::time_point{})
      r.waited_seconds = std::max(0.0, std::chrono::duration<double>(now - r.submitted).count());
    if (measure_) slow_arrivals_[r.name] = r.submitted == TimePoint{} ? now : r.submitted;
  }
  std::vector<std::string> all = channel_->gather(serialize_requests(uncached_));
  uncached_.clear();
  std::string out;
  if (rank_ == 0) {
    for (const auto& mine : all) coordinator_.add(parse_requests(mine.data(), mine.size()));
    out = serialize_responses(coordinator_.ready());
  }
  channel_->broadcast(out);
  std::vector<Response> responses = parse_responses(out.data(), out.size());
  for (const auto& r : responses) {
    if (r.type == ResponseType::kJoin) joined_ = false;
    if (measure_)
      for (const auto& name : r.names)
        if (auto it = slow_arrivals_.find(name); it != slow_arrivals_.end()) {
          arrived(it->second);
          slow_arrivals_.erase(it);
        }
  }
  return responses;
}

// Step 5: a put may have evicted an entry another rank's pending hit still waits on: re-check.
void Controller::requeue_evicted_hits() {
  std::vector<uint32_t> evicted;
  for_each_pending([&](uint32_t pos) {
    if (pending_lane(pos)) return;  // sync_lanes() sees to it, before the next pop
    if (!cache_.occupied(pos) || cache_.get(pos).names[0] != pending_requests_[pos].name)
      evicted.push_back(pos);
  });
  for (uint32_t pos : evicted) go_slow(std::move(take_pending(pos)));
}

}  // namespace hvd
