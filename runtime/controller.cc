#include "runtime/controller.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "hvd/error.h"
#include "comm/mpi_context.h"
#include "common/logging.h"

namespace hvd {
namespace {

constexpr uint64_t kNoShutdown = 1;
constexpr uint64_t kNoUncached = 2;
constexpr uint64_t kNoJoined = 4;

std::string fmt_double(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

Controller::Controller(MPI_Comm comm, int rank, int size, const ControllerOptions& options,
                       TensorQueue& queue)
    : comm_(comm),
      rank_(rank),
      size_(size),
      options_(options),
      queue_(queue),
      cache_(options.cache_capacity),
      cache_words_((options.cache_capacity + 63) / 64) {}

void Controller::classify(Request&& r) {
  if (r.type == RequestType::kJoin) {
    joined_ = true;
    uncached_.push_back(std::move(r));
    return;
  }
  uint32_t pos = 0;
  if (cache_.capacity() > 0 && !joined_) {
    switch (cache_.lookup(r, &pos)) {
      case ResponseCache::Lookup::kHit: {
        // Patience counts from the user's submission, not from this cycle.
        const auto since = r.submitted == std::chrono::steady_clock::time_point{}
                               ? std::chrono::steady_clock::now()
                               : r.submitted;
        cached_pending_.emplace(pos, PendingHit{std::move(r), since});
        return;
      }
      case ResponseCache::Lookup::kInvalid:
        invalid_positions_.push_back(pos);
        break;
      case ResponseCache::Lookup::kMiss:
        break;
    }
  }
  uncached_.push_back(std::move(r));
}

std::vector<Response> Controller::cycle(bool shutdown_requested, bool* shutdown) {
  std::vector<Request> fresh;
  queue_.pop_requests(&fresh);
  // A group is negotiated as a whole: rank 0 releases it when every member is there. If some
  // members were served from the cache while others (reshaped, say) went to rank 0, the group would
  // wait for members that had already run, on every rank, forever. So a group takes the fast path
  // only when every member hits; otherwise all its members go the slow way, and the hits' cache
  // entries are invalidated everywhere so that no rank runs them alone. (A group's members arrive
  // in one pop: TensorQueue::add hands them over atomically.)
  std::set<std::string> slow_groups;
  if (cache_.capacity() > 0 && !joined_) {
    uint32_t pos = 0;
    for (const auto& r : fresh)
      if (!r.group.empty() && cache_.lookup(r, &pos) != ResponseCache::Lookup::kHit)
        slow_groups.insert(r.group);
  }
  for (auto& r : fresh) {
    uint32_t pos = 0;
    if (!r.group.empty() && slow_groups.count(r.group) &&
        cache_.lookup(r, &pos) == ResponseCache::Lookup::kHit) {
      invalid_positions_.push_back(pos);
      uncached_.push_back(std::move(r));
      continue;
    }
    classify(std::move(r));
  }
  // Hits that waited too long go to rank 0 (after invalidating their entry everywhere), where the
  // stall inspector sees them.
  const auto now = std::chrono::steady_clock::now();
  for (auto it = cached_pending_.begin(); it != cached_pending_.end();) {
    if (std::chrono::duration<double>(now - it->second.since).count() >
        options_.fast_path_patience_seconds) {
      invalid_positions_.push_back(it->first);
      uncached_.push_back(std::move(it->second.request));
      it = cached_pending_.erase(it);
    } else {
      ++it;
    }
  }

  // [flags | hit bits | valid bits], ANDed across ranks.
  std::vector<uint64_t> bits(1 + 2 * cache_words_, 0);
  uint64_t flags = 0;
  if (!shutdown_requested) flags |= kNoShutdown;
  if (uncached_.empty() && !joined_ && !force_slow_) flags |= kNoUncached;
  if (!joined_) flags |= kNoJoined;
  bits[0] = flags;
  if (!joined_)
    for (const auto& [pos, hit] : cached_pending_) bits[1 + pos / 64] |= uint64_t{1} << (pos % 64);
  for (size_t w = 0; w < cache_words_; ++w) bits[1 + cache_words_ + w] = ~uint64_t{0};
  for (uint32_t pos : invalid_positions_)
    bits[1 + cache_words_ + pos / 64] &= ~(uint64_t{1} << (pos % 64));
  invalid_positions_.clear();
  exchange_bits(bits);

  const bool any_shutdown = !(bits[0] & kNoShutdown);
  const bool any_uncached = !(bits[0] & kNoUncached);
  const bool any_joined = !(bits[0] & kNoJoined);
  *shutdown = any_shutdown;

  // Invalidated entries: erased everywhere; their pending hits go the slow way.
  for (size_t w = 0; w < cache_words_; ++w) {
    uint64_t invalid = ~bits[1 + cache_words_ + w];
    while (invalid) {
      uint32_t pos = static_cast<uint32_t>(w * 64 + __builtin_ctzll(invalid));
      invalid &= invalid - 1;
      cache_.erase(pos);
      auto it = cached_pending_.find(pos);
      if (it != cached_pending_.end()) {
        uncached_.push_back(std::move(it->second.request));
        cached_pending_.erase(it);
      }
    }
  }

  std::vector<Response> ready;
  if (any_joined) {
    for (auto& [pos, hit] : cached_pending_) uncached_.push_back(std::move(hit.request));
    cached_pending_.clear();
  } else {
    for (size_t w = 0; w < cache_words_; ++w) {
      uint64_t hits = bits[1 + w];
      while (hits) {
        uint32_t pos = static_cast<uint32_t>(w * 64 + __builtin_ctzll(hits));
        hits &= hits - 1;
        Response r = cache_.get(pos);
        r.contributors = size_;
        ready.push_back(std::move(r));
        cache_.touch(pos);
        cached_pending_.erase(pos);
      }
    }
  }

  if (any_uncached) {
    std::vector<Response> slow = slow_path();
    for (const auto& r : slow)
      if (r.contributors == size_) cache_.put(r);
    // A put may have evicted an entry another rank's pending hit still waits on: re-check.
    for (auto it = cached_pending_.begin(); it != cached_pending_.end();) {
      if (!cache_.occupied(it->first) ||
          cache_.get(it->first).names[0] != it->second.request.name) {
        uncached_.push_back(std::move(it->second.request));
        it = cached_pending_.erase(it);
      } else {
        ++it;
      }
    }
    ready.insert(ready.end(), std::make_move_iterator(slow.begin()),
                 std::make_move_iterator(slow.end()));
  }
  FusionOptions fo;
  fo.threshold_bytes = options_.fusion_threshold_bytes;
  return plan_fusion(std::move(ready), fo);
}

// The cycle's bit-vector AND, as a star through rank 0 with a deadline instead of one blocking
// MPI_Allreduce: rank 0 receives every rank's vector, ANDs them and sends the result back. This is
// how a lost rank is named instead of hanging everyone: rank 0 knows exactly whose vector did not
// arrive within HVD_PEER_TIMEOUT_SECONDS and tells the others (a status word in the reply), and a
// rank that hears nothing from rank 0 knows that rank 0 is the one lost. Background threads cycle
// every HVD_CYCLE_TIME whatever the user's threads do, so silence means death or a dead link.
namespace {
// Rank 0 may itself be stuck in a data-plane op with the lost rank: its watchdog probes every rank
// after HVD_PEER_TIMEOUT_SECONDS (up to 3 s) and tells the others whom it lost. Wait that long
// before blaming rank 0.
constexpr double kCoordinatorGraceSeconds = 5.0;
}  // namespace

void Controller::exchange_bits(std::vector<uint64_t>& bits) {
  if (size_ == 1) return;
  constexpr int kTag = 7301;
  constexpr uint64_t kOk = 0, kLost = 1;
  const int n = static_cast<int>(bits.size());
  using clock = std::chrono::steady_clock;
  // The other ranks give rank 0 a little longer than rank 0 gives them: when a rank is lost, rank
  // 0 (which may have entered this cycle a little later) names it to everyone before they would
  // wrongly blame rank 0.
  const double patience =
      options_.peer_timeout_seconds + (rank_ == 0 ? 0.0 : kCoordinatorGraceSeconds);
  auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                     std::chrono::duration<double>(patience));
  auto wait_all = [&](std::vector<MPI_Request>& reqs) {
    // Polls until every request completes or the deadline passes; returns the unfinished indices.
    std::vector<int> done(reqs.size(), 0);
    size_t left = reqs.size();
    for (uint64_t spins = 0; left > 0; ++spins) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (done[i]) continue;
        int flag = 0;
        MPI_CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
        if (flag) {
          done[i] = 1;
          --left;
        }
      }
      if (left == 0) break;
      // The clock is read every 256 spins while spinning, and on every round once the loop sleeps:
      // on an overloaded machine each sleep can last tens of milliseconds, and 256 of them made
      // the deadline tens of seconds late (measured: a frozen rank named after 66 s instead of 35).
      if ((spins > 2000 || (spins & 255) == 255) && clock::now() > deadline) break;
      // Spin briefly (the answer usually comes within microseconds), then give the core away:
      // ranks share cores with the trainer's compute threads.
      if (spins > 20000)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else if (spins > 2000)
        std::this_thread::yield();
    }
    std::vector<int> missing;
    for (size_t i = 0; i < reqs.size(); ++i)
      if (!done[i]) missing.push_back(static_cast<int>(i));
    return missing;
  };
  auto lost_message = [&](const std::vector<int>& lost, double waited) {
    std::string ranks;
    for (size_t i = 0; i < lost.size(); ++i) ranks += (i ? ", " : "") + std::to_string(lost[i]);
    return "rank" + std::string(lost.size() == 1 ? " " : "s ") + ranks +
           (lost.size() == 1 ? " was" : " were") + " lost: no word from " +
           (lost.size() == 1 ? "it" : "them") + " for " + std::to_string(static_cast<int>(waited)) +
           " s (HVD_PEER_TIMEOUT_SECONDS). The process died or its node's network failed; see that "
           "rank's log and "
           "the launcher's message.";
  };
  if (rank_ == 0) {
    std::vector<std::vector<uint64_t>> in(size_, std::vector<uint64_t>(n));
    std::vector<MPI_Request> reqs(size_ - 1);
    for (int r = 1; r < size_; ++r)
      MPI_CHECK(MPI_Irecv(in[r].data(), n, MPI_UINT64_T, r, kTag, comm_, &reqs[r - 1]));
    const auto entered = clock::now();
    std::vector<int> missing = wait_all(reqs);
    HVD_LOG(Trace) << "bit exchange: waited "
                   << std::chrono::duration<double>(clock::now() - entered).count() << " s for "
                   << size_ - 1 - static_cast<int>(missing.size()) << " of " << size_ - 1
                   << " ranks";
    // Silence is not death: a rank on an overloaded node (or under a sanitizer) can miss the
    // deadline while alive. Ask the silent ranks' watchdogs; those that answer get another
    // timeout, as often as it takes (a rank stuck for good ends itself through its own watchdog
    // and then stops answering). Only ranks that do not answer are lost.
    double waited = patience;
    while (!missing.empty() && options_.unresponsive) {
      std::vector<int> silent;
      for (int i : missing) silent.push_back(i + 1);
      HVD_LOG(Debug) << rank_list(silent) << " silent for " << waited
                     << " s: asking their watchdogs";
      const std::vector<int> dead = options_.unresponsive(silent);
      HVD_LOG(Debug) << "liveness probe: "
                     << (dead.empty() ? "every silent rank answered"
                                      : rank_list(dead) + " did not answer");
      if (!dead.empty()) {
        missing.clear();
        for (int r : dead) missing.push_back(r - 1);
        break;
      }
      HVD_LOG(Warning) << rank_list(silent) << (silent.size() == 1 ? " has" : " have")
                       << " not taken part in the negotiation for " << static_cast<int>(waited)
                       << " s, but " << (silent.size() == 1 ? "answers" : "answer")
                       << " the liveness probe: alive but slow (an overloaded node?); waiting "
                       << options_.peer_timeout_seconds << " s more (HVD_PEER_TIMEOUT_SECONDS).";
      deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                    std::chrono::duration<double>(options_.peer_timeout_seconds));
      missing =
          wait_all(reqs);  // completed requests are MPI_REQUEST_NULL now: they test done at once
      waited += options_.peer_timeout_seconds;
    }
    std::vector<uint64_t> reply(n + 2, 0);
    std::vector<int> lost;
    for (int i : missing) lost.push_back(i + 1);
    if (lost.empty()) {
      for (int r = 1; r < size_; ++r)
        for (int w = 0; w < n; ++w) bits[w] &= in[r][w];
      reply[0] = kOk;
      std::copy(bits.begin(), bits.end(), reply.begin() + 2);
    } else {
      for (int i : missing) MPI_Cancel(&reqs[i]);
      reply[0] = kLost;
      reply[1] = static_cast<uint64_t>(lost.front());
    }
    // The replies are not waited for here: a send to a rank that has just stopped (frozen, or its
    // link cut after its bits arrived) may never complete, and waiting for it cost a whole timeout
    // before the next cycle's receive noticed that rank (measured: a frozen rank named after 2x
    // the timeout). Earlier replies are reaped as they complete; a rank that stops reading is
    // noticed by the next cycle's receive, like any silent rank.
    reap_replies();
    PendingReply pending;
    pending.buffer = std::move(reply);
    for (int r = 1; r < size_; ++r) {
      if (std::find(lost.begin(), lost.end(), r) != lost.end()) continue;
      pending.requests.emplace_back();
      MPI_CHECK(MPI_Isend(pending.buffer.data(), n + 2, MPI_UINT64_T, r, kTag, comm_,
                          &pending.requests.back()));
    }
    if (!lost.empty()) {
      // The survivors should read who was lost before this rank ends: a short, bounded wait.
      deadline = clock::now() + std::chrono::seconds(1);
      wait_all(pending.requests);
    }
    replies_.push_back(std::move(pending));
    if (!lost.empty()) {
      if (options_.announce_lost) options_.announce_lost(lost);
      throw CommunicationError(lost_message(lost, waited));
    }
    return;
  }
  std::vector<uint64_t> reply(n + 2, 0);
  std::vector<MPI_Request> reqs(2);
  MPI_CHECK(MPI_Isend(bits.data(), n, MPI_UINT64_T, 0, kTag, comm_, &reqs[0]));
  MPI_CHECK(MPI_Irecv(reply.data(), n + 2, MPI_UINT64_T, 0, kTag, comm_, &reqs[1]));
  std::vector<int> missing = wait_all(reqs);
  // Silence from rank 0: if its watchdog still answers, rank 0 is alive but busy (in a collective
  // with a rank that is really lost, which it will name): wait again. Each round is bounded, and a
  // rank 0 stuck for good ends itself (its watchdog) and then no longer answers.
  double waited = patience;
  while (!missing.empty() && options_.unresponsive && options_.unresponsive({0}).empty()) {
    deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                  std::chrono::duration<double>(options_.peer_timeout_seconds));
    missing =
        wait_all(reqs);  // completed requests are MPI_REQUEST_NULL now: they test done at once
    waited += options_.peer_timeout_seconds;
  }
  if (!missing.empty())
    throw CommunicationError(lost_message({0}, waited) + " Rank 0 coordinates every cycle.");
  if (reply[0] == kLost)
    throw CommunicationError(
        lost_message({static_cast<int>(reply[1])}, options_.peer_timeout_seconds));
  std::copy(reply.begin() + 2, reply.end(), bits.begin());
}

