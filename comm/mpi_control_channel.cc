#include "comm/mpi_control_channel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "comm/control_tree.h"
#include "comm/mpi_context.h"
#include "common/backoff.h"
#include "common/logging.h"
#include "hvd/error.h"

namespace hvd::comm {
namespace {

constexpr int kTag = 7301;
// The first words of a star reply: [status | first lost rank | bits...].
constexpr uint64_t kOk = 0, kLost = 1;
constexpr int kReplyHeader = 2;
// The tree's messages: [status | first lost rank | seconds waited (a double's bits) | bits...].
constexpr int kUpTag = 7302, kDownTag = 7303, kNoticeTag = 7304;
constexpr int kTreeHeader = 3;

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Calls `poll` (true: the wait is over) with the back-off until it returns true or the deadline
// passes; returns whether it did.
template <typename Poll>
bool poll_until(Clock::time_point deadline, Poll&& poll) {
  for (Backoff backoff;; backoff.pause()) {
    if (poll()) return true;
    // The clock is read every 256 polls while spinning, and on every poll once the loop yields or
    // sleeps: on an overloaded machine each sleep can last tens of milliseconds, and 256 of them
    // made the deadline tens of seconds late (measured: a frozen rank named after 66 s instead
    // of 35).
    if ((!backoff.spinning() || (backoff.polls() & 255) == 255) && Clock::now() > deadline)
      return false;
  }
}

// Polls until every request completes or the deadline passes; returns the unfinished indices.
// Completed requests are MPI_REQUEST_NULL afterwards, so a second call tests them done at once.
std::vector<int> wait_all(std::vector<MPI_Request>& reqs, Clock::time_point deadline) {
  std::vector<char> done(reqs.size(), 0);
  size_t left = reqs.size();
  poll_until(deadline, [&] {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      MPI_CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
      if (flag) {
        done[i] = 1;
        --left;
      }
    }
    return left == 0;
  });
  std::vector<int> missing;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (!done[i]) missing.push_back(static_cast<int>(i));
  return missing;
}

uint64_t seconds_word(double s) {
  uint64_t w = 0;
  static_assert(sizeof(w) == sizeof(s));
  std::memcpy(&w, &s, sizeof(w));
  return w;
}
double word_seconds(uint64_t w) {
  double s = 0;
  std::memcpy(&s, &w, sizeof(s));
  return s;
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

ControlTopology parse_control_topology(const std::string& value, int size) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "star") return resolve_control_topology(ControlTopologySetting::kStar, size);
  if (v == "tree") return resolve_control_topology(ControlTopologySetting::kTree, size);
  if (v == "auto") return resolve_control_topology(ControlTopologySetting::kAuto, size);
  throw InvalidArgumentError("HVD_CONTROL_TOPOLOGY='" + value +
                             "' is not valid: expected one of auto|tree|star.");
}

ControlTopology resolve_control_topology(ControlTopologySetting setting, int size) {
  switch (setting) {
    case ControlTopologySetting::kStar:
      return ControlTopology::kStar;
    case ControlTopologySetting::kTree:
      return ControlTopology::kTree;
    case ControlTopologySetting::kAuto:
      break;
  }
  return size >= kAutoTreeFromRanks ? ControlTopology::kTree : ControlTopology::kStar;
}

MpiControlChannel::MpiControlChannel(MPI_Comm comm, ControlTopology topology)
    : comm_(comm), topology_(topology) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  // Ranks that run different shapes never meet (each waits on tags the other does not send, and
  // the deadlines would find every rank alive: a hang). Compare once, here, on every rank.
  int mine[2] = {static_cast<int>(topology_), rank_}, lo[2] = {0, 0}, hi[2] = {0, 0};
  MPI_CHECK(MPI_Allreduce(mine, lo, 1, MPI_2INT, MPI_MINLOC, comm_));
  MPI_CHECK(MPI_Allreduce(mine, hi, 1, MPI_2INT, MPI_MAXLOC, comm_));
  if (lo[0] != hi[0]) {
    auto name = [](int t) {
      return t == static_cast<int>(ControlTopology::kStar) ? "star" : "tree";
    };
    throw InvalidArgumentError(
        "HVD_CONTROL_TOPOLOGY differs between ranks: rank " + std::to_string(lo[1]) + " has '" +
        name(lo[0]) + "', rank " + std::to_string(hi[1]) + " has '" + name(hi[0]) +
        "'. Give every rank the same value (mpirun -x HVD_CONTROL_TOPOLOGY).");
  }
  if (topology_ == ControlTopology::kTree) {
    children_ = tree_children(rank_, size_);
    parent_ = tree_parent(rank_);
  }
}

