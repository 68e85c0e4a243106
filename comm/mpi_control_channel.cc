#include "comm/mpi_control_channel.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/mpi_context.h"
#include "common/backoff.h"
#include "common/logging.h"

namespace hvd::comm {
namespace {

constexpr int kTag = 7301;
// The first words of a star reply: [status | first lost rank | bits...].
constexpr uint64_t kOk = 0, kLost = 1;
constexpr int kReplyHeader = 2;

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Polls until every request completes or the deadline passes; returns the unfinished indices.
// Completed requests are MPI_REQUEST_NULL afterwards, so a second call tests them done at once.
std::vector<int> wait_all(std::vector<MPI_Request>& reqs, Clock::time_point deadline) {
  std::vector<char> done(reqs.size(), 0);
  size_t left = reqs.size();
  for (Backoff backoff; left > 0; backoff.pause()) {
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
    // The clock is read every 256 polls while spinning, and on every poll once the loop yields or
    // sleeps: on an overloaded machine each sleep can last tens of milliseconds, and 256 of them
    // made the deadline tens of seconds late (measured: a frozen rank named after 66 s instead
    // of 35).
    if ((!backoff.spinning() || (backoff.polls() & 255) == 255) && Clock::now() > deadline) break;
  }
  std::vector<int> missing;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (!done[i]) missing.push_back(static_cast<int>(i));
  return missing;
}

struct Waited {
  std::vector<int> lost;  // empty: every request completed
  double seconds = 0;
};

// Waits for `reqs` (request i talks to rank rank_of[i]) with the star's patience: at each deadline
// the ranks still silent are shown to patience.silent, which names the lost ones or lets the wait
// go on.
Waited wait_patiently(std::vector<MPI_Request>& reqs, const std::vector<int>& rank_of,
                      const StarPatience& patience) {
  Waited w;
  w.seconds = patience.first_seconds;
  const auto entered = Clock::now();
  std::vector<int> missing = wait_all(reqs, after(patience.first_seconds));
  HVD_LOG(Trace) << "bit exchange: waited "
                 << std::chrono::duration<double>(Clock::now() - entered).count() << " s for "
                 << reqs.size() - missing.size() << " of " << reqs.size() << " messages";
  while (!missing.empty()) {
    std::vector<int> silent;
    for (int i : missing)
      if (std::find(silent.begin(), silent.end(), rank_of[i]) == silent.end())
        silent.push_back(rank_of[i]);
    w.lost = patience.silent ? patience.silent(silent, w.seconds) : silent;
    if (!w.lost.empty()) return w;
    missing = wait_all(reqs, after(patience.again_seconds));
    w.seconds += patience.again_seconds;
  }
  return w;
}

}  // namespace

MpiControlChannel::MpiControlChannel(MPI_Comm comm) : comm_(comm) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

StarOutcome MpiControlChannel::star_and(std::vector<uint64_t>& bits, const StarPatience& patience) {
  if (size_ == 1) return {};
  return rank_ == 0 ? collect_and_reply(bits, patience) : send_and_wait(bits, patience);
}

// Rank 0: receives every rank's vector, ANDs them with its own and replies; or, when ranks were
// lost, tells every other rank which one (the first) and reports them.
StarOutcome MpiControlChannel::collect_and_reply(std::vector<uint64_t>& bits,
                                                 const StarPatience& patience) {
  const int n = static_cast<int>(bits.size());
  std::vector<std::vector<uint64_t>> in(size_, std::vector<uint64_t>(n));
  std::vector<MPI_Request> reqs(size_ - 1);
  std::vector<int> rank_of(size_ - 1);
  for (int r = 1; r < size_; ++r) {
    rank_of[r - 1] = r;
    MPI_CHECK(MPI_Irecv(in[r].data(), n, MPI_UINT64_T, r, kTag, comm_, &reqs[r - 1]));
  }
  Waited w = wait_patiently(reqs, rank_of, patience);
  std::vector<uint64_t> reply(n + kReplyHeader, 0);
  if (w.lost.empty()) {
    for (int r = 1; r < size_; ++r)
      for (int i = 0; i < n; ++i) bits[i] &= in[r][i];
    reply[0] = kOk;
    std::copy(bits.begin(), bits.end(), reply.begin() + kReplyHeader);
  } else {
    for (int r : w.lost)
      if (r > 0 && r < size_) MPI_Cancel(&reqs[r - 1]);
    reply[0] = kLost;
    reply[1] = static_cast<uint64_t>(w.lost.front());
  }
  send_replies(std::move(reply), w.lost);
  if (w.lost.empty()) return {};
  return {StarOutcome::Status::kSilent, w.lost, w.seconds};
}

// The replies are not waited for here: a send to a rank that has just stopped (frozen, or its link
// cut after its bits arrived) may never complete, and waiting for it cost a whole timeout before
// the next cycle's receive noticed that rank (measured: a frozen rank named after 2x the timeout).
// Earlier replies are reaped as they complete; a rank that stops reading is noticed by the next
// cycle's receive, like any silent rank.
void MpiControlChannel::send_replies(std::vector<uint64_t> reply, const std::vector<int>& lost) {
  reap_replies();
  PendingReply pending;
  pending.buffer = std::move(reply);
  const int words = static_cast<int>(pending.buffer.size());
  for (int r = 1; r < size_; ++r) {
    if (std::find(lost.begin(), lost.end(), r) != lost.end()) continue;
    pending.requests.emplace_back();
    MPI_CHECK(MPI_Isend(pending.buffer.data(), words, MPI_UINT64_T, r, kTag, comm_,
                        &pending.requests.back()));
  }
  // The survivors should read who was lost before this rank ends: a short, bounded wait.
  if (!lost.empty()) wait_all(pending.requests, after(1.0));
  replies_.push_back(std::move(pending));
}

// Another rank: sends its vector to rank 0 and waits for the reply.
StarOutcome MpiControlChannel::send_and_wait(std::vector<uint64_t>& bits,
                                             const StarPatience& patience) {
  const int n = static_cast<int>(bits.size());
  std::vector<uint64_t> reply(n + kReplyHeader, 0);
  std::vector<MPI_Request> reqs(2);
  MPI_CHECK(MPI_Isend(bits.data(), n, MPI_UINT64_T, 0, kTag, comm_, &reqs[0]));
  MPI_CHECK(MPI_Irecv(reply.data(), n + kReplyHeader, MPI_UINT64_T, 0, kTag, comm_, &reqs[1]));
  Waited w = wait_patiently(reqs, {0, 0}, patience);
  if (!w.lost.empty()) return {StarOutcome::Status::kSilent, {0}, w.seconds};
  if (reply[0] == kLost) return {StarOutcome::Status::kReported, {static_cast<int>(reply[1])}, 0};
  std::copy(reply.begin() + kReplyHeader, reply.end(), bits.begin());
  return {};
}

void MpiControlChannel::reap_replies() {
  while (!replies_.empty()) {
    int done = 0;
    auto& reqs = replies_.front().requests;
    MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) break;
    replies_.pop_front();
  }
}

void MpiControlChannel::finish(double seconds) {
  const auto until = after(seconds);
  for (reap_replies(); !replies_.empty() && Clock::now() < until; reap_replies())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

std::vector<std::string> MpiControlChannel::gather(const std::string& mine) {
  const int my_len = static_cast<int>(mine.size());
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
  std::vector<std::string> out;
  if (rank_ == 0)
    for (int r = 0; r < size_; ++r) out.emplace_back(all, displs[r], lens[r]);
  return out;
}

void MpiControlChannel::broadcast(std::string& data) {
  uint64_t len = data.size();
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_UINT64_T, 0, comm_));
  data.resize(len);
  MPI_CHECK(MPI_Bcast(data.data(), static_cast<int>(len), MPI_BYTE, 0, comm_));
}

}  // namespace hvd::comm
