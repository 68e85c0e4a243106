#include "comm/watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>

#include "comm/mpi_context.h"
#include "common/logging.h"
#include "common/number_text.h"
#include "common/ranks.h"
#include "hvd/error.h"

namespace hvd::comm {
namespace {

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::steady_clock;

// The liveness probes (probe_comm_): a ping carries its round, the answer is an empty message whose
// tag says the round; a lost-rank notice carries the lost ranks.
constexpr int kPingTag = 0x7001, kLostTag = 0x7002, kPongTagBase = 0x7100;

// How long a liveness probe waits for the answers: a watchdog answers every 100 ms, so seconds are
// only needed on an overloaded node; longer with a longer peer timeout, at most 5 s.
double probe_window_seconds(double peer_timeout_seconds) {
  return std::clamp(peer_timeout_seconds / 6, 3.0, 5.0);
}

int64_t now_ns() {
  return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

// The last sentence of the peer-loss error: what happens next.
std::string what_next(PeerLossAction action, bool handler) {
  std::string then;
  switch (action) {
    case PeerLossAction::kExit:
      then = "ending this process so that the job does not hang.";
      break;
    case PeerLossAction::kAbort:
      then = "aborting this process (HVD_ON_PEER_LOSS=abort).";
      break;
    case PeerLossAction::kNone:
      then =
          "not ending this process (HVD_ON_PEER_LOSS=none): it may stay blocked until the "
          "launcher ends the job.";
      break;
  }
  if (handler) return "Calling the program's peer-loss handler; if it returns, " + then;
  then[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(then[0])));
  return then;
}

}  // namespace

Watchdog::Watchdog(MPI_Comm world, int rank, int size, bool thread_multiple,
                   const WatchdogOptions& options)
    : rank_(rank), size_(size), options_(options) {
  if (size_ <= 1) return;
  if (thread_multiple) MPI_CHECK(MPI_Comm_dup(world, &probe_comm_));
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "hvd-watchdog");
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::op_started(std::function<std::string()> describe) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    op_describe_ = std::move(describe);
  }
  op_started_ns_ = now_ns();
}

void Watchdog::op_finished() {
  op_started_ns_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  op_describe_ = nullptr;  // the operation's response may be gone after this returns
}

void Watchdog::background_stopped() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

void Watchdog::stop() {
  background_stopped();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::free_communicator() {
  if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
}

std::vector<int> Watchdog::probe(const std::vector<int>& ranks) {
  if (!probes()) return {};
  return probe_peers(ranks, false);
}

// Pings `targets` (their watchdog threads answer every 100 ms, whatever their background threads
// are doing) and returns those that did not answer within the probe window. On the watchdog thread
// (`answer_while_waiting`) it answers pings meanwhile. Callable from the watchdog and from the
// background thread at once: every probe has its own round, and the answer's tag carries it.
// Requests to ranks that did not answer are left pending (the process ends next).
std::vector<int> Watchdog::probe_peers(const std::vector<int>& targets, bool answer_while_waiting) {
  const int round = probe_round_.fetch_add(1) + 1;
  const size_t n = targets.size();
  std::vector<int> payload(n, round);
  std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL), recvs(n, MPI_REQUEST_NULL);
  std::vector<bool> answered(n, false), failed(n, false);
  for (size_t i = 0; i < n; ++i) {
    const MpiProgressScope progress;
    if (MPI_Irecv(nullptr, 0, MPI_INT, targets[i], kPongTagBase + (round & 0xFFF), probe_comm_,
                  &recvs[i]) != MPI_SUCCESS ||
        MPI_Isend(&payload[i], 1, MPI_INT, targets[i], kPingTag, probe_comm_, &sends[i]) !=
            MPI_SUCCESS)
      failed[i] = true;  // counts as no answer
  }
  const auto until =
      steady_clock::now() + duration<double>(probe_window_seconds(options_.peer_timeout_seconds));
  while (steady_clock::now() < until) {
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      if (!answered[i] && !failed[i]) {
        int done = 0;
        const MpiProgressScope progress;
        if (MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
          answered[i] = true;
      }
      all = all && answered[i];
    }
    if (all) break;
    if (answer_while_waiting) answer_pings();
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::vector<int> lost;
  for (size_t i = 0; i < n; ++i)
    if (!answered[i]) lost.push_back(targets[i]);
  if (lost.empty()) {
    const MpiProgressScope progress;
    MPI_Waitall(static_cast<int>(n), sends.data(), MPI_STATUSES_IGNORE);
  }
  return lost;
}

void Watchdog::announce_lost(const std::vector<int>& lost) {
  if (!probes()) return;
  std::vector<MPI_Request> notes;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || std::find(lost.begin(), lost.end(), r) != lost.end()) continue;
    notes.emplace_back(MPI_REQUEST_NULL);
    const MpiProgressScope progress;
    MPI_Isend(lost.data(), static_cast<int>(lost.size()), MPI_INT, r, kLostTag, probe_comm_,
              &notes.back());
  }
  const auto until = steady_clock::now() + milliseconds(500);
  for (int all = 0; !all && steady_clock::now() < until;) {
    {
      const MpiProgressScope progress;
      MPI_Testall(static_cast<int>(notes.size()), notes.data(), &all, MPI_STATUSES_IGNORE);
    }
    if (!all) std::this_thread::sleep_for(milliseconds(5));
  }
}

