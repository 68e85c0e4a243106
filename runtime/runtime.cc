#include "runtime/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

#include "cluster/env_resolver.h"
#include "comm/mpi_control_channel.h"
#include "common/backoff.h"
#include "common/logging.h"
#include "common/ranks.h"
#include "hvd/config.h"
#include "hvd/error.h"
#include "hvd/stop.h"
#include "ops/backends.h"
#include "runtime/coordinator.h"
#include "runtime/cycle_pacer.h"
#include "runtime/group_unit.h"
#include "runtime/spares.h"

namespace hvd {

Runtime::Runtime(const Config& config, PeerLossHandler on_peer_loss)
    : services_(std::make_unique<SharedServices>(config)) {
  set_log_level(config.log_level);
  deterministic_ = config.deterministic;
  build_world();  // MPI and the global set's communicators (runtime/wiring.cc)
  services_->build_operations(*world_);  // what every set's ops share
  services_->build_controller(*world_, thread_multiple_, std::move(on_peer_loss));
  world_->start(services_->view());
  sets_ = std::make_unique<ProcessSetTable>(world_);
  world_->executor().on_process_set([this](const Response& r) {
    return sets_->apply(r, services_->view(), services_->test_hooks().fake_local_size);
  });
  services_->wake()->poll_us.store(wait_poll_us(config.wait_poll_us, topology().cores_per_rank),
                                   std::memory_order_relaxed);
  const ops::GpuBackend* gpu = services_->view().gpu;
  inline_gpu_ = config.single_rank_inline && config.single_rank_inline_gpu &&
                topology().size == 1 && thread_multiple_ && gpu != nullptr &&
                gpu->nccl() != nullptr;
  thread_ = std::thread([this] { loop(); });
  // (top -H, gdb, /proc/<pid>/task; named here, so that it has its name once this returns)
  pthread_setname_np(thread_.native_handle(), "hvd-background");
}

Runtime::~Runtime() {
  // A program that never called hvd::shutdown() (it ended by error): stop cleanly anyway, so the
  // timeline is closed and MPI finalised.
  try {
    shutdown();
  } catch (...) {}
}

Handle Runtime::enqueue(ProcessSetState& set, std::vector<TensorTableEntry> entries,
                        std::vector<Request> requests, std::shared_ptr<detail::HandleState> state) {
  std::vector<std::string> names;
  if (services_->timeline())
    for (const auto& e : entries) names.push_back(set.timeline_row(e.name));
  submit_to_queue(names, [&] { return set.queue().add(std::move(entries), std::move(requests)); });
  return Handle(std::move(state));
}

// HVD_SINGLE_RANK_INLINE_GPU (off by default until it has run on a GPU): a one-rank job's
// all-reduce or broadcast of CUDA tensors on NCCL is launched from the caller's thread too
// (docs/gpu.md, "The small all-reduce": a hand-off to another thread alone cost more than the
// 1.2x of a raw ncclAllReduce that issue 38 asks for). Only what NCCL runs without waiting on the
// host: the completion still comes from the finalizer thread (or at once, ordered on the streams,
// with HVD_ENABLE_ASYNC_COMPLETION). Deterministic reductions do not use NCCL. The rest of the
// conditions (one rank, no timeline, ...) are runs_inline()'s. Inlined into both callers: as a
// call, it cost the one-rank CPU path 10 instructions a tensor (scripts/instructions --inline).
[[gnu::always_inline]] inline bool Runtime::launches_inline(const TensorRef& in,
                                                            const TensorRef& out, RequestType type,
                                                            bool deterministic) const {
  return inline_gpu_ && !deterministic &&
         (type == RequestType::kAllreduce || type == RequestType::kBroadcast) &&
         in.device().kind == Device::kCUDA && out.device().kind == Device::kCUDA;
}

// A job of one rank has nothing to negotiate: a CPU tensor's collective runs here, on the caller's
// thread, as the background thread would run it after a cycle (the same response, executor and
// ops), so the caller pays no hand-off, no fusion window and no cycle (HVD_SINGLE_RANK_INLINE=0
// turns this off). Requests with a local error, groups, barrier and join, and any operation while
// a timeline is written or when MPI is not MPI_THREAD_MULTIPLE (the op's MPI call would run beside
// the background thread's) still go through the background thread; so do GPU tensors, unless
// launches_inline() takes them.
bool Runtime::runs_inline(const TensorTableEntry& entry, const Request& request) const {
  if (!config().single_rank_inline || topology().size != 1 || services_->timeline() ||
      !thread_multiple_)
    return false;
  if (!request.error.empty() || !request.group.empty()) return false;
  const bool on_cpu =
      entry.input.device().kind == Device::kCPU && entry.output.device().kind == Device::kCPU;
  if (!on_cpu && !launches_inline(entry.input, entry.output, request.type, request.deterministic))
    return false;
  const OpKindInfo* kind = op_kind(request.type);
  return kind && kind->has(op_flags::kData) && kind->participants == Participants::kAllMembers;
}

Handle Runtime::enqueue_one(ProcessSetState& set, TensorTableEntry&& entry, Request&& request,
                            std::shared_ptr<detail::HandleState> state) {
  if (&set == world_.get() && runs_inline(entry, request)) {
    std::lock_guard<std::mutex> lock(exec_mu_);
    if (entry.input.device().kind == Device::kCPU) {
      set.executor().run_inline(std::move(entry), std::move(request));
      return Handle(std::move(state));
    }
    // A device op makes hvd's device current on this thread: the caller's is given back.
    struct CallersDevice {
      int device;
      ~CallersDevice() { ops::GpuBackend::set_current_device(device); }
    };
    const CallersDevice keep{ops::GpuBackend::current_device()};
    set.executor().run_inline(std::move(entry), std::move(request));
    return Handle(std::move(state));
  }
  std::vector<std::string> names;
  if (services_->timeline()) names.push_back(set.timeline_row(entry.name));
  submit_to_queue(names, [&] { return set.queue().add_one(std::move(entry), std::move(request)); });
  return Handle(std::move(state));
}

// Not with a timeline on this rank: its NEGOTIATE span must open before the tensor is in the
// queue (submit_to_queue), and opening one for every tensor that then finds no lane would draw
// spans for nothing; the other ranks still use their lanes (a fused response may mix tensors from
// lanes and from the table, runtime/controller.cc). Not for a tensor the one-rank path runs inline.
bool Runtime::enqueue_lane(const std::string& name, TensorRef& in, TensorRef& out, ReduceOp op,
                           double prescale, double postscale,
                           const std::shared_ptr<detail::HandleState>& state) {
  if (services_->timeline() || !config().cached_lanes) return false;
  if (topology().size == 1 && config().single_rank_inline && thread_multiple_ &&
      in.device().kind == Device::kCPU && out.device().kind == Device::kCPU)
    return false;
  // HVD_SINGLE_RANK_INLINE_GPU: enqueue_one launches it.
  if (launches_inline(in, out, RequestType::kAllreduce, deterministic())) return false;
  switch (world_->queue().try_lane(name, in, out, op, prescale, postscale, deterministic(), state,
                                   topology().rank)) {
    case TensorQueue::LaneResult::kNoLane:
      return false;
    case TensorQueue::LaneResult::kQueuedFirst:
      wake();
      return true;
    case TensorQueue::LaneResult::kQueued:
      return true;
  }
  return false;
}

// The timeline's NEGOTIATE spans (of `names`: empty without a timeline) open before the requests
// are in the queue: once they are, the background thread may close the spans at any moment (a
// user thread waiting on a queued request starts the cycle at once), and an end drawn before its
// begin unbalances the row. Requests the queue refuses (a name in flight) close their spans again.
template <class Add>
void Runtime::submit_to_queue(const std::vector<std::string>& names, Add&& add) {
  Timeline* timeline = services_->timeline();
  for (const auto& n : names) timeline->begin(n, "NEGOTIATE");
  try {
    if (add()) wake();
  } catch (...) {
    for (const auto& n : names) timeline->end(n, "NEGOTIATE");
    throw;
  }
}

// The first request since the last cycle: wake the background thread (WakeSignal::notify locks
// the mutex first, so that a thread between its check and its wait cannot miss it).
void Runtime::wake() { services_->wake()->notify(); }

// The background thread: a cycle of every process set (ProcessSetTable::cycle) and its responses,
// until every rank has seen a shutdown request or a communication failure stops it; between two
// cycles the pacer decides when the next one starts (runtime/cycle_pacer.h).
void Runtime::loop() {
  // The fusion window and the cycle are timed waits (a lone all-reduce submitted during compute
  // was negotiated ~140 us after submission instead of ~90 with the default slack).
  precise_timed_waits();
  CyclePacer pacer(sets_->sets(), *services_->wake(), shutdown_requested_, services_->parameters(),
                   topology().size == 1);
  // Test hook HVD_TEST_PAUSE_BACKGROUND (runtime/test_hooks.h): -1 on every rank but the one named.
  const TestHooks& hooks = services_->test_hooks();
  const long pause_cycle = hooks.pause_cycle_of(topology().rank);
  detail::WakeSignal& signal = *services_->wake();
  try {
    for (long cycles = 0;; ++cycles) {
      if (cycles == pause_cycle)
        std::this_thread::sleep_for(std::chrono::duration<double>(hooks.pause_seconds));
      bool shutdown = false;
      bool worked = false;  // this cycle performed an operation: the job is active
      bool waited = false;  // a user thread was blocked on requests this cycle popped
      {
        // The cycle's MPI calls and the executor's take turns with a one-rank job's inline
        // operations (enqueue_one), which use the same communicators from a user thread.
        std::lock_guard<std::mutex> lock(exec_mu_);
        waited = signal.waited();
        signal.cycles.fetch_add(1, std::memory_order_release);
        const Controller::CycleFlags mine{.shutdown = shutdown_requested_.load(),
                                          .stop = hvd::stop_requested()};
        shutdown = sets_->cycle(mine, services_->timeline(), &worked,
                                topology().size > 1 ? &pacer : nullptr);
      }
      if (shutdown) break;
      if (sets_->check_stalls()) {  // the next cycle delivers the errors and stops every rank
        shutdown_requested_ = true;
        continue;
      }
      pacer.pace(waited, worked);
    }
    world_->controller().finish(2.0);
    const std::string& reason = world_->executor().shutdown_reason();
    const std::string message =
        reason.empty()
            ? "hvd was shut down (a rank called hvd::shutdown()) before every rank submitted it."
            : "hvd was shut down by rank 0: " + reason;
    for (const auto& set : sets_->sets())
      if (set) {
        set->close(detail::ErrorKind::kInvalidArgument, message);
        if (set != world_) set->release(false);
      }
  } catch (const std::exception& e) {
    auto [kind, message] = detail::classify(e);
    HVD_LOG(Error) << "background thread stopped: " << message;
    if (kind == detail::ErrorKind::kCommunication) broken_ = true;
    for (const auto& set : sets_->sets())
      if (set) {
        set->close(kind, message);
        if (set != world_) set->release(broken_);
      }
  }
  services_->watchdog().background_stopped();
}

// Order: the background thread, the watchdog, the GPU work, the timeline, then (unless a peer was
// lost) the communicators and MPI.
void Runtime::shutdown() {
  if (finished_) return;
  finished_ = true;
  shutdown_requested_ = true;
  services_->wake()->notify();
  if (thread_.joinable()) thread_.join();
  services_->stop_watchdog();
  std::lock_guard<std::mutex> no_inline_op(exec_mu_);  // a user thread's single-rank op finishes
  services_->stop_gpu_work();  // joins the copy helpers (no op runs any more), then the GPU work
  services_->close_timeline();
  if (broken_) {
    // Its communicators may involve a lost peer: do not touch them. Kept reachable on purpose (a
    // leak checker would otherwise report it): the process is going down anyway.
    world_->release(true);
    // The first process to exit non-zero makes mpirun end the whole job at once: give the other
    // ranks a moment to report their own error (rank 0 has just told them whom it lost), so that
    // every rank's log says what happened.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    HVD_LOG(Warning) << "not finalising MPI after a communication failure";
    return;
  }
  services_->free_communicators();  // the watchdog's, then the GPU backend's
  world_->release(false);
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace hvd