StarOutcome MpiControlChannel::star_and(std::vector<uint64_t>& bits, const StarPatience& patience) {
  if (size_ == 1) return {};
  if (topology_ == ControlTopology::kStar)
    return rank_ == 0 ? collect_and_reply(bits, patience) : send_and_wait(bits, patience);
  if (rank_ != 0 && notice_request_ == MPI_REQUEST_NULL && notice_.empty()) {
    notice_.assign(kTreeHeader, 0);
    MPI_CHECK(MPI_Irecv(notice_.data(), kTreeHeader, MPI_UINT64_T, 0, kNoticeTag, comm_,
                        &notice_request_));
  }
  Up up = tree_up(bits, patience);
  if (up.reported) return {StarOutcome::Status::kReported, {up.notice_lost}, 0};
  std::vector<uint64_t> message(kTreeHeader + bits.size(), 0);
  if (rank_ == 0) {
    if (!up.lost.empty()) return tree_lost(up.lost, up.waited);
    std::copy(bits.begin(), bits.end(), message.begin() + kTreeHeader);
    send_later(std::move(message), children_, kDownTag);
    return {};
  }
  message[0] = up.lost.empty() ? kOk : kLost;
  if (!up.lost.empty()) {
    message[1] = static_cast<uint64_t>(up.lost.front());
    message[2] = seconds_word(up.waited);
  } else {
    std::copy(bits.begin(), bits.end(), message.begin() + kTreeHeader);
  }
  send_later(std::move(message), {parent_}, kUpTag);
  return tree_down(bits, patience);
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
    counters_.messages_received += size_ - 1;
    counters_.bytes_received += static_cast<uint64_t>(size_ - 1) * n * sizeof(uint64_t);
    for (int r = 1; r < size_; ++r) combine(bits.data(), in[r].data(), n);
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
  std::vector<int> to;
  for (int r = 1; r < size_; ++r)
    if (std::find(lost.begin(), lost.end(), r) == lost.end()) to.push_back(r);
  send_later(std::move(reply), to, kTag);
  // The survivors should read who was lost before this rank ends: a short, bounded wait.
  if (!lost.empty()) wait_all(replies_.back().requests, after(1.0));
}

// Sends `buffer` to each of `to` without waiting for the sends (see send_replies); they are reaped
// as they complete.
void MpiControlChannel::send_later(std::vector<uint64_t> buffer, const std::vector<int>& to,
                                   int tag) {
  reap_replies();
  PendingReply pending;
  pending.buffer = std::move(buffer);
  const int words = static_cast<int>(pending.buffer.size());
  for (int r : to) {
    pending.requests.emplace_back();
    MPI_CHECK(MPI_Isend(pending.buffer.data(), words, MPI_UINT64_T, r, tag, comm_,
                        &pending.requests.back()));
  }
  counters_.messages_sent += to.size();
  counters_.bytes_sent += to.size() * words * sizeof(uint64_t);
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
  counters_.messages_sent += 1;
  counters_.bytes_sent += n * sizeof(uint64_t);
  Waited w = wait_patiently(reqs, {0, 0}, patience);
  if (!w.lost.empty()) return {StarOutcome::Status::kSilent, {0}, w.seconds};
  counters_.messages_received += 1;
  counters_.bytes_received += (n + kReplyHeader) * sizeof(uint64_t);
  if (reply[0] == kLost) return {StarOutcome::Status::kReported, {static_cast<int>(reply[1])}, 0};
  std::copy(reply.begin() + kReplyHeader, reply.end(), bits.begin());
  return {};
}

// Tree, every rank: receives its children's vectors and ANDs them into `bits`. At each deadline
// the silent children's subtrees are shown to patience.silent; a child's report of a lost rank
// ends the wait at once.
MpiControlChannel::Up MpiControlChannel::tree_up(std::vector<uint64_t>& bits,
                                                 const StarPatience& patience) {
  const size_t n = bits.size(), k = children_.size();
  Up up;
  if (k == 0) {
    if (notice_arrived()) up = {{}, 0, true, static_cast<int>(notice_[1])};
    return up;
  }
  std::vector<std::vector<uint64_t>> in(k, std::vector<uint64_t>(kTreeHeader + n));
  std::vector<MPI_Request> reqs(k);
  for (size_t i = 0; i < k; ++i)
    MPI_CHECK(MPI_Irecv(in[i].data(), static_cast<int>(kTreeHeader + n), MPI_UINT64_T, children_[i],
                        kUpTag, comm_, &reqs[i]));
  std::vector<char> done(k, 0);
  size_t left = k;
  int report = -1;  // the child whose message reports a lost rank
  auto poll = [&] {
    for (size_t i = 0; i < k; ++i) {
      if (done[i]) continue;
      int flag = 0;
      MPI_CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
      if (!flag) continue;
      done[i] = 1;
      --left;
      counters_.messages_received += 1;
      counters_.bytes_received += (kTreeHeader + n) * sizeof(uint64_t);
      if (in[i][0] == kLost) report = static_cast<int>(i);
    }
    return left == 0 || report >= 0 || notice_arrived();
  };
  double waited = patience.first_seconds;
  bool over = poll_until(after(patience.first_seconds), poll);
  while (!over) {
    std::vector<int> silent;
    for (size_t i = 0; i < k; ++i)
      if (!done[i]) {
        std::vector<int> sub = tree_subtree(children_[i], size_);
        silent.insert(silent.end(), sub.begin(), sub.end());
      }
    up.lost = patience.silent ? patience.silent(silent, waited) : silent;
    if (!up.lost.empty()) break;
    over = poll_until(after(patience.again_seconds), poll);
    waited += patience.again_seconds;
  }
  if (over && notice_arrived()) {
    up.reported = true;
    up.notice_lost = static_cast<int>(notice_[1]);
  } else if (over && report >= 0) {
    up.lost = {static_cast<int>(in[report][1])};
    up.waited = word_seconds(in[report][2]);
  } else if (!up.lost.empty()) {
    up.waited = waited;
  }
  if (up.reported || !up.lost.empty()) {
    for (size_t i = 0; i < k; ++i)
      if (!done[i]) MPI_Cancel(&reqs[i]);  // left pending: this cycle ends the job
    return up;
  }
  for (size_t i = 0; i < k; ++i) combine(bits.data(), in[i].data() + kTreeHeader, n);
  return up;
}