void Controller::reap_replies() {
  while (!replies_.empty()) {
    int done = 0;
    auto& reqs = replies_.front().requests;
    MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) break;
    replies_.pop_front();
  }
}

void Controller::finish(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (reap_replies(); !replies_.empty() && std::chrono::steady_clock::now() < until;
       reap_replies())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

std::vector<Response> Controller::slow_path() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& r : uncached_)
    if (r.submitted != std::chrono::steady_clock::time_point{})
      r.waited_seconds = std::max(0.0, std::chrono::duration<double>(now - r.submitted).count());
  std::string mine = serialize_requests(uncached_);
  uncached_.clear();
  int my_len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0), displs(rank_ == 0 ? size_ : 0);
  MPI_CHECK(MPI_Gather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm_));
  std::string all;
  if (rank_ == 0) {
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += lens[r];
    }
    all.resize(static_cast<size_t>(total));
  }
  MPI_CHECK(MPI_Gatherv(mine.data(), my_len, MPI_BYTE, all.data(), lens.data(), displs.data(),
                        MPI_BYTE, 0, comm_));

  std::string out;
  if (rank_ == 0) {
    for (int r = 0; r < size_; ++r)
      coordinator_add(parse_requests(all.data() + displs[r], static_cast<size_t>(lens[r])));
    out = serialize_responses(coordinator_ready());
  }
  uint64_t out_len = out.size();
  MPI_CHECK(MPI_Bcast(&out_len, 1, MPI_UINT64_T, 0, comm_));
  out.resize(out_len);
  MPI_CHECK(MPI_Bcast(out.data(), static_cast<int>(out_len), MPI_BYTE, 0, comm_));
  std::vector<Response> responses = parse_responses(out.data(), out.size());
  for (const auto& r : responses)
    if (r.type == ResponseType::kJoin) joined_ = false;
  return responses;
}

