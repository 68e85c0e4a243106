#include "runtime/coordinator.h"

#include <algorithm>
#include <cmath>

#include "common/number_text.h"

namespace hvd {
namespace {

Response error_response(const std::string& name, const std::vector<int64_t>& shape,
                        const std::string& message) {
  Response err;
  err.type = ResponseType::kError;
  err.names = {name};
  err.shapes = {shape};
  err.error = message;
  return err;
}

}  // namespace

// Why rank b's request for `name` does not match rank a's; "" when it does.
std::string Coordinator::mismatch(const Request& a, const Request& b,
                                  const std::string& name) const {
  const std::string op = request_type_name(a.type);
  if (a.type == RequestType::kProcessSet && b.type == a.type &&
      (b.shape != a.shape || b.root != a.root))
    return a.root < 0 && b.root < 0
               ? "add_process_set() failed: " + who(b) + " passed ranks " + shape_string(b.shape) +
                     ", " + who(a) + " passed " + shape_string(a.shape) +
                     ". Every rank must pass the same ranks to add_process_set()."
               : "add_process_set()/remove_process_set() failed: " + who(b) +
                     (b.root < 0 ? " adds a process set, "
                                 : " removes process set " + std::to_string(b.root) + ", ") +
                     who(a) +
                     (a.root < 0 ? " adds one" : " removes process set " + std::to_string(a.root)) +
                     ". Every rank must add and remove process sets in the same order.";
  if (b.type != a.type)
    return who(b) + " called " + request_type_name(b.type) + ", " + who(a) + " called " + op +
           ". Every rank must call the same collective for '" + name + "'.";
  if (b.dtype != a.dtype)
    return who(b) + " sent dtype " + dtype_name(b.dtype) + ", " + who(a) + " sent " +
           dtype_name(a.dtype) + ". Every rank must pass the same dtype for '" + name + "'.";
  if (b.device.kind != a.device.kind)
    return who(b) + " sent a " + device_name(b.device) + " tensor, " + who(a) + " a " +
           device_name(a.device) + " tensor. Every rank must pass '" + name +
           "' on the same kind of device.";
  const bool first_free = has_flag(a.type, op_flags::kFirstDimFree);
  const bool shape_ok =
      first_free ? (b.shape.size() == a.shape.size() &&
                    std::equal(b.shape.begin() + (b.shape.empty() ? 0 : 1), b.shape.end(),
                               a.shape.begin() + (a.shape.empty() ? 0 : 1)))
                 : b.shape == a.shape;
  if (!shape_ok)
    return who(b) + " sent shape " + shape_string(b.shape) + ", " + who(a) + " sent " +
           shape_string(a.shape) +
           (first_free ? ". Only the first dimension may differ between ranks for " + op + "."
                       : ". Every rank must pass the same shape for '" + name + "'.");
  if (has_flag(a.type, op_flags::kReduces)) {
    if (b.reduce_op != a.reduce_op)
      return who(b) + " asked for reduce op " + reduce_op_name(b.reduce_op) + ", " + who(a) +
             " for " + reduce_op_name(a.reduce_op) +
             ". Every rank must use the same reduce op for '" + name + "'.";
    if (b.prescale != a.prescale || b.postscale != a.postscale)
      return who(b) + " sent prescale " + number_text(b.prescale) + " and postscale " +
             number_text(b.postscale) + ", " + who(a) + " sent prescale " +
             number_text(a.prescale) + " and postscale " + number_text(a.postscale) +
             ". Every rank must use the same scale factors for '" + name + "'.";
    if (b.deterministic != a.deterministic)
      return who(b) + (b.deterministic ? " reduces" : " does not reduce") + " '" + name +
             "' deterministically, " + who(a) + (a.deterministic ? " does" : " does not") +
             ". Every rank must set HVD_DETERMINISTIC alike and call hvd::set_deterministic() at "
             "the same point.";
  }
  if (has_flag(a.type, op_flags::kRooted) && b.root != a.root)
    return who(b) + " gave root " + std::to_string(global(b.root)) + ", " + who(a) + " gave root " +
           std::to_string(global(a.root)) + ". Every rank must name the same root for '" + name +
           "'.";
  if (b.group != a.group || b.group_size != a.group_size)
    return who(b) + " submitted it in group '" + b.group + "' of " + std::to_string(b.group_size) +
           ", " + who(a) + " in group '" + a.group + "' of " + std::to_string(a.group_size) + ".";
  return "";
}

// A send (`a` or `b`, whichever comes from the sender) against its receive: the receiver's buffer
// must have the sent dtype and shape. "" when it does.
std::string Coordinator::pair_mismatch(const Request& a, const Request& b) const {
  const Request& send = a.rank == a.root ? a : b;
  const Request& recv = a.rank == a.root ? b : a;
  if (send.dtype == recv.dtype && send.shape == recv.shape) return "";
  return "rank " + std::to_string(global(recv.rank)) + " receives into " + dtype_name(recv.dtype) +
         " " + shape_string(recv.shape) + " but rank " + std::to_string(global(send.rank)) +
         " sent " + dtype_name(send.dtype) + " " + shape_string(send.shape) +
         ". Pass a receive buffer of the sent dtype and shape (send the shape first when it "
         "varies).";
}

void Coordinator::add(std::vector<Request>&& requests) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& r : requests) add_one(std::move(r), now);
}

