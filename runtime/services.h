#pragma once

// What every process set of one runtime shares, and its one owner: the Config and the test hooks
// read from it, the wake signal of the background thread (runtime/handle.h), the fusion buffer,
// the copy helpers, the GPU assignment and backend, the watchdog, rank 0's timeline, the global
// set's straggler window, the live parameters and their tuner. The sets see it through view()
// (runtime/process_set.h, SetShared); the Runtime (runtime/runtime.h) holds it between its global
// set, on whose communicators it is built, and its table of sets, which go first.
//
// Lifecycle: constructed with the Config before MPI; built (runtime/wiring.cc) once the global
// set's communicators exist; taken down by Runtime::shutdown() step by step, in the order that
// function gives (the watchdog stops before the GPU work, the copy helpers are joined before the
// GPU backend shuts down, and after a communication failure no step touches a communicator).
//
// Threading: built and taken down on the user thread that runs hvd::init()/hvd::shutdown(); in
// between, read-only except for what each part says of itself.

#include <functional>
#include <memory>
#include <string>

#include "cluster/gpu_assignment.h"
#include "comm/watchdog.h"
#include "common/config.h"
#include "ops/copy_workers.h"
#include "ops/fusion_buffer.h"
#include "ops/gpu_backend.h"
#include "runtime/autotune.h"
#include "runtime/parameters.h"
#include "runtime/process_set.h"
#include "runtime/straggler.h"
#include "runtime/test_hooks.h"
#include "runtime/timeline.h"

namespace hvd {

class SharedServices {
 public:
  // Returns the program's peer-loss handler (empty: none), called on the watchdog thread when a
  // lost peer leaves this rank blocked in MPI, before HVD_ON_PEER_LOSS applies (comm/watchdog.h);
  // hvd::set_peer_loss_handler() in runtime/api.cc.
  using PeerLossHandler = std::function<std::function<void(const std::string& message)>()>;

  // Keeps the Config and reads the test hooks from it; the rest is built by the two calls below.
  explicit SharedServices(const Config& config);
  SharedServices(const SharedServices&) = delete;
  SharedServices& operator=(const SharedServices&) = delete;

  // runtime/wiring.cc, in this order, on the global set's communicators (`world`, which outlives
  // this owner). The GPU assignment, the GPU contexts and the copy helpers (collective: the ranks
  // agree on NCCL).
  void build_operations(ProcessSetState& world);
  // The timeline (rank 0), the parameters and their tuner, the straggler window, the watchdog and
  // the options of every set's controller and stall inspector. `thread_multiple`: MPI provides
  // MPI_THREAD_MULTIPLE.
  void build_controller(ProcessSetState& world, bool thread_multiple, PeerLossHandler on_peer_loss);

  const Config& config() const { return config_; }
  const TestHooks& test_hooks() const { return test_hooks_; }  // HVD_TEST_* (runtime/test_hooks.h)
  // Wakes the background thread (any thread); the queues and the handles share it.
  const std::shared_ptr<detail::WakeSignal>& wake() const { return wake_; }
  const cluster::GpuAssignment& gpu_assignment() const { return gpu_; }
  Timeline* timeline() const { return timeline_.get(); }  // rank 0 only, with HVD_TIMELINE
  comm::Watchdog& watchdog() { return *watchdog_; }
  // The global set's measures; null in a job of one rank.
  const std::shared_ptr<StragglerWindow>& straggler_window() const { return straggler_; }
  const Parameters& parameters() const { return *params_; }
  std::shared_ptr<const Autotuner> tuner() const { return tuner_; }  // null: none
  // What ProcessSetState::start() gives every set.
  const SetShared& view() const { return view_; }

  // Runtime::shutdown()'s steps, each called once, in the order it gives. After the background
  // thread has stopped: the watchdog's thread.
  void stop_watchdog();
  // Once no operation runs: joins the copy helpers, then stops the GPU work.
  void stop_gpu_work();
  void close_timeline();
  // Not after a communication failure: frees the watchdog's communicator and the GPU backend's.
  void free_communicators();

 private:
  // In this order: each part is built after (and, when the runtime goes, destroyed before) those
  // above it.
  Config config_;
  TestHooks test_hooks_;                      // read once from config_
  std::shared_ptr<detail::WakeSignal> wake_;  // from the start: the global set's queue takes it
  ops::FusionBuffer fusion_buffer_;
  std::unique_ptr<ops::CopyWorkers> copy_workers_;  // before the sets' ops: they point to it
  cluster::GpuAssignment gpu_;
  std::unique_ptr<ops::GpuBackend> gpu_backend_;  // before the sets' ops: they point into it
  std::unique_ptr<comm::Watchdog> watchdog_;      // its own thread; before its users below
  std::unique_ptr<Timeline> timeline_;            // any thread
  std::shared_ptr<StragglerWindow> straggler_;    // any thread (the window locks)
  std::shared_ptr<Parameters> params_;            // live: the background thread reads each cycle
  std::shared_ptr<Autotuner> tuner_;              // HVD_AUTOTUNE in a job of 2+ ranks; else null
  SetShared view_;                                // pointers into the parts above
};

}  // namespace hvd