void Controller::coordinator_add(std::vector<Request>&& requests) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& r : requests) {
    if (r.type == RequestType::kJoin) {
      joined_ranks_.insert(r.rank);
      last_joined_ = r.rank;
      continue;
    }
    auto [it, inserted] = table_.try_emplace(r.name);
    TableEntry& e = it->second;
    if (inserted) {
      e.requests.assign(size_, Request{});
      for (auto& q : e.requests) q.rank = -1;
      e.first_seen = std::chrono::steady_clock::now();
      arrival_.push_back(r.name);
    }
    if (r.rank < 0 || r.rank >= size_ || e.requests[r.rank].rank != -1) continue;
    // The stall clock starts at the first submission on any rank (the sender says how long ago).
    const double waited =
        std::isfinite(r.waited_seconds) ? std::clamp(r.waited_seconds, 0.0, 1e7) : 0.0;
    e.first_seen = std::min(e.first_seen,
                            now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(waited)));
    ++e.count;
    e.requests[r.rank] = std::move(r);
  }
}

void Controller::fail_stalled(const std::vector<std::pair<std::string, std::string>>& failures,
                              const std::string& shutdown_reason) {
  stall_failures_.insert(stall_failures_.end(), failures.begin(), failures.end());
  if (!shutdown_reason.empty()) shutdown_notice_ = shutdown_reason;
  force_slow_ = true;
}