void Coordinator::add_one(Request&& r, std::chrono::steady_clock::time_point now) {
  if (r.type == RequestType::kJoin) {
    joined_ranks_.insert(r.rank);
    last_joined_ = r.rank;
    return;
  }
  auto [it, inserted] = table_.try_emplace(r.name);
  TableEntry& e = it->second;
  if (inserted) {
    e.requests.assign(size_, Request{});
    for (auto& q : e.requests) q.rank = -1;
    e.first_seen = std::chrono::steady_clock::now();
    arrival_.push_back(r.name);
  }
  if (r.rank < 0 || r.rank >= size_ || e.requests[r.rank].rank != -1) return;
  // The stall clock starts at the first submission on any rank (the sender says how long ago).
  const double waited =
      std::isfinite(r.waited_seconds) ? std::clamp(r.waited_seconds, 0.0, 1e7) : 0.0;
  e.first_seen =
      std::min(e.first_seen, now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(waited)));
  ++e.count;
  e.requests[r.rank] = std::move(r);
}

void Coordinator::fail_stalled(const std::vector<std::pair<std::string, std::string>>& failures,
                               const std::string& shutdown_reason) {
  stall_failures_.insert(stall_failures_.end(), failures.begin(), failures.end());
  if (!shutdown_reason.empty()) shutdown_notice_ = shutdown_reason;
  has_notices_ = true;
}

std::vector<Response> Coordinator::ready() {
  std::vector<Response> out;
  has_notices_ = false;
  release_stall_failures(out);
  release_ready(out);
  release_groups(out);
  release_join(out);
  return out;
}

void Coordinator::release_stall_failures(std::vector<Response>& out) {
  for (const auto& [name, message] : stall_failures_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;
    const Request* any = submitted(it->second);
    out.push_back(error_response(name, any ? any->shape : std::vector<int64_t>{},
                                 std::string(any ? request_type_name(any->type) : "collective") +
                                     " of '" + name + "' failed: " + message));
    table_.erase(it);
    arrival_.erase(std::remove(arrival_.begin(), arrival_.end(), name), arrival_.end());
  }
  stall_failures_.clear();
  if (!shutdown_notice_.empty()) {
    out.push_back(error_response(kShutdownNotice, {}, shutdown_notice_));
    shutdown_notice_.clear();
  }
}