// Answers every ping waiting on probe_comm_ (each ping carries its round; the answer's tag says
// it), handles a lost-rank notice, and forgets the answers that have gone out.
void Watchdog::answer_pings() {
  if (!probes()) return;
  for (int i = 0; i < 64; ++i) {
    int flag = 0;
    MPI_Status st;
    const MpiProgressScope progress;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, probe_comm_, &flag, &st) != MPI_SUCCESS || !flag)
      break;
    int r = 0;
    if (MPI_Recv(&r, 1, MPI_INT, st.MPI_SOURCE, kPingTag, probe_comm_, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      break;
    pongs_.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(nullptr, 0, MPI_INT, st.MPI_SOURCE, kPongTagBase + (r & 0xFFF), probe_comm_,
              &pongs_.back());
  }
  check_lost_notice();
  for (size_t i = 0; i < pongs_.size();) {
    int done = 0;
    const MpiProgressScope progress;
    if (pongs_[i] == MPI_REQUEST_NULL ||
        (MPI_Test(&pongs_[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)) {
      pongs_.erase(pongs_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

// A lost-rank notice from a rank that found a peer gone: the job cannot go on. A background thread
// in the negotiation gets the same news from rank 0 and stops with an error the program can catch:
// give it a second. One stuck in a collective never would: a peer loss.
void Watchdog::check_lost_notice() {
  int flag = 0;
  MPI_Status st;
  std::vector<int> lost;
  {
    const MpiProgressScope progress;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kLostTag, probe_comm_, &flag, &st) != MPI_SUCCESS || !flag)
      return;
    int count = 0;
    MPI_Get_count(&st, MPI_INT, &count);
    lost.resize(static_cast<size_t>(std::max(count, 0)));
    MPI_Recv(lost.data(), count, MPI_INT, st.MPI_SOURCE, kLostTag, probe_comm_, MPI_STATUS_IGNORE);
  }
  const auto until = steady_clock::now() + std::chrono::seconds(1);
  while (!stopped_.load() && op_started_ns_.load() == 0 && steady_clock::now() < until)
    std::this_thread::sleep_for(milliseconds(10));
  if (stopped_.load()) return;
  peer_loss(lost_ranks_message(
      lost, "rank " + std::to_string(st.MPI_SOURCE) + " had no answer from " +
                (lost.size() > 1 ? "them" : "it") + " for HVD_PEER_TIMEOUT_SECONDS=" +
                number_text(options_.peer_timeout_seconds) + " s"));
}

// One data-plane op has been running since `started` (0: none).
void Watchdog::check_op(int64_t started, const std::string& what) {
  const int64_t timeout_ns = static_cast<int64_t>(options_.peer_timeout_seconds * 1e9);
  const int64_t limit_ns = probes() ? timeout_ns : timeout_ns + 5'000'000'000;
  const int64_t now = now_ns();
  if (started == 0 || now - started <= limit_ns) return;
  const std::string timeout = number_text(options_.peer_timeout_seconds);
  const std::string running = std::to_string((now - started) / 1000000000);
  if (!probes()) {
    peer_loss(what + " has not finished after " + running +
              " s: a peer rank died or the network failed in the middle of it "
              "(HVD_PEER_TIMEOUT_SECONDS=" +
              timeout + ").");
    return;
  }
  if (probed_op_ != started) {
    probed_op_ = started;
    next_probe_ns_ = 0;
  }
  if (now < next_probe_ns_) return;
  std::vector<int> others;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) others.push_back(r);
  const std::vector<int> lost = probe_peers(others, true);
  if (!lost.empty()) {
    // Tell every rank that answered, so that each names the lost rank too (rather than a rank it
    // waits for in turn), then declare the loss.
    announce_lost(lost);
    peer_loss(what + " did not complete: " +
              lost_ranks_message(lost, "no answer for " + running +
                                           " s (HVD_PEER_TIMEOUT_SECONDS=" + timeout + ")"));
    return;
  }
  HVD_LOG(Warning) << what << " is still running after " << running
                   << " s; every rank answers, so it is only slow (raise "
                      "HVD_PEER_TIMEOUT_SECONDS to silence this).";
  next_probe_ns_ = now + timeout_ns;
}

void Watchdog::peer_loss(const std::string& message) {
  if (declared_) return;
  declared_ = true;
  const auto handler = options_.handler ? options_.handler() : nullptr;
  HVD_LOG(Error) << message << " " << what_next(options_.action, bool(handler));
  if (handler) handler(message);
  switch (options_.action) {
    case PeerLossAction::kExit:
      std::_Exit(kPeerLossExitCode);
    case PeerLossAction::kAbort:
      std::abort();
    case PeerLossAction::kNone:
      break;
  }
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    cv_.wait_for(lock, milliseconds(probes() ? 100 : 500));
    if (stopped_) break;
    const int64_t started = op_started_ns_.load();
    const std::string what = started != 0 && op_describe_ ? op_describe_() : std::string();
    lock.unlock();
    answer_pings();
    if (!declared_) check_op(started, what);
    lock.lock();
  }
  lock.unlock();
  // Let the answers in flight go out (the other ranks are shutting down too).
  const auto until = steady_clock::now() + milliseconds(200);
  while (!pongs_.empty() && steady_clock::now() < until) {
    answer_pings();
    std::this_thread::sleep_for(milliseconds(5));
  }
  for (auto& r : pongs_) {
    if (r != MPI_REQUEST_NULL) {
      const MpiProgressScope progress;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
}

}  // namespace hvd::comm
