#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <csignal>
#include <memory>
#include <thread>
#include <vector>

#include "common/dtype_math.h"
#include "hvd/error.h"
#include "runtime/controller.h"
#include "runtime/coordinator.h"
#include "runtime/fusion.h"
#include "runtime/group_unit.h"
#include "runtime/handle.h"
#include "runtime/spares.h"

namespace hvd {
namespace {

// The op collective of a response that runs as a batch: a data row of common/op_kind.h, whose
// values ops::CollectiveType shares. A control response never gets here.
ops::CollectiveType collective_of(const Response& r) {
  if (has_flag(r.type, op_flags::kData)) return static_cast<ops::CollectiveType>(r.type);
  throw InternalError(std::string("the executor has no collective for a response of type ") +
                      response_type_name(r.type) + " (code " +
                      std::to_string(static_cast<int>(r.type)) + "): please report this bug.");
}

// "'a', 'b', 'c', 'd' and 2 more"
std::string names_of(const TensorQueue& queue, const Response& r) {
  std::string s;
  for (size_t i = 0; i < r.names.size() && i < 4; ++i)
    s += (i ? "', '" : "") + queue.member_name(r, i);
  if (r.names.size() > 4)
    s += "' and " + std::to_string(r.names.size() - 4) + " more";
  else
    s += "'";
  return "'" + s;
}

std::string what_of(const TensorQueue& queue, const Response& r) {
  return std::string(response_type_name(r.type)) + " of " + names_of(queue, r);
}

void fail_response(TensorQueue& queue, const Response& r, detail::ErrorKind kind,
                   const std::string& message) {
  for (const auto& name : r.names)
    if (auto e = queue.take(name)) e->handle->fail(kind, message);
}

// The timeline row of name n: n itself for the global set (no copy), else the set's prefix and n,
// in *scratch.
const std::string& row_of(const std::string& prefix, const std::string& n, std::string* scratch) {
  if (prefix.empty()) return n;
  *scratch = prefix + n;
  return *scratch;
}

// Ends the op span of a response's names (begin_spans) when the batch is done, however it ends.
struct SpanEnd {
  Timeline* t;
  const Response& r;
  const std::string& span;
  const std::string& prefix;  // the process set's rows (Executor::Executor)
  ~SpanEnd() {
    std::string scratch;
    if (t)
      for (const auto& n : r.names) t->end(row_of(prefix, n, &scratch), span);
  }
};

}  // namespace

// One collective's batch and what it borrows for the op's duration.
struct Executor::Batch {
  ops::OpBatch op;
  // The handles of this rank's tensors (their names and tensors went into op.entries): all that
  // completion needs, one pointer each rather than an entry moved and destroyed per tensor.
  std::vector<std::shared_ptr<detail::HandleState>> handles;
  std::vector<std::vector<std::byte>> stand_ins;  // a joined rank's inputs (and outputs)
  Tensor discarded;                               // a joined rank's results go here
  std::string span;                               // the timeline's op span, "" without
};

Executor::Executor(int rank, TensorQueue& queue, ops::OperationManager& ops, ops::GpuBackend& gpu,
                   comm::Watchdog& watchdog, Timeline* timeline, std::string timeline_prefix,
                   long stop_at_batch, int64_t op_delay_us)
    : queue_(queue),
      ops_(ops),
      gpu_(gpu),
      watchdog_(watchdog),
      timeline_(timeline),
      row_prefix_(std::move(timeline_prefix)),
      rank_(rank),
      stop_at_batch_(stop_at_batch),
      op_delay_us_(op_delay_us) {}

void Executor::perform(const Response& r) {
  if (r.type == ResponseType::kError && r.names.size() == 1 && r.names[0] == kShutdownNotice) {
    shutdown_reason_ = r.error;
    return;
  }
  if (timeline_)
    for (std::string scratch; const auto& n : r.names)
      timeline_->end(row_of(row_prefix_, n, &scratch), "QUEUE");
  if (perform_control(r)) return;
  // A send/recv runs on its two ranks only; the others have no entry for it.
  if (r.type == ResponseType::kSendRecv && rank_ != r.root && rank_ != r.peer) return;
  if (group_unit::is_unit(r)) {
    perform_unit(r);
    return;
  }
  Batch b;
  // The last batch's vectors (emptied, their capacity kept): a job of one rank runs one batch per
  // tensor, and two vectors allocated for each cost more than the rest of the batch's bookkeeping.
  b.handles.swap(handles_spare_);
  b.op.entries.swap(entries_spare_);
  b.op.type = collective_of(r);
  b.op.dtype = r.dtype;
  b.op.reduce_op = r.reduce_op;
  b.op.device.kind = r.device_kind;
  b.op.root = r.root;
  b.op.peer = r.peer;
  b.op.prescale = r.prescale;
  b.op.postscale = r.postscale;
  b.op.contributors = r.contributors;
  b.op.deterministic = r.deterministic;
  b.op.first_dims = r.first_dims;
  take_entries(r, b);
  begin_spans(r, b);
  const SpanEnd span_end{timeline_, r, b.span, row_prefix_};
  execute(r, b);
  recycle(b);
}

// The entries' names go to the spares, for the next submissions (runtime/spares.h); the batch's
// vectors, emptied, are kept for the next batch.
void Executor::recycle(Batch& b) {
  spare_names_.clear();
  for (auto& e : b.op.entries)  // (a lane's entry has no name: nothing to keep)
    if (!e.name.empty()) spare_names_.push_back(std::move(e.name));
  detail::Spares::give(&spare_names_, nullptr);
  b.handles.clear();  // (moved out already for a GPU batch, completed on the finalizer thread)
  b.op.entries.clear();
  handles_spare_.swap(b.handles);
  entries_spare_.swap(b.op.entries);
}

void Executor::run_inline(TensorTableEntry&& entry, Request&& request) {
  queue_.add_entry(std::move(entry), request.rank);
  response_for(std::move(request), 1, &inline_response_);
  try {
    perform(inline_response_);
  } catch (const std::exception&) {
    // perform() failed the handle with the error before it let a communication error out.
  }
  detail::Spares::give(&inline_response_.names, &inline_response_.shapes);
}

// A group unit's response (runtime/group_unit.h): the members come from the unit's entry, one
// batch per run of members with the same dtype and device (what plan_fusion makes of a group's
// member responses), each completing the unit's handle once. Every rank has the entry: a unit
// response runs only when every rank's unit request hit the cache.
void Executor::perform_unit(const Response& r) {
  std::optional<TensorTableEntry> unit = queue_.take(r.names[0]);
  if (!unit) return;  // the queue was closed (shutdown), which failed the handle
  if (!unit->members)
    throw InternalError("the entry of group unit '" + r.names[0] +
                        "' has no members: please report this bug.");
  std::vector<TensorRef>& in = unit->members->in;
  std::vector<TensorRef>& out = unit->members->out;
  const size_t n = in.size();
  auto same_run = [&](size_t a, size_t b) {
    return in[a].dtype() == in[b].dtype() && in[a].device() == in[b].device();
  };
  int runs = n > 0 ? 1 : 0;
  for (size_t i = 1; i < n; ++i) runs += same_run(i - 1, i) ? 0 : 1;
  if (stop_agreed_) unit->handle->stop_agreed = true;
  if (runs == 0) {
    unit->handle->complete_one();
    return;
  }
  if (runs > 1) unit->handle->expect_more(runs - 1);
  for (size_t i = 0; i < n;) {
    size_t end = i + 1;
    while (end < n && same_run(i, end)) ++end;
    Batch b;
    b.handles.swap(handles_spare_);
    b.op.entries.swap(entries_spare_);
    b.op.type = ops::CollectiveType::kAllreduce;
    b.op.dtype = in[i].dtype();
    b.op.device = in[i].device();
    b.op.reduce_op = r.reduce_op;
    b.op.prescale = r.prescale;
    b.op.postscale = r.postscale;
    b.op.contributors = r.contributors;
    b.op.deterministic = r.deterministic;
    b.op.entries.reserve(end - i);
    // An op names its entries only in error messages: the batch's first entry (the no-backend
    // message) and, for a device batch, every entry (the wrong-device check). Building the other
    // members' names would cost more than the rest of their bookkeeping.
    const bool name_all = b.op.device.kind != Device::kCPU;
    for (size_t k = i; k < end; ++k) {
      ops::OpEntry oe;
      if (name_all || k == i) {
        group_unit::member_name(r.group, k, &member_);
        detail::Spares::take_name(member_, &oe.name);
      }
      oe.input = std::move(in[k]);
      oe.output = std::move(out[k]);
      b.op.entries.push_back(std::move(oe));
    }
    b.handles.push_back(unit->handle);
    begin_spans(r, b);
    const SpanEnd span_end{timeline_, r, b.span, row_prefix_};
    execute(r, b);
    recycle(b);
    i = end;
  }
}

// Error, join and barrier responses: no data moves. Returns whether `r` was one.
bool Executor::perform_control(const Response& r) {
  switch (r.type) {
    case ResponseType::kError:
      fail_response(queue_, r, detail::ErrorKind::kInvalidArgument, r.error);
      return true;
    case ResponseType::kJoin:
      if (auto e = queue_.take(r.names[0])) {
        e->handle->stop_agreed = stop_agreed_;
        e->handle->set_join_result(r.last_joined_rank);
        e->handle->complete_one();
      }
      return true;
    case ResponseType::kBarrier:
      // Negotiation itself proved that every rank reached the barrier.
      if (auto e = queue_.take(r.names[0])) {
        e->handle->stop_agreed = stop_agreed_;
        e->handle->complete_one();
      }
      return true;
    case ResponseType::kProcessSet:
      // add_process_set()/remove_process_set(): every rank changes its table here, at the same
      // place in the same cycle (runtime/runtime.cc); the handle's result is the set's id.
      if (auto e = queue_.take(r.names[0])) {
        try {
          watchdog_.op_started([&r] { return "process set change '" + r.names[0] + "'"; });
          struct OpDone {
            comm::Watchdog& w;
            ~OpDone() { w.op_finished(); }
          } op_done{watchdog_};
          const int id = on_process_set_ ? on_process_set_(r) : -1;
          e->handle->set_join_result(id);
          e->handle->complete_one();
        } catch (const std::exception& ex) {
          auto [kind, message] = detail::classify(ex);
          e->handle->fail(kind, message);
          if (kind == detail::ErrorKind::kCommunication) throw;
        }
      }
      return true;
    case ResponseType::kAllreduce:
    case ResponseType::kAllgather:
    case ResponseType::kBroadcast:
    case ResponseType::kAlltoall:
    case ResponseType::kReducescatter:
    case ResponseType::kSendRecv:
      break;
  }
  return false;
}

// This rank's entries of the batch, or (a rank that has joined) stand-ins that contribute the
// identity (nothing, for allgather) and whose results are discarded.
void Executor::take_entries(const Response& r, Batch& b) {
  b.handles.reserve(r.names.size());
  b.op.entries.reserve(r.names.size());
  const bool makes_result = ops::makes_result(b.op.type);
  queue_.take_all(r, [&](size_t i, TensorTableEntry* e) {
    ops::OpEntry& oe = b.op.entries.emplace_back();
    if (e) {
      // The op takes the entry's name and tensors; the batch keeps its handle for completion. A
      // lane's entry has no name: an op names its entries only in error messages, the batch's
      // first (the no-backend message) and, for a device batch, every one (the wrong-device
      // check). (Under the queue's lock: member_name() asks the queue, so the name comes after.)
      oe.name = std::move(e->name);
      oe.input = std::move(e->input);
      oe.output = std::move(e->output);
      oe.splits = std::move(e->splits);
      if (makes_result) {  // (an allreduce's handle has no results: HandleState::Results)
        detail::HandleState::Results& res = e->handle->results();
        oe.result = &res.output;
        oe.received_splits = &res.received_splits;
      }
      b.op.device = oe.input.device();
      b.handles.push_back(std::move(e->handle));
      return;
    }
    oe.name = r.names[i];
    std::vector<int64_t> shape = r.shapes[i];
    if (r.type == ResponseType::kAllgather && !shape.empty()) shape[0] = 0;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    b.stand_ins.emplace_back(static_cast<size_t>(n) * dtype_size(r.dtype));
    void* p = b.stand_ins.back().data();
    hvd::fill_identity(r.dtype, r.reduce_op, p, static_cast<size_t>(n));
    oe.input = TensorRef(p, r.dtype, shape);
    oe.output = oe.input;
    oe.result = &b.discarded;
  });
  // The names lanes left out that an op may need: the first entry's, every one of a device batch.
  const size_t named = b.op.device.kind == Device::kCPU ? 1 : b.op.entries.size();
  for (size_t i = 0; i < named && i < b.op.entries.size(); ++i)
    if (b.op.entries[i].name.empty()) b.op.entries[i].name = queue_.member_name(r, i);
}

// The timeline's op span (the op's name in capitals, MPI_ALLREDUCE) and the nested activities.
void Executor::begin_spans(const Response& r, Batch& b) {
  if (!timeline_) return;
  ops::CollectiveOp* op = ops_.select(b.op);
  b.span = op ? op->name() : response_type_name(r.type);
  for (auto& c : b.span) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string args = "{\"fused\":" + std::to_string(r.names.size()) +
                           ",\"bytes\":" + std::to_string(response_bytes(r)) + ",\"dtype\":\"" +
                           dtype_name(r.dtype) + "\"}";
  for (std::string scratch; const auto& n : r.names)
    timeline_->begin(row_of(row_prefix_, n, &scratch), b.span, args);
  b.op.trace = [t = timeline_, &r, &p = row_prefix_](const char* activity, bool begin) {
    std::string scratch;
    for (const auto& n : r.names) {
      const std::string& row = row_of(p, n, &scratch);
      begin ? t->begin(row, activity) : t->end(row, activity);
    }
  };
}

void Executor::execute(const Response& r, Batch& b) {
  watchdog_.op_started([&r, &q = queue_] { return what_of(q, r); });
  struct OpDone {
    comm::Watchdog& w;
    ~OpDone() { w.op_finished(); }
  } op_done{watchdog_};
  if (++batches_ == stop_at_batch_) std::raise(SIGSTOP);
  if (op_delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(op_delay_us_));
  if (stop_agreed_)
    for (auto& h : b.handles) h->stop_agreed = true;
  try {
    ops_.execute(b.op);
  } catch (const std::exception& e) {
    gpu_.discard_pending();
    auto [kind, message] = detail::classify(e);
    const std::string full = message.rfind(std::string(response_type_name(r.type)) + " of", 0) == 0
                                 ? message
                                 : what_of(queue_, r) + " failed: " + message;
    for (auto& h : b.handles) h->fail(kind, full);
    if (kind == detail::ErrorKind::kCommunication) throw;
    return;
  }
  // CPU batches complete here and now; GPU batches when their work on the device is done (on the
  // finalizer thread), so the background thread never waits for the GPU.
  if (b.op.device.kind == Device::kCPU) {
    // Last to first: a user thread waits for its handles in the order it submitted them, so the
    // first one it waits on completes last, and it wakes once instead of once per handle it
    // reaches before this thread does.
    for (auto h = b.handles.rbegin(); h != b.handles.rend(); ++h) (*h)->complete_one();
    return;
  }
  auto done =
      std::make_shared<std::vector<std::shared_ptr<detail::HandleState>>>(std::move(b.handles));
  std::string what = what_of(queue_, r);
  auto complete = [done, what](const std::string& error) {
    for (auto& h : *done) {
      if (error.empty())
        h->complete_one();
      else
        h->fail(detail::ErrorKind::kCommunication, what + " failed: " + error);
    }
  };
  // HVD_ENABLE_ASYNC_COMPLETION: an all-reduce or broadcast that wrote only device tensors
  // completes now, ordered on their streams; anything with a host result (allgather & co, a
  // joined rank's stand-in) still completes when the GPU work is done.
  if (gpu_.async_completion() &&
      (r.type == ResponseType::kAllreduce || r.type == ResponseType::kBroadcast)) {
    std::vector<void*> streams;
    bool device_outputs = true;
    for (const ops::OpEntry& e : b.op.entries) {
      if (e.output.device().kind != Device::kCUDA) {
        device_outputs = false;
        break;
      }
      if (std::find(streams.begin(), streams.end(), e.output.stream()) == streams.end())
        streams.push_back(e.output.stream());
    }
    if (device_outputs) {
      gpu_.finish_ordered(streams, std::move(complete), std::move(what));
      return;
    }
  }
  gpu_.finish(std::move(complete));
}

}  // namespace hvd