std::vector<Response> Controller::coordinator_ready() {
  std::vector<Response> out;
  force_slow_ = false;
  for (const auto& [name, message] : stall_failures_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;
    const Request* any = nullptr;
    for (const auto& q : it->second.requests)
      if (q.rank != -1) any = &q;
    Response err;
    err.type = ResponseType::kError;
    err.names = {name};
    err.shapes = {any ? any->shape : std::vector<int64_t>{}};
    err.error = std::string(any ? request_type_name(any->type) : "collective") + " of '" + name +
                "' failed: " + message;
    out.push_back(std::move(err));
    table_.erase(it);
    arrival_.erase(std::remove(arrival_.begin(), arrival_.end(), name), arrival_.end());
  }
  stall_failures_.clear();
  if (!shutdown_notice_.empty()) {
    Response notice;
    notice.type = ResponseType::kError;
    notice.names = {kShutdownNotice};
    notice.shapes = {{}};
    notice.error = shutdown_notice_;
    out.push_back(std::move(notice));
    shutdown_notice_.clear();
  }
  std::vector<std::string> still;
  for (const auto& name : arrival_) {
    TableEntry& e = table_[name];
    bool ready = true;
    for (int r = 0; r < size_ && ready; ++r)
      ready = e.requests[r].rank != -1 || joined_ranks_.count(r);
    if (!ready) {
      still.push_back(name);
      continue;
    }
    Response resp = build_response(name);
    table_.erase(name);
    if (!resp.group.empty()) {
      group_members_[resp.group].push_back(std::move(resp));
      continue;
    }
    out.push_back(std::move(resp));
  }
  arrival_.swap(still);
  // Release complete groups; a group with any failed member fails as a whole.
  for (auto it = group_members_.begin(); it != group_members_.end();) {
    auto& members = it->second;
    int want = group_sizes_[it->first];
    if (static_cast<int>(members.size()) < want) {
      ++it;
      continue;
    }
    std::string error;
    for (const auto& m : members)
      if (m.type == ResponseType::kError && error.empty()) error = m.error;
    group_sizes_.erase(it->first);
    for (auto& m : members) {
      if (!error.empty()) {
        m.type = ResponseType::kError;
        m.error = error;
      }
      out.push_back(std::move(m));
    }
    it = group_members_.erase(it);
  }
  if (!joined_ranks_.empty() && static_cast<int>(joined_ranks_.size()) == size_) {
    Response j;
    j.type = ResponseType::kJoin;
    j.names = {"__hvd.join"};
    j.shapes = {{}};
    j.last_joined_rank = last_joined_;
    j.contributors = 0;
    out.push_back(std::move(j));
    joined_ranks_.clear();
    last_joined_ = -1;
  }
  return out;
}

