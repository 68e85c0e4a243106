#pragma once

// The process-wide runtime: owns the MPI context, the background thread, the tensor queue, the
// controller and the data-plane ops, and joins them on shutdown. The free functions of the public
// API delegate to the one Runtime instance (runtime/api.cc); nothing else is global.
//
// Threading: the constructor and shutdown() run on a user thread (both are collective over MPI);
// from construction to shutdown, every MPI call is made by the background thread. enqueue() and
// the topology getters may be called from any thread.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/gpu_assignment.h"
#include "hvd/collectives.h"
#include "ops/gpu_backend.h"
#include "ops/fusion_buffer.h"
#include "comm/mpi_context.h"
#include "ops/operation_manager.h"
#include "common/config.h"
#include "runtime/controller.h"
#include "runtime/stall_inspector.h"
#include "runtime/timeline.h"
#include "runtime/tensor_queue.h"

namespace hvd {

class Runtime {
 public:
  // Initialises MPI unless it is already (then `owns_mpi` is false and MPI is never finalised by
  // us), builds the communicators and starts the background thread.
  explicit Runtime(const Config& config);
  ~Runtime();

  const comm::MpiTopology& topology() const { return mpi_->topology(); }
  const Config& config() const { return config_; }
  const cluster::GpuAssignment& gpu_assignment() const { return gpu_; }

  // Hands tensors to the background thread; the handle completes when all of them are done.
  // Throws InvalidArgumentError for a name already in flight, or the runtime's failure after the
  // background thread stopped.
  Handle enqueue(std::vector<TensorTableEntry> entries, std::vector<Request> requests,
                 std::shared_ptr<detail::HandleState> state);
  std::mutex& barrier_mutex() { return barrier_mu_; }  // barrier() calls of this rank take turns

  // Collective: stops the background thread after the cycle in which every rank has seen the
  // request, fails what is still pending, frees the communicators, finalises MPI if we own it.
  void shutdown();

 private:
  void loop();
  void watchdog();
  void perform(const Response& response);
  void fail_response(const Response& response, detail::ErrorKind kind, const std::string& message);

  Config config_;
  bool owns_mpi_ = false;
  std::unique_ptr<comm::MpiContext> mpi_;
  ops::FusionBuffer fusion_buffer_;
  cluster::GpuAssignment gpu_;
  std::unique_ptr<ops::GpuBackend> gpu_backend_;  // before op_manager_: its ops point into it
  ops::OperationManager op_manager_;
  TensorQueue queue_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<StallInspector> stall_;  // rank 0 only
  std::unique_ptr<Timeline> timeline_;     // rank 0 only, with HVD_TIMELINE
  std::string shutdown_reason_;            // set by rank 0's notice; background thread only

  std::thread thread_;
  // The watchdog: ends this process when one data-plane op has been running for longer than the
  // peer timeout (a peer died or the network failed in the middle of it: MPI would wait forever).
  std::thread watchdog_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  std::atomic<int> probe_round_{0};
  void announce_lost(const std::vector<int>& lost);
  std::vector<int> probe_peers(
      const std::vector<int>& targets,
      const std::function<void()>&
          while_waiting);  // the watchdogs' liveness probes (MPI_THREAD_MULTIPLE only)
  std::atomic<int64_t> op_started_ns_{0};  // steady clock, 0 when no op runs
  std::string op_what_;                    // guarded by wake_mu_
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> stopped_{false};
  bool finished_ = false;            // shutdown() ran
  std::atomic<bool> broken_{false};  // a communication failure stopped the background thread
  std::mutex barrier_mu_;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
};

}  // namespace hvd
