#pragma once

// A process set: a group of ranks that negotiates and runs its operations by itself. It bundles
// everything that the runtime once held a single copy of: the members' communicators
// (comm::MpiContext), the tensor queue its user threads submit to, the controller with its response
// cache and coordinator (rank 0 of the set coordinates), the data-plane ops bound to its
// communicators, the executor and, on its rank 0, the stall inspector. The global set (id 0, every
// rank) is one like any other; hvd::add_process_set() makes more (runtime/runtime.cc).
//
// Every rank knows every set (its id and ranks); only members build the rest. The runtime's one
// background thread runs one cycle of each set it is a member of per loop, in id order: a set's
// cycles pair among its members only (its own channel), so sets are independent, and every rank
// visits them in the same order, so no two ranks can wait for each other across sets.
//
// Threading: constructed on the background thread (the global set: on the thread that runs
// hvd::init()); queue(), info() and the user-side helpers are for any thread; the rest is the
// background thread's.

#include <mpi.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/mpi_context.h"
#include "comm/watchdog.h"
#include "common/config.h"
#include "ops/copy_workers.h"
#include "ops/fusion_buffer.h"
#include "ops/gpu_backend.h"
#include "ops/operation_manager.h"
#include "runtime/controller.h"
#include "runtime/executor.h"
#include "runtime/stall_inspector.h"
#include "runtime/tensor_queue.h"
#include "runtime/test_hooks.h"
#include "runtime/timeline.h"

namespace hvd {

class CyclePacer;

namespace detail {
// What hvd::ProcessSet shows (include/hvd/process_set.h); immutable.
struct ProcessSetInfo {
  int id = 0;
  std::vector<int> ranks;  // global ranks, ascending
  int rank = -1;           // this rank's index in `ranks`; -1: not a member
};
}  // namespace detail

// What every set of one runtime shares: a view of the runtime's SharedServices
// (runtime/services.h), which own the parts and outlive the sets.
struct SetShared {
  const Config* config = nullptr;
  ops::FusionBuffer* fusion_buffer = nullptr;  // one op runs at a time: the sets share it
  ops::CopyWorkers* copy_workers = nullptr;
  ops::GpuBackend* gpu = nullptr;
  comm::Watchdog* watchdog = nullptr;  // the global set's ranks
  Timeline* timeline = nullptr;        // rank 0's (HVD_TIMELINE); a set's rows: timeline_row()
  ControllerOptions controller;        // from the Config; each set adds its own ranks
  StallOptions stall;
  const TestHooks* test_hooks = nullptr;     // the Runtime's (runtime/test_hooks.h)
  std::shared_ptr<detail::WakeSignal> wake;  // for the queue of a set added (runtime/handle.h)
};

class ProcessSetState {
 public:
  // `comm`: the members' communicator (duplicated, then left to the caller), MPI_COMM_NULL on a
  // rank that is not a member. `wake`: the runtime's signal, which the set's queue raises.
  // Collective over `comm`.
  ProcessSetState(int id, std::vector<int> ranks, int global_rank, MPI_Comm comm,
                  int fake_local_size, std::shared_ptr<detail::WakeSignal> wake);
  ~ProcessSetState();
  ProcessSetState(const ProcessSetState&) = delete;
  ProcessSetState& operator=(const ProcessSetState&) = delete;

  // Members: builds the ops, controller, executor and stall inspector (after the shared parts
  // exist; the global set's communicators come first, the shared parts are built on them).
  void start(const SetShared& shared);

  int id() const { return info_->id; }
  bool included() const { return info_->rank >= 0; }
  int rank() const { return info_->rank; }  // in the set; -1: not a member
  int size() const { return static_cast<int>(info_->ranks.size()); }
  const std::vector<int>& ranks() const { return info_->ranks; }
  // This set's index of global rank `g`, or -1.
  int index_of(int global_rank) const;
  const std::shared_ptr<const detail::ProcessSetInfo>& info() const { return info_; }
  // A tensor's row in the timeline: its name, after "set<id>/" for a set other than the global one.
  std::string timeline_row(const std::string& name) const {
    return id() == 0 ? name : "set" + std::to_string(id()) + "/" + name;
  }

