#pragma once

// The process-wide runtime: its lifecycle. It initialises MPI (unless the program did), builds
// the communicators, the data-plane ops (ops/backends.h), the controller, the watchdog
// (comm/watchdog.h) and the executor (runtime/executor.h), runs the background thread, and takes
// it all down in order on shutdown. The free functions of the public API delegate to the one
// Runtime instance (runtime/api.cc); nothing else is global.
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
#include "comm/watchdog.h"
#include "common/config.h"
#include "hvd/collectives.h"
#include "ops/copy_workers.h"
#include "ops/fusion_buffer.h"
#include "ops/gpu_backend.h"
#include "ops/operation_manager.h"
#include "runtime/controller.h"
#include "runtime/executor.h"
#include "runtime/stall_inspector.h"
#include "runtime/tensor_queue.h"
#include "runtime/timeline.h"

namespace hvd {

class Runtime {
 public:
  // Returns the program's peer-loss handler (empty: none), called on the watchdog thread when a
  // lost peer leaves this rank blocked in MPI, before HVD_ON_PEER_LOSS applies (comm/watchdog.h);
  // hvd::set_peer_loss_handler() in runtime/api.cc.
  using PeerLossHandler = std::function<std::function<void(const std::string& message)>()>;

  // Initialises MPI unless it is already (then `owns_mpi` is false and MPI is never finalised by
  // us), builds the communicators and starts the background thread.
  explicit Runtime(const Config& config, PeerLossHandler on_peer_loss = {});
  ~Runtime();

  const comm::MpiTopology& topology() const { return mpi_->topology(); }
  const Config& config() const { return config_; }
  const cluster::GpuAssignment& gpu_assignment() const { return gpu_; }

  // Hands tensors to the background thread; the handle completes when all of them are done.
  // Throws InvalidArgumentError for a name already in flight, or the runtime's failure after the
  // background thread stopped.
  Handle enqueue(std::vector<TensorTableEntry> entries, std::vector<Request> requests,
                 std::shared_ptr<detail::HandleState> state);
  // enqueue() of one tensor (every collective but grouped allreduce). The entry and the request
  // are moved from only when accepted.
  Handle enqueue_one(TensorTableEntry&& entry, Request&& request,
                     std::shared_ptr<detail::HandleState> state);
  // allreduce_async of a tensor whose response is cached: into its lane (runtime/tensor_queue.h,
  // "Lanes"). Returns false, with nothing done, when it has none (then enqueue_one()); moves the
  // tensors only when it returns true. Throws as enqueue() does.
  bool enqueue_lane(const std::string& name, TensorRef& in, TensorRef& out, ReduceOp op,
                    double prescale, double postscale,
                    const std::shared_ptr<detail::HandleState>& state);
  std::mutex& barrier_mutex() { return barrier_mu_; }  // barrier() calls of this rank take turns

  // Collective: stops the background thread after the cycle in which every rank has seen the
  // request, fails what is still pending, frees the communicators, finalises MPI if we own it.
  void shutdown();

 private:
  int init_mpi();  // returns the thread level MPI provides
  void build_operations();
  void build_controller(bool thread_multiple, PeerLossHandler on_peer_loss);
  void wake();  // after the first request since the last cycle
  // add(): TensorQueue::add or add_one; wakes the background thread when it says so. `names`: the
  // timeline's spans to open (empty without a timeline).
  template <class Add>
  void submit_to_queue(const std::vector<std::string>& names, Add&& add);
  bool runs_inline(const TensorTableEntry& entry, const Request& request) const;
  void loop();
  void wait_for_work(std::chrono::steady_clock::time_point next_cycle,
                     std::chrono::steady_clock::duration cycle,
                     bool worked);  // in loop(); worked: the cycle performed an operation
  bool check_stalls();              // rank 0: true when stalled tensors fail and hvd shuts down
  // A user thread blocked on requests a cycle popped (`waited`: it waited before the pop) wants the
  // next cycle now, and this rank holds nothing but popped requests (loop()).
  bool next_cycle_now(bool waited) const {
    return (waited || wake_.cycle_wanted()) && queue_.holds_only_popped();
  }

  // Built by the constructor and torn down by shutdown(), both on the user thread that runs
  // init()/shutdown(); in between used by the background thread, except where a comment says.
  Config config_;
  bool owns_mpi_ = false;
  bool thread_multiple_ = false;           // MPI provides MPI_THREAD_MULTIPLE
  bool finished_ = false;                  // shutdown() ran
  std::unique_ptr<comm::MpiContext> mpi_;  // topology(): any thread
  ops::FusionBuffer fusion_buffer_;
  std::unique_ptr<ops::CopyWorkers> copy_workers_;  // before op_manager_: its ops point to it
  cluster::GpuAssignment gpu_;
  std::unique_ptr<ops::GpuBackend> gpu_backend_;  // before op_manager_: its ops point into it
  ops::OperationManager op_manager_;
  TensorQueue queue_;                         // any thread (its own mutex)
  std::unique_ptr<comm::Watchdog> watchdog_;  // its own thread; before its users below
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<StallInspector> stall_;  // rank 0 only
  std::unique_ptr<Timeline> timeline_;     // rank 0 only, with HVD_TIMELINE; any thread
  std::unique_ptr<Executor> executor_;

  // Shared by user threads and the background thread.
  std::mutex barrier_mu_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> broken_{false};  // a communication failure stopped the background thread
  // Held by the background thread through each cycle (negotiation and execution), and by a user
  // thread running an operation of a one-rank job itself (enqueue_one): they take turns with the
  // ops, the fusion buffer and the communicators.
  std::mutex exec_mu_;
  Response inline_response_;  // enqueue_one's one-rank path, under exec_mu_: reused per tensor
  // Wakes the background thread: a first request, shutdown, a user thread blocked on a queued
  // request (runtime/handle.h).
  detail::WakeSignal& wake_ = detail::WakeSignal::get();

  std::thread thread_;  // the background thread: loop()
};

}  // namespace hvd