Response Controller::build_response(const std::string& name) {
  TableEntry& e = table_[name];
  std::vector<const Request*> reqs;
  for (const auto& q : e.requests)
    if (q.rank != -1) reqs.push_back(&q);
  const Request& a = *reqs.front();
  const std::string op = request_type_name(a.type);
  if (!a.group.empty()) group_sizes_[a.group] = std::max(group_sizes_[a.group], a.group_size);
  Response resp;
  resp.type = static_cast<ResponseType>(a.type);
  resp.names = {name};
  resp.shapes = {a.shape};
  resp.dtype = a.dtype;
  resp.reduce_op = a.reduce_op;
  resp.device_kind = a.device.kind;
  resp.root = a.root;
  resp.prescale = a.prescale;
  resp.postscale = a.postscale;
  resp.contributors = static_cast<int32_t>(reqs.size());
  resp.group = a.group;

  auto fail = [&](const std::string& why) {
    Response err;
    err.type = ResponseType::kError;
    err.names = {name};
    err.shapes = {a.shape};
    err.group = a.group;
    err.error = op + " of '" + name + "' failed: " + why;
    return err;
  };
  auto who = [](const Request& q) { return "rank " + std::to_string(q.rank); };

  for (const Request* q : reqs)
    if (!q->error.empty()) return fail(who(*q) + ": " + q->error);
  for (const Request* q : reqs) {
    const Request& b = *q;
    if (b.type != a.type)
      return fail(who(b) + " called " + request_type_name(b.type) + ", " + who(a) + " called " +
                  op + ". Every rank must call the same collective for '" + name + "'.");
    if (b.dtype != a.dtype)
      return fail(who(b) + " sent dtype " + dtype_name(b.dtype) + ", " + who(a) + " sent " +
                  dtype_name(a.dtype) + ". Every rank must pass the same dtype for '" + name +
                  "'.");
    if (b.device.kind != a.device.kind)
      return fail(who(b) + " sent a " + device_name(b.device) + " tensor, " + who(a) + " a " +
                  device_name(a.device) + " tensor. Every rank must pass '" + name +
                  "' on the same kind of device.");
    bool first_free = a.type == RequestType::kAllgather || a.type == RequestType::kAlltoall;
    bool shape_ok = first_free
                        ? (b.shape.size() == a.shape.size() &&
                           std::equal(b.shape.begin() + (b.shape.empty() ? 0 : 1), b.shape.end(),
                                      a.shape.begin() + (a.shape.empty() ? 0 : 1)))
                        : b.shape == a.shape;
    if (!shape_ok)
      return fail(who(b) + " sent shape " + shape_string(b.shape) + ", " + who(a) + " sent " +
                  shape_string(a.shape) +
                  (first_free
                       ? ". Only the first dimension may differ between ranks for " + op + "."
                       : ". Every rank must pass the same shape for '" + name + "'."));
    if (a.type == RequestType::kAllreduce || a.type == RequestType::kReducescatter) {
      if (b.reduce_op != a.reduce_op)
        return fail(who(b) + " asked for reduce op " + reduce_op_name(b.reduce_op) + ", " + who(a) +
                    " for " + reduce_op_name(a.reduce_op) +
                    ". Every rank must use the same reduce op for '" + name + "'.");
      if (b.prescale != a.prescale || b.postscale != a.postscale)
        return fail(who(b) + " sent prescale " + fmt_double(b.prescale) + " and postscale " +
                    fmt_double(b.postscale) + ", " + who(a) + " sent prescale " +
                    fmt_double(a.prescale) + " and postscale " + fmt_double(a.postscale) +
                    ". Every rank must use the same scale factors for '" + name + "'.");
    }
    if (a.type == RequestType::kBroadcast && b.root != a.root)
      return fail(who(b) + " gave root " + std::to_string(b.root) + ", " + who(a) + " gave root " +
                  std::to_string(a.root) + ". Every rank must name the same root for '" + name +
                  "'.");
    if (b.group != a.group || b.group_size != a.group_size)
      return fail(who(b) + " submitted it in group '" + b.group + "' of " +
                  std::to_string(b.group_size) + ", " + who(a) + " in group '" + a.group + "' of " +
                  std::to_string(a.group_size) + ".");
  }
  if (!joined_ranks_.empty()) {
    if (a.type == RequestType::kBroadcast && e.requests[a.root].rank == -1)
      return fail("its root rank " + std::to_string(a.root) +
                  " has already called join(), so it has no data to send.");
    if (a.type == RequestType::kAlltoall && static_cast<int>(reqs.size()) < size_)
      return fail(
          "alltoall cannot run while ranks have called join(); call it before join() on every "
          "rank.");
  }
  if (a.type == RequestType::kAllgather) {
    resp.first_dims.assign(size_, 0);
    for (const Request* q : reqs) resp.first_dims[q->rank] = q->shape.empty() ? 1 : q->shape[0];
  }
  return resp;
}

std::vector<Controller::Stall> Controller::stalled(double older_than_seconds) const {
  std::vector<Stall> out;
  auto now = std::chrono::steady_clock::now();
  for (const auto& name : arrival_) {
    const TableEntry& e = table_.at(name);
    double age = std::chrono::duration<double>(now - e.first_seen).count();
    if (age < older_than_seconds) continue;
    Stall s;
    s.name = name;
    s.seconds = age;
    for (int r = 0; r < size_; ++r) {
      if (e.requests[r].rank != -1)
        s.submitted_ranks.push_back(r);
      else if (!joined_ranks_.count(r))
        s.missing_ranks.push_back(r);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hvd