// Tree, ranks other than 0: waits for the AND from the parent (or rank 0's notice) and passes it
// on to the children.
StarOutcome MpiControlChannel::tree_down(std::vector<uint64_t>& bits,
                                         const StarPatience& patience) {
  const size_t n = bits.size();
  std::vector<uint64_t> result(kTreeHeader + n);
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(result.data(), static_cast<int>(kTreeHeader + n), MPI_UINT64_T, parent_,
                      kDownTag, comm_, &req));
  bool arrived = false;
  auto poll = [&] {
    int flag = 0;
    MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    arrived = flag != 0;
    return arrived || notice_arrived();
  };
  double waited = patience.first_seconds;
  bool over = poll_until(after(patience.first_seconds), poll);
  while (!over) {
    // As in the star, the silent one is the coordinator: if rank 0 is alive, it names whoever
    // cut this rank off in its notice.
    if (!(patience.silent ? patience.silent({0}, waited) : std::vector<int>{0}).empty()) {
      MPI_Cancel(&req);
      return {StarOutcome::Status::kSilent, {0}, waited};
    }
    over = poll_until(after(patience.again_seconds), poll);
    waited += patience.again_seconds;
  }
  if (!arrived) {
    MPI_Cancel(&req);
    return {StarOutcome::Status::kReported, {static_cast<int>(notice_[1])}, 0};
  }
  counters_.messages_received += 1;
  counters_.bytes_received += (kTreeHeader + n) * sizeof(uint64_t);
  std::copy(result.begin() + kTreeHeader, result.end(), bits.begin());
  if (!children_.empty()) send_later(std::move(result), children_, kDownTag);
  return {};
}

// Tree, rank 0: ranks were lost (found here or reported from below): tells every other rank but
// them, directly (a lost interior rank cuts its subtree off), and reports them.
StarOutcome MpiControlChannel::tree_lost(const std::vector<int>& lost, double waited) {
  std::vector<uint64_t> notice(kTreeHeader, 0);
  notice[0] = kLost;
  notice[1] = static_cast<uint64_t>(lost.front());
  std::vector<int> to;
  for (int r = 1; r < size_; ++r)
    if (std::find(lost.begin(), lost.end(), r) == lost.end()) to.push_back(r);
  send_later(std::move(notice), to, kNoticeTag);
  // The survivors should read who was lost before this rank ends: a short, bounded wait.
  wait_all(replies_.back().requests, after(1.0));
  return {StarOutcome::Status::kSilent, lost, waited};
}

// Tree, ranks other than 0: whether rank 0's lost-rank notice has arrived (it stays arrived).
bool MpiControlChannel::notice_arrived() {
  if (notice_.empty()) return false;
  if (notice_request_ == MPI_REQUEST_NULL) return true;
  int flag = 0;
  MPI_CHECK(MPI_Test(&notice_request_, &flag, MPI_STATUS_IGNORE));
  if (flag) {
    counters_.messages_received += 1;
    counters_.bytes_received += kTreeHeader * sizeof(uint64_t);
  }
  return flag != 0;
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
  // No notice came: withdraw its receive, so that nothing is pending when MPI shuts down.
  if (notice_request_ != MPI_REQUEST_NULL) {
    MPI_CHECK(MPI_Cancel(&notice_request_));
    MPI_CHECK(MPI_Wait(&notice_request_, MPI_STATUS_IGNORE));
    notice_.clear();
  }
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