// Tensors every rank that has not joined has submitted, in order of first arrival; members of a
// group wait in group_members_ for the rest of their group.
void Coordinator::release_ready(std::vector<Response>& out) {
  std::vector<std::string> still;
  for (const auto& name : arrival_) {
    if (!is_ready(table_[name])) {
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
}

const Request* Coordinator::submitted(const TableEntry& e) {
  const Request* any = nullptr;
  for (const auto& q : e.requests)
    if (q.rank != -1) any = &q;
  return any;
}

bool Coordinator::is_pair(const Request& r) {
  const OpKindInfo* kind = op_kind(r.type);
  return kind && kind->participants == Participants::kPair;
}

// Who must have submitted (common/op_kind.h): every rank that has not joined, or a send/recv's two.
bool Coordinator::is_ready(const TableEntry& e) const {
  const Request* any = submitted(e);
  if (any == nullptr) return false;
  if (is_pair(*any)) {
    auto has = [&](int r) { return r >= 0 && r < size_ && e.requests[r].rank != -1; };
    return has(any->root) && has(any->peer);
  }
  for (int r = 0; r < size_; ++r)
    if (e.requests[r].rank == -1 && !joined_ranks_.count(r)) return false;
  return true;
}

// Complete groups; a group with any failed member fails as a whole.
void Coordinator::release_groups(std::vector<Response>& out) {
  for (auto it = group_members_.begin(); it != group_members_.end();) {
    auto& members = it->second;
    if (static_cast<int>(members.size()) < group_sizes_[it->first]) {
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
}

void Coordinator::release_join(std::vector<Response>& out) {
  if (joined_ranks_.empty() || static_cast<int>(joined_ranks_.size()) != size_) return;
  Response j;
  j.type = ResponseType::kJoin;
  j.names = {kJoinName};
  j.shapes = {{}};
  j.last_joined_rank = last_joined_;
  j.contributors = 0;
  out.push_back(std::move(j));
  joined_ranks_.clear();
  last_joined_ = -1;
}

Response Coordinator::build_response(const std::string& name) {
  TableEntry& e = table_[name];
  std::vector<const Request*> reqs;
  for (const auto& q : e.requests)
    if (q.rank != -1) reqs.push_back(&q);
  const Request& a = *reqs.front();
  if (!a.group.empty()) group_sizes_[a.group] = std::max(group_sizes_[a.group], a.group_size);
  // (A process set change's messages say what failed themselves: its name is hvd's own.)
  const bool own_words = a.type == RequestType::kProcessSet;
  auto fail = [&](const std::string& why) {
    Response err = error_response(
        name, a.shape,
        own_words ? why
                  : std::string(request_type_name(a.type)) + " of '" + name + "' failed: " + why);
    err.group = a.group;
    return err;
  };
  for (const Request* q : reqs)
    if (!q->error.empty()) return fail(own_words ? q->error : who(*q) + ": " + q->error);
  if (is_pair(a)) {
    for (const Request* q : reqs)
      if (q->type != a.type || q->root != a.root || q->peer != a.peer)
        return fail(who(*q) + " and " + who(a) +
                    " disagree on what it is: every rank must pair each send with one recv.");
    if (reqs.size() == 2)
      if (std::string why = pair_mismatch(*reqs[0], *reqs[1]); !why.empty()) return fail(why);
    Response resp = response_for(a, 2);
    resp.peer = a.peer;
    return resp;
  }
  for (const Request* q : reqs)
    if (std::string why = mismatch(a, *q, name); !why.empty()) return fail(why);
  if (!joined_ranks_.empty()) {
    if (a.type == RequestType::kBroadcast && e.requests[a.root].rank == -1)
      return fail("its root rank " + std::to_string(global(a.root)) +
                  " has already called join(), so it has no data to send.");
    if (a.type == RequestType::kAlltoall && static_cast<int>(reqs.size()) < size_)
      return fail(
          "alltoall cannot run while ranks have called join(); call it before join() on every "
          "rank.");
  }
  Response resp = response_for(a, static_cast<int32_t>(reqs.size()));
  if (a.type == RequestType::kAllgather) {
    resp.first_dims.assign(size_, 0);
    for (const Request* q : reqs) resp.first_dims[q->rank] = q->shape.empty() ? 1 : q->shape[0];
  }
  return resp;
}

namespace {

// The response's fields from the request, into a fresh Response (its vectors may hold spare
// capacity); its name and shape are copied, or moved from an rvalue.
template <typename R>
void response_from(R&& a, int32_t contributors, Response& resp) {
  resp.type = static_cast<ResponseType>(a.type);
  if (a.type == RequestType::kAllgather)
    resp.first_dims.push_back(a.shape.empty() ? 1 : a.shape[0]);
  resp.names.push_back(std::forward<R>(a).name);
  resp.shapes.push_back(std::forward<R>(a).shape);
  resp.dtype = a.dtype;
  resp.reduce_op = a.reduce_op;
  resp.device_kind = a.device.kind;
  resp.root = a.root;
  resp.peer = a.peer;
  resp.prescale = a.prescale;
  resp.postscale = a.postscale;
  resp.deterministic = a.deterministic;
  resp.contributors = contributors;
  resp.group = std::forward<R>(a).group;
}

}  // namespace

Response response_for(const Request& a, int32_t contributors) {
  Response resp;
  response_from(a, contributors, resp);
  return resp;
}

Response response_for(Request&& a, int32_t contributors) {
  Response resp;
  response_from(std::move(a), contributors, resp);
  return resp;
}

void response_for(Request&& a, int32_t contributors, Response* out) {
  out->reset();
  response_from(std::move(a), contributors, *out);
}

std::vector<Coordinator::Stall> Coordinator::stalled(double older_than_seconds) const {
  std::vector<Stall> out;
  auto now = std::chrono::steady_clock::now();
  for (const auto& name : arrival_) {
    const TableEntry& e = table_.at(name);
    double age = std::chrono::duration<double>(now - e.first_seen).count();
    if (age < older_than_seconds) continue;
    Stall s;
    s.name = name;
    s.seconds = age;
    // A send/recv waits for its two ranks only.
    const Request* any = submitted(e);
    const bool pair = any && is_pair(*any);
    for (int r = 0; r < size_; ++r) {
      if (e.requests[r].rank != -1)
        s.submitted_ranks.push_back(global(r));
      else if (pair ? (r == any->root || r == any->peer) : !joined_ranks_.count(r))
        s.missing_ranks.push_back(global(r));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hvd
