#pragma once

// A ControlChannel (comm/control_channel.h) for N ranks that are threads of one process, as Gloo's
// tests run their ranks: the ranks share an InProcessHub (mailboxes per pair of ranks under one
// mutex and condition variable), and each rank's thread uses its own channel(rank). The star AND
// behaves as the MPI one does (rank 0 collects, ANDs and replies; a deadline, then
// StarPatience::silent, for ranks that stay silent; a lost-rank notice in rank 0's reply).
//
// drop(rank) makes a rank stop answering: its later messages are discarded and its own calls
// throw, so that the others see silence. A gather or broadcast that waits on a dropped rank (or
// waits longer than kCollectiveTimeout) throws CommunicationError, as MPI would report an error.
//
// The hub counts each rank's gathers (the slow path), so a test can tell the fast path from the
// slow one.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/control_channel.h"
#include "hvd/error.h"

namespace hvd::testing {

class InProcessHub {
 public:
  static constexpr std::chrono::seconds kCollectiveTimeout{30};

  explicit InProcessHub(int size) : size_(size), dropped_(size, false), gathers_(size, 0) {
    boxes_.resize(size, std::vector<Box>(size));
  }

  std::unique_ptr<comm::ControlChannel> channel(int rank);

  void drop(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    dropped_[rank] = true;
    cv_.notify_all();
  }
  bool dropped(int rank) const {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_[rank];
  }
  // The ranks of `ranks` that were dropped (a liveness probe for ControllerOptions::unresponsive).
  std::vector<int> unresponsive(const std::vector<int>& ranks) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> out;
    for (int r : ranks)
      if (dropped_[r]) out.push_back(r);
    return out;
  }
  int gathers(int rank) const {
    std::lock_guard<std::mutex> lock(mu_);
    return gathers_[rank];
  }
  int size() const { return size_; }

 private:
  friend class InProcessChannel;
  // Messages from one rank to another, in order, one queue per kind of message.
  struct Box {
    std::deque<std::vector<uint64_t>> words;
    std::deque<std::string> bytes;
  };

  int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> dropped_;
  std::vector<int> gathers_;
  std::vector<std::vector<Box>> boxes_;  // [to][from]
};

