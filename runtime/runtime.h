#pragma once

// The process-wide runtime: its lifecycle. It initialises MPI (unless the program did), builds the
// global process set (runtime/process_set.h: communicators, queue, controller, ops, executor) and
// what every process set shares (runtime/services.h: the GPU backend, the fusion buffer, the copy
// helpers, the watchdog, rank 0's timeline, the live parameters), adds and removes the other sets
// when every rank asks for it, runs the background thread that cycles through the sets, and takes
// it all down in order on shutdown. The free functions of the public API delegate to the one
// Runtime instance (runtime/api.cc).
//
// Threading: the constructor and shutdown() run on a user thread (both are collective over MPI);
// from construction to shutdown, every MPI call on the world's communicators is made by the
// background thread (the watchdog thread uses a communicator of its own). enqueue() and the
// topology getters may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/gpu_assignment.h"
#include "comm/mpi_context.h"
#include "common/config.h"
#include "hvd/collectives.h"
#include "runtime/process_set.h"
#include "runtime/services.h"
#include "runtime/straggler.h"
#include "runtime/tensor_queue.h"

namespace hvd {

class Runtime {
 public:
  using PeerLossHandler = SharedServices::PeerLossHandler;

  // Initialises MPI unless it is already (then `owns_mpi` is false and MPI is never finalised by
  // us), builds the communicators and starts the background thread.
  explicit Runtime(const Config& config, PeerLossHandler on_peer_loss = {});
  ~Runtime();

  const comm::MpiTopology& topology() const { return world_->mpi().topology(); }
  const Config& config() const { return services_->config(); }
  const cluster::GpuAssignment& gpu_assignment() const { return services_->gpu_assignment(); }

  // Deterministic reductions (HVD_DETERMINISTIC; hvd::set_deterministic()): read by every
  // reduction's submission, which carries it to rank 0 (any thread).
  bool deterministic() const { return deterministic_.load(std::memory_order_relaxed); }
  void set_deterministic(bool on) { deterministic_.store(on, std::memory_order_relaxed); }

  // The global set's straggler measures (runtime/straggler.h; any thread); null in a job of one
  // rank. hvd::straggler_report() takes its window outside the runtime's count of calls (it waits).
  std::shared_ptr<StragglerWindow> straggler_window() const {
    return services_->straggler_window();
  }
  // The live parameters (runtime/parameters.h) and, with HVD_AUTOTUNE, their tuner (null: none).
  const Parameters& parameters() const { return services_->parameters(); }
  std::shared_ptr<const Autotuner> tuner() const { return services_->tuner(); }

  // The global process set (any thread; lives as long as the runtime).
  ProcessSetState& world() { return *world_; }
  // Every process set by id (runtime/process_set.h; lookups from any thread).
  ProcessSetTable& process_sets() { return *sets_; }
  // Wakes the background thread (runtime/handle.h): a first request, shutdown, a user thread
  // blocked on a queued request. Each handle that goes through a queue keeps it (any thread).
  const std::shared_ptr<detail::WakeSignal>& wake_signal() const { return services_->wake(); }

  // Hands tensors to `set`'s queue; the handle completes when all of them are done.
  // Throws InvalidArgumentError for a name already in flight, or the runtime's failure after the
  // background thread stopped.
  Handle enqueue(ProcessSetState& set, std::vector<TensorTableEntry> entries,
                 std::vector<Request> requests, std::shared_ptr<detail::HandleState> state);
  // enqueue() of one tensor (every collective but grouped allreduce). The entry and the request
  // are moved from only when accepted.
  Handle enqueue_one(ProcessSetState& set, TensorTableEntry&& entry, Request&& request,
                     std::shared_ptr<detail::HandleState> state);
  // allreduce_async of a global-set tensor whose response is cached: into its lane
  // (runtime/lanes.h). Returns false, with nothing done, when it has none (then
  // enqueue_one()); moves the tensors only when it returns true. Throws as enqueue() does.
  bool enqueue_lane(const std::string& name, TensorRef& in, TensorRef& out, ReduceOp op,
                    double prescale, double postscale,
                    const std::shared_ptr<detail::HandleState>& state);

  // Collective: stops the background thread after the cycle in which every rank has seen the
  // request, fails what is still pending, frees the communicators, finalises MPI if we own it.
  void shutdown();

 private:
  // runtime/wiring.cc: MPI and the global set's communicators, built first by the constructor.
  void build_world();
  int init_mpi();  // returns the thread level MPI provides
  void wake();     // after the first request since the last cycle
  // add(): TensorQueue::add or add_one; wakes the background thread when it says so. `names`: the
  // timeline's spans to open (empty without a timeline).
  template <class Add>
  void submit_to_queue(const std::vector<std::string>& names, Add&& add);
  bool runs_inline(const TensorTableEntry& entry, const Request& request) const;
  bool launches_inline(const TensorRef& in, const TensorRef& out, RequestType type,
                       bool deterministic) const;
  void loop();

  // Built by the constructor and torn down by shutdown(), both on the user thread that runs
  // init()/shutdown(); in between used by the background thread, except where a comment says.
  // Destroyed in reverse: the sets, then what they share, then the global set's communicators.
  bool owns_mpi_ = false;
  bool thread_multiple_ = false;  // MPI provides MPI_THREAD_MULTIPLE
  // HVD_SINGLE_RANK_INLINE_GPU, in a one-rank job with MPI_THREAD_MULTIPLE and NCCL
  // (launches_inline)
  bool inline_gpu_ = false;
  bool finished_ = false;                     // shutdown() ran
  std::shared_ptr<ProcessSetState> world_;    // its communicators first: the rest is built on them
  std::unique_ptr<SharedServices> services_;  // the Config from the start; the rest on world_
  std::unique_ptr<ProcessSetTable> sets_;     // the global set, then those added

  // Shared by user threads and the background thread.
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> broken_{false};  // a communication failure stopped the background thread
  std::atomic<bool> deterministic_{false};
  // Held by the background thread through each cycle (negotiation and execution), and by a user
  // thread running an operation of a one-rank job itself (enqueue_one): they take turns with the
  // ops, the fusion buffer and the communicators.
  std::mutex exec_mu_;

  std::thread thread_;  // the background thread: loop()
};

}  // namespace hvd