  // Members only.
  comm::MpiContext& mpi() { return *mpi_; }
  const comm::MpiContext& mpi() const { return *mpi_; }
  TensorQueue& queue() { return queue_; }
  const TensorQueue& queue() const { return queue_; }
  Controller& controller() { return *controller_; }
  Executor& executor() { return *executor_; }
  StallInspector* stall() { return stall_.get(); }     // the set's rank 0 only
  std::mutex& barrier_mutex() { return barrier_mu_; }  // barrier() calls of this rank take turns
  // The number of this rank's send/recv between these global ranks with this tag so far (any
  // thread): a send and its receive take the same number on their two ranks.
  int64_t next_exchange(int from, int to, int tag);

  // When the set goes (remove_process_set(), shutdown): fails what is still queued on this rank
  // with `message`; later submissions throw it.
  void close(detail::ErrorKind kind, const std::string& message);
  // Background thread, after close(): unless `broken` (a peer was lost: its communicators may
  // involve it, and are never touched again), lets the last replies go and frees the ops, the
  // controller and the communicators.
  void release(bool broken);

 private:
  std::shared_ptr<const detail::ProcessSetInfo> info_;
  std::unique_ptr<comm::MpiContext> mpi_;  // members
  ops::GpuBackend* gpu_ = nullptr;         // start(): the runtime's (a set's NCCL communicators)
  ops::OperationManager ops_;              // after mpi_: its ops point into it
  TensorQueue queue_;                      // any thread (its own mutex)
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<StallInspector> stall_;
  std::unique_ptr<Executor> executor_;
  std::mutex barrier_mu_;
  std::mutex exchanges_mu_;
  std::map<std::tuple<int, int, int>, int64_t> exchanges_;  // next_exchange()
};

// Every process set by id, the global one first; null where one was removed (ids are not reused).
// Changed only by the background thread, in the global set's executor (apply), at the same place on
// every rank; read by user threads under its mutex.
class ProcessSetTable {
 public:
  using Sets = std::vector<std::shared_ptr<ProcessSetState>>;
  explicit ProcessSetTable(std::shared_ptr<ProcessSetState> global);

  // Background thread: the sets as they are (no lock: it is the only writer).
  const Sets& sets() const { return sets_; }
  // Any thread: set `id` for a call `what` of this rank; throws InvalidArgumentError when it does
  // not exist, was removed, or this rank is not a member.
  std::shared_ptr<ProcessSetState> find(int id, const char* what) const;
  // Any thread: every set's description, the global set first (removed ones left out).
  std::vector<std::shared_ptr<const detail::ProcessSetInfo>> infos() const;
  // Any thread: the number of this rank's add_process_set()/remove_process_set() calls so far.
  int64_t next_change() { return changes_.fetch_add(1); }
  // Background thread: applies an add (root -1, the ranks in shapes[0]) or a remove (root: the id)
  // response; returns the set's id. Throws InvalidArgumentError, the same on every rank, for a list
  // that a set has already. Adding splits the global set's communicator (collective over every
  // rank; the members then build the set).
  int apply(const Response& r, const SetShared& shared, int fake_local_size);

  // Background thread: one cycle of every set this rank is a member of, in id order; the global
  // set's cycle carries `flags` (runtime/runtime.cc). With `runs` (the background thread's pacer),
  // a set other than the global one runs on by itself while it is busy (process_set.cc). Returns
  // whether the ranks agreed to shut down; *worked: whether an operation ran. `timeline`: rank 0's,
  // or null.
  bool cycle(const Controller::CycleFlags& flags, Timeline* timeline, bool* worked,
             CyclePacer* runs = nullptr);
  // Background thread: each set's rank 0 inspects its set (runtime/stall_inspector.h); returns
  // whether stalled tensors failed (then hvd shuts down).
  bool check_stalls();

 private:
  bool cycle_once(ProcessSetState& set, const Controller::CycleFlags& mine,
                  Controller::CycleFlags* any, Timeline* timeline);
  bool others_waiting(size_t id) const;  // another set of this rank has requests waiting

  Sets sets_;
  mutable std::mutex mu_;
  std::atomic<int64_t> changes_{0};
};

}  // namespace hvd