class InProcessChannel : public comm::ControlChannel {
 public:
  InProcessChannel(InProcessHub& hub, int rank) : hub_(hub), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_.size_; }

  comm::StarOutcome star_and(std::vector<uint64_t>& bits,
                             const comm::StarPatience& patience) override {
    check_not_dropped();
    if (size() == 1) return {};
    return rank_ == 0 ? collect_and_reply(bits, patience) : send_and_wait(bits, patience);
  }

  std::vector<std::string> gather(const std::string& mine) override {
    check_not_dropped();
    std::unique_lock<std::mutex> lock(hub_.mu_);
    ++hub_.gathers_[rank_];
    if (rank_ != 0) {
      send_locked(0, mine);
      return {};
    }
    std::vector<std::string> all(size());
    all[0] = mine;
    for (int r = 1; r < size(); ++r) all[r] = receive_locked(lock, r);
    return all;
  }

  void broadcast(std::string& data) override {
    check_not_dropped();
    std::unique_lock<std::mutex> lock(hub_.mu_);
    if (rank_ == 0) {
      for (int r = 1; r < size(); ++r) send_locked(r, data);
    } else {
      data = receive_locked(lock, 0);
    }
  }

  void finish(double) override {}

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kOk = 0, kLost = 1;

  static Clock::time_point after(double seconds) {
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  void check_not_dropped() const {
    if (hub_.dropped(rank_))
      throw CommunicationError("rank " + std::to_string(rank_) + " was dropped by the test");
  }

  void send_locked(int to, std::vector<uint64_t> words) {
    if (!hub_.dropped_[rank_]) hub_.boxes_[to][rank_].words.push_back(std::move(words));
    hub_.cv_.notify_all();
  }
  void send_locked(int to, const std::string& bytes) {
    if (!hub_.dropped_[rank_]) hub_.boxes_[to][rank_].bytes.push_back(bytes);
    hub_.cv_.notify_all();
  }
  std::string receive_locked(std::unique_lock<std::mutex>& lock, int from) {
    auto& q = hub_.boxes_[rank_][from].bytes;
    const auto deadline = Clock::now() + InProcessHub::kCollectiveTimeout;
    if (!hub_.cv_.wait_until(lock, deadline, [&] { return !q.empty() || hub_.dropped_[from]; }) ||
        q.empty())
      throw CommunicationError("in-process channel: rank " + std::to_string(from) +
                               " did not take part in the collective");
    std::string out = std::move(q.front());
    q.pop_front();
    return out;
  }

  // Waits until a message from every rank in `from` whose slot in `got` is empty has arrived, or
  // the deadline; returns the ranks still missing.
  std::vector<int> wait_words(const std::vector<int>& from, std::vector<std::vector<uint64_t>>& got,
                              std::vector<bool>& have, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(hub_.mu_);
    auto poll = [&] {
      bool all = true;
      for (int r : from) {
        auto& q = hub_.boxes_[rank_][r].words;
        if (!have[r] && !q.empty()) {
          got[r] = std::move(q.front());
          q.pop_front();
          have[r] = true;
        }
        all = all && have[r];
      }
      return all;
    };
    hub_.cv_.wait_until(lock, deadline, poll);
    std::vector<int> missing;
    for (int r : from)
      if (!have[r]) missing.push_back(r);
    return missing;
  }

  struct Waited {
    std::vector<int> lost;
    double seconds = 0;
  };
  Waited wait_patiently(const std::vector<int>& from, std::vector<std::vector<uint64_t>>& got,
                        const comm::StarPatience& patience) {
    std::vector<bool> have(size(), false);
    Waited w;
    w.seconds = patience.first_seconds;
    std::vector<int> missing = wait_words(from, got, have, after(patience.first_seconds));
    while (!missing.empty()) {
      w.lost = patience.silent ? patience.silent(missing, w.seconds) : missing;
      if (!w.lost.empty()) return w;
      missing = wait_words(from, got, have, after(patience.again_seconds));
      w.seconds += patience.again_seconds;
    }
    return w;
  }

  comm::StarOutcome collect_and_reply(std::vector<uint64_t>& bits,
                                      const comm::StarPatience& patience) {
    std::vector<int> others;
    for (int r = 1; r < size(); ++r) others.push_back(r);
    std::vector<std::vector<uint64_t>> in(size());
    Waited w = wait_patiently(others, in, patience);
    std::vector<uint64_t> reply(bits.size() + 2, 0);
    if (w.lost.empty()) {
      for (int r = 1; r < size(); ++r) combine(bits.data(), in[r].data(), bits.size());
      reply[0] = kOk;
      std::copy(bits.begin(), bits.end(), reply.begin() + 2);
    } else {
      reply[0] = kLost;
      reply[1] = static_cast<uint64_t>(w.lost.front());
    }
    {
      std::lock_guard<std::mutex> lock(hub_.mu_);
      for (int r = 1; r < size(); ++r)
        if (std::find(w.lost.begin(), w.lost.end(), r) == w.lost.end()) send_locked(r, reply);
    }
    if (w.lost.empty()) return {};
    return {comm::StarOutcome::Status::kSilent, w.lost, w.seconds};
  }

  comm::StarOutcome send_and_wait(std::vector<uint64_t>& bits, const comm::StarPatience& patience) {
    {
      std::lock_guard<std::mutex> lock(hub_.mu_);
      send_locked(0, bits);
    }
    std::vector<std::vector<uint64_t>> in(size());
    Waited w = wait_patiently({0}, in, patience);
    if (!w.lost.empty()) return {comm::StarOutcome::Status::kSilent, {0}, w.seconds};
    const std::vector<uint64_t>& reply = in[0];
    if (reply[0] == kLost)
      return {comm::StarOutcome::Status::kReported, {static_cast<int>(reply[1])}, 0};
    std::copy(reply.begin() + 2, reply.end(), bits.begin());
    return {};
  }

  InProcessHub& hub_;
  int rank_;
};

inline std::unique_ptr<comm::ControlChannel> InProcessHub::channel(int rank) {
  return std::make_unique<InProcessChannel>(*this, rank);
}

}  // namespace hvd::testing
