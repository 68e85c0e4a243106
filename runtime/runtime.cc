#include "runtime/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cluster/env_resolver.h"
#include "comm/mpi_control_channel.h"
#include "common/backoff.h"
#include "common/logging.h"
#include "hvd/config.h"
#include "hvd/error.h"
#include "hvd/stop.h"
#include "ops/backends.h"
#include "runtime/coordinator.h"
#include "runtime/group_unit.h"
#include "runtime/spares.h"

namespace hvd {
namespace {

// An MPI context abandoned after a communication failure, kept reachable so that a leak checker
// does not report it (volatile: the store must not be optimised away as dead).
comm::MpiContext* volatile g_abandoned_mpi = nullptr;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

// Test hook: HVD_TEST_PAUSE_BACKGROUND=RANK:SECONDS:CYCLE makes that rank's background thread sleep
// once, before that cycle: a rank that is alive (its watchdog answers) but silent in the
// negotiation, as on an overloaded node (tests/mpi/test_slow_rank.sh). Read once, before the loop.
struct TestPause {
  long cycle = -1;  // -1: none for this rank
  double seconds = 0;
};

TestPause test_pause_from_env(int rank) {
  const char* v = std::getenv("HVD_TEST_PAUSE_BACKGROUND");
  int r = -1;
  TestPause p;
  long at = 0;
  if (v && std::sscanf(v, "%d:%lf:%ld", &r, &p.seconds, &at) == 3 && r == rank && p.seconds > 0)
    p.cycle = at;
  return p;
}

int fake_local_size_from_env() {
  // Test hook: split the world into fake nodes of N consecutive ranks (hierarchical tests).
  const char* v = std::getenv("HVD_TEST_FAKE_LOCAL_SIZE");
  return v ? std::atoi(v) : 0;
}

// Cross-checks the launcher's view (Open MPI, MPICH/PMI or SLURM variables) against MPI's.
void check_placement(const comm::MpiTopology& t) {
  try {
    if (auto env = cluster::resolve_placement(process_env_lookup());
        env && fake_local_size_from_env() == 0) {
      std::string mismatch =
          cluster::describe_mismatch(*env, t.rank, t.size, t.local_rank, t.local_size);
      if (!mismatch.empty()) HVD_LOG(Warning) << mismatch;
    }
  } catch (const std::exception& e) {
    HVD_LOG(Warning) << "could not read the launcher's placement variables: " << e.what();
  }
}

}  // namespace

Runtime::Runtime(const Config& config, PeerLossHandler on_peer_loss) : config_(config) {
  set_log_level(parse_log_level(config_.log_level));
  const int provided = init_mpi();
  mpi_ = std::make_unique<comm::MpiContext>(fake_local_size_from_env());
  set_log_rank(mpi_->topology().rank);
  if (provided < MPI_THREAD_MULTIPLE)
    HVD_LOG(Warning) << "MPI provides " << thread_level_name(provided)
                     << ": do not make MPI calls on other threads while hvd is running.";
  check_placement(mpi_->topology());
  build_operations();
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  build_controller(thread_multiple_, std::move(on_peer_loss));
  executor_ = std::make_unique<Executor>(mpi_->topology().rank, queue_, op_manager_, *gpu_backend_,
                                         *watchdog_, timeline_.get());
  wake_.poll_us.store(wait_poll_us(config_.wait_poll_us, mpi_->topology().cores_per_rank),
                      std::memory_order_relaxed);
  thread_ = std::thread([this] { loop(); });
  // (top -H, gdb, /proc/<pid>/task; named here, so that it has its name once this returns)
  pthread_setname_np(thread_.native_handle(), "hvd-background");
}

int Runtime::init_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    throw InvalidArgumentError(
        "hvd::init() failed: MPI has already been finalised in this process, and MPI cannot be "
        "initialised twice. Call hvd::init() before MPI_Finalize (and once per process).");
  int provided = 0;
  if (!initialized) {
    // Ranks share cores with the trainer's compute threads (and with each other when
    // oversubscribed): let Open MPI's progress loop yield the core while it waits. A value the
    // user or the launcher set is kept.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_SERIALIZED)
    throw InvalidArgumentError(
        std::string("hvd::init() failed: MPI was initialised with ") + thread_level_name(provided) +
        ", but hvd's background thread makes MPI calls. Initialise MPI with "
        "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let hvd::init() do it.");
  return provided;
}

// The GPU assignment, the GPU contexts and every data-plane op (ops/backends.h has the order).
void Runtime::build_operations() {
  const auto& topo = mpi_->topology();
  const cluster::GpuAssignmentInput gin{topo.local_rank, topo.local_size,
                                        ops::GpuBackend::visible_devices()};
  gpu_ = cluster::assign_gpu(gin, process_env_lookup());
  HVD_LOG(Debug) << "GPU: " << cluster::to_string(gpu_, gin);
  if (gpu_.device >= 0 && !gpu_.note.empty()) HVD_LOG(Warning) << gpu_.note;
  // NCCL communicators are collective: every rank must take the same decision.
  int shared = gpu_.shared ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_LOR, mpi_->world()));
  ops::GpuBackendOptions go;
  go.device = gpu_.device;
  go.use_nccl = config_.gpu_operations != "MPI" && !shared;
  go.finalizer_poll_us = wait_poll_us(config_.wait_poll_us, topo.cores_per_rank,
                                      /*threads_per_rank=*/3);
  go.async_completion = config_.async_completion;
  if (gpu_.device >= 0 && config_.gpu_operations != "MPI" && shared && topo.rank == 0)
    HVD_LOG(Warning)
        << "several ranks share a GPU: CUDA tensors go through host-staged MPI instead of NCCL.";
  gpu_backend_ = std::make_unique<ops::GpuBackend>(*mpi_, go);
  mpi_->set_compression(parse_compression(config_.compression));  // HVD_COMPRESSION (CPU, staged)
#if HVD_HAVE_NCCL
  // The NCCL path compresses fp16 only, so its CUDA tensors stay uncompressed under bf16.
  if (mpi_->compression() == Compression::kBf16 && topo.rank == 0 &&
      ops::GpuBackend::visible_devices() > 0)
    HVD_LOG(Warning)
        << "HVD_COMPRESSION=bf16: CUDA tensors reduced by NCCL are not compressed (the NCCL path "
           "implements fp16 only); CPU tensors and host-staged CUDA tensors "
           "(HVD_GPU_OPERATIONS=MPI) travel as bf16.";
#endif
  // HVD_COPY_THREADS: helpers for the host fusion buffer's copies, where this rank has spare cores
  // (a GPU rank keeps one more for its finalizer).
  const int helpers =
      ops::copy_helpers(config_.copy_threads, topo.cores_per_rank, gpu_.device >= 0 ? 3 : 2);
  copy_workers_ = std::make_unique<ops::CopyWorkers>(helpers);
  HVD_LOG(Debug) << "cores this rank counts as its own: " << topo.cores_per_rank
                 << "; HVD_COPY_THREADS: " << helpers << " helper thread(s) for host copies";
  ops::OperationsOptions oo;
  oo.host_copies = copy_workers_.get();
  oo.hierarchical_allreduce = config_.hierarchical_allreduce;
  oo.nccl_fp16_compression = config_.compression == "fp16";
  op_manager_ = ops::make_operations(*mpi_, fusion_buffer_, *gpu_backend_, oo);
}

// The stall inspector and timeline (rank 0), the watchdog and the controller.
void Runtime::build_controller(bool thread_multiple, PeerLossHandler on_peer_loss) {
  StallOptions so;
  so.check_seconds = config_.stall_check_time_seconds;
  so.shutdown_seconds = config_.stall_shutdown_time_seconds;
  so.disabled = config_.stall_check_disable;
  ControllerOptions co;
  co.fast_path_patience_seconds = StallInspector(so).fast_path_patience_seconds();
  if (mpi_->topology().rank == 0) stall_ = std::make_unique<StallInspector>(so);
  if (mpi_->topology().rank == 0 && !config_.timeline_path.empty())
    timeline_ = std::make_unique<Timeline>(config_.timeline_path, config_.timeline_mark_cycles);
  co.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  co.peer_timeout_seconds = config_.peer_timeout_seconds;
  co.cache_capacity = static_cast<size_t>(config_.cache_capacity);
  co.lanes = config_.cached_lanes;
  if (timeline_)
    // A group unit that goes the slow way becomes its members: its row's NEGOTIATE span ends, and
    // each member's row takes it over (runtime/group_unit.h).
    co.on_unit_expanded = [t = timeline_.get()](const std::string& group, int32_t members) {
      t->end(group, "NEGOTIATE");
      std::string member;
      for (int32_t i = 0; i < members; ++i) {
        group_unit::member_name(group, static_cast<size_t>(i), &member);
        t->begin(member, "NEGOTIATE");
      }
    };
  comm::WatchdogOptions wo;
  wo.peer_timeout_seconds = config_.peer_timeout_seconds;
  wo.action = comm::parse_peer_loss_action(config_.on_peer_loss);
  wo.handler = std::move(on_peer_loss);
  watchdog_ = std::make_unique<comm::Watchdog>(mpi_->world(), mpi_->topology().rank,
                                               mpi_->topology().size, thread_multiple, wo);
  if (watchdog_->probes()) {
    // Before blaming rank 0 for silence, ask its watchdog whether it is alive (then it is only
    // busy, e.g. stuck with the really lost rank, and will name it).
    co.unresponsive = [w = watchdog_.get()](const std::vector<int>& r) { return w->probe(r); };
    co.announce_lost = [w = watchdog_.get()](const std::vector<int>& l) { w->announce_lost(l); };
  }
  const auto& topo = mpi_->topology();
  controller_ = std::make_unique<Controller>(
      std::make_unique<comm::MpiControlChannel>(
          mpi_->world(), comm::parse_control_topology(config_.control_topology, topo.size)),
      co, queue_);
  HVD_LOG(Debug) << "initialised: rank " << topo.rank << "/" << topo.size << ", local "
                 << topo.local_rank << "/" << topo.local_size << ", cross " << topo.cross_rank
                 << "/" << topo.cross_size
                 << (topo.homogeneous ? ", homogeneous" : ", not homogeneous");
}

Runtime::~Runtime() {
  // A program that never called hvd::shutdown() (it ended by error): stop cleanly anyway, so the
  // timeline is closed and MPI finalised.
  try {
    shutdown();
  } catch (...) {}
}

Handle Runtime::enqueue(std::vector<TensorTableEntry> entries, std::vector<Request> requests,
                        std::shared_ptr<detail::HandleState> state) {
  std::vector<std::string> names;
  if (timeline_)
    for (const auto& e : entries) names.push_back(e.name);
  submit_to_queue(names, [&] { return queue_.add(std::move(entries), std::move(requests)); });
  return Handle(std::move(state));
}

// A job of one rank has nothing to negotiate: a CPU tensor's collective runs here, on the caller's
// thread, as the background thread would run it after a cycle (the same response, executor and
// ops), so the caller pays no hand-off, no fusion window and no cycle (HVD_SINGLE_RANK_INLINE=0
// turns this off). Requests with a local error, groups, GPU tensors, barrier and join, and any
// operation while a timeline is written or when MPI is not MPI_THREAD_MULTIPLE (the op's MPI call
// would run beside the background thread's) still go through the background thread.
bool Runtime::runs_inline(const TensorTableEntry& entry, const Request& request) const {
  if (!config_.single_rank_inline || mpi_->topology().size != 1 || timeline_ || !thread_multiple_)
    return false;
  if (!request.error.empty() || !request.group.empty()) return false;
  if (entry.input.device().kind != Device::kCPU || entry.output.device().kind != Device::kCPU)
    return false;
  switch (request.type) {
    case RequestType::kAllreduce:
    case RequestType::kAllgather:
    case RequestType::kBroadcast:
    case RequestType::kAlltoall:
    case RequestType::kReducescatter:
      return true;
    case RequestType::kBarrier:
    case RequestType::kJoin:
      break;
  }
  return false;
}

Handle Runtime::enqueue_one(TensorTableEntry&& entry, Request&& request,
                            std::shared_ptr<detail::HandleState> state) {
  if (runs_inline(entry, request)) {
    queue_.add_entry(std::move(entry), request.rank);  // a name in flight is refused as always
    std::lock_guard<std::mutex> lock(exec_mu_);
    response_for(std::move(request), 1, &inline_response_);
    try {
      executor_->perform(inline_response_);
    } catch (const std::exception&) {
      // The executor failed the handle with the error before it let a communication error out.
    }
    detail::Spares::give(&inline_response_.names, &inline_response_.shapes);
    return Handle(std::move(state));
  }
  std::vector<std::string> names;
  if (timeline_) names.push_back(entry.name);
  submit_to_queue(names, [&] { return queue_.add_one(std::move(entry), std::move(request)); });
  return Handle(std::move(state));
}

// Not with a timeline on this rank: its NEGOTIATE span must open before the tensor is in the
// queue (submit_to_queue), and opening one for every tensor that then finds no lane would draw
// spans for nothing; the other ranks still use their lanes (a fused response may mix tensors from
// lanes and from the table, runtime/controller.cc). Not for a tensor the one-rank path runs inline.
bool Runtime::enqueue_lane(const std::string& name, TensorRef& in, TensorRef& out, ReduceOp op,
                           double prescale, double postscale,
                           const std::shared_ptr<detail::HandleState>& state) {
  if (timeline_ || !config_.cached_lanes) return false;
  if (mpi_->topology().size == 1 && config_.single_rank_inline && thread_multiple_ &&
      in.device().kind == Device::kCPU && out.device().kind == Device::kCPU)
    return false;
  switch (queue_.try_lane(name, in, out, op, prescale, postscale, state, mpi_->topology().rank)) {
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
  for (const auto& n : names) timeline_->begin(n, "NEGOTIATE");
  try {
    if (add()) wake();
  } catch (...) {
    for (const auto& n : names) timeline_->end(n, "NEGOTIATE");
    throw;
  }
}

// The first request since the last cycle: wake the background thread (WakeSignal::notify locks
// the mutex first, so that a thread between its check and its wait cannot miss it).
void Runtime::wake() { wake_.notify(); }

// The background thread: negotiation cycles, their responses executed in order, until every rank
// has seen a shutdown request or a communication failure stops it. Between two cycles it sleeps
// (wait_for_work) until a request arrives or HVD_CYCLE_TIME has passed since the last cycle ended:
// an idle rank still runs a cycle every HVD_CYCLE_TIME, since every rank takes part in every
// cycle's exchange (the star AND pairs the ranks' n-th cycles: a rank that starts one early waits
// there for the others). Counted from the end, not the start: after a cycle that ran longer than
// HVD_CYCLE_TIME (a large fused all-reduce), a rank whose user thread is about to submit the next
// step's tensors waits for them instead of starting an empty cycle at once. That empty cycle used
// to pair with the other ranks' full ones, so the step's tensors waited a whole extra cycle, while
// its rank polled for the others on the cores their user threads were submitting on (measured:
// ~1.5 empty cycles per step of 1000 tensors on 2 ranks before, ~0 after; docs/benchmarks.md).
// The same pairing has another side: a cycle that one rank's timer started before its user thread
// submitted pairs with another rank's cycle that carries the step. That rank's requests then stay
// pending, and it used to sleep a whole HVD_CYCLE_TIME before its next cycle, while the first rank
// (its user thread now blocked on the same tensors) ran its next cycle at once and waited for it
// there. So when a user thread is blocked on what a cycle popped (it waited before the pop, or it
// blocks on it later: WakeSignal::cycle_wanted), and this rank has nothing in flight but popped
// requests, the next cycle starts at once. Once per wait: a rank whose peers lag for long sleeps
// between its cycles as before, instead of polling in one cycle after another (measured with 1000
// cached tensors on 2 ranks and a gap between steps: every other step lost ~1 ms;
// tests/mpi/test_missed_cycle.cc; docs/benchmarks.md).
void Runtime::loop() {
  // The fusion window and the cycle are timed waits (a lone all-reduce submitted during compute
  // was negotiated ~140 us after submission instead of ~90 with the default slack).
  precise_timed_waits();
  using clock = std::chrono::steady_clock;
  const auto cycle = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
  const TestPause pause = test_pause_from_env(mpi_->topology().rank);
  try {
    for (long cycles = 0;; ++cycles) {
      if (cycles == pause.cycle)
        std::this_thread::sleep_for(std::chrono::duration<double>(pause.seconds));
      bool shutdown = false;
      bool worked = false;  // this cycle performed an operation: the job is active
      bool waited = false;  // a user thread was blocked on requests this cycle popped
      {
        // The cycle's MPI calls and the executor's take turns with a one-rank job's inline
        // operations (enqueue_one), which use the same communicators from a user thread.
        std::lock_guard<std::mutex> lock(exec_mu_);
        waited = wake_.waited();
        wake_.cycles.fetch_add(1, std::memory_order_release);
        Controller::CycleFlags any;
        std::vector<Response> responses = controller_->cycle(
            {.shutdown = shutdown_requested_.load(), .stop = hvd::stop_requested()}, &any);
        shutdown = any.shutdown;
        if (any.stop) executor_->stop_agreed();  // marks this cycle's handles on (hvd/stop.h)
        if (timeline_) {
          timeline_->mark_cycle();
          for (const auto& r : responses)
            for (const auto& n : r.names) {
              timeline_->end(n, "NEGOTIATE");
              timeline_->begin(n, "QUEUE");
            }
        }
        for (const auto& r : responses) executor_->perform(r);
        controller_->sync_lanes();
        worked = !responses.empty();
        // The names and shapes the requests brought, for the next submissions (runtime/spares.h).
        // A response whose members all came through lanes has none (its names and shapes are
        // empty placeholders: Response::lanes).
        for (auto& r : responses)
          if (r.lanes.empty() ||
              std::find(r.lanes.begin(), r.lanes.end(), kNoLane) != r.lanes.end())
            detail::Spares::give(&r.names, &r.shapes);
      }
      if (shutdown) break;
      if (check_stalls()) continue;  // the next cycle delivers the errors and stops every rank
      if (next_cycle_now(waited)) continue;
      wait_for_work(clock::now() + cycle, cycle, worked);
    }
    controller_->finish(2.0);
    const std::string& reason = executor_->shutdown_reason();
    queue_.close(
        detail::ErrorKind::kInvalidArgument,
        reason.empty()
            ? "hvd was shut down (a rank called hvd::shutdown()) before every rank submitted it."
            : "hvd was shut down by rank 0: " + reason);
  } catch (const std::exception& e) {
    auto [kind, message] = detail::classify(e);
    HVD_LOG(Error) << "background thread stopped: " << message;
    if (kind == detail::ErrorKind::kCommunication) broken_ = true;
    queue_.close(kind, message);
  }
  watchdog_->background_stopped();
}

// Returns at `next_cycle`, at shutdown, when a user thread blocked on popped requests wants the
// next cycle (WakeSignal::cycle_wanted(), see loop()), or once requests are waiting and the fusion
// window has closed: HVD_FUSION_WINDOW without a new request (the rest of a burst — a backward
// pass's gradients, a group of async calls — arrives before the negotiation, so it is fused into
// one response), and at most one cycle time after the first request (a long stream of submissions
// is still negotiated every HVD_CYCLE_TIME). A lone request thus waits one window, not a cycle. The
// window closes early when a user thread blocks in Handle::wait() on a request still queued
// (WakeSignal::waited()): that thread's burst is over. (Several threads submitting one burst while
// one of them waits are negotiated in two cycles instead of one.)
void Runtime::wait_for_work(std::chrono::steady_clock::time_point next_cycle,
                            std::chrono::steady_clock::duration cycle, bool worked) {
  using clock = std::chrono::steady_clock;
  const auto window = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double, std::micro>(config_.fusion_window_us));
  // Polls first (HVD_WAIT_POLL_US, where cores are spare): a submission that comes meanwhile
  // starts the next cycle without a futex wake-up of this thread. Not when requests are queued
  // already (submitted during the last cycle: their notify() came before `seen` was read), and
  // only after a cycle that performed an operation (`worked`): the next submission of an active
  // job tends to follow its last completion, while an idle runtime that polled after each of its
  // empty cycles spent 50 us of every 1 ms cycle spinning (7 % of a core; with HVD_WAIT_POLL_US
  // at 1000, all of it).
  if (const int64_t poll = wake_.poll_us.load(std::memory_order_relaxed); poll > 0 && worked) {
    const uint64_t seen = wake_.notified.load(std::memory_order_acquire);
    if (!queue_.waiting().any)
      poll_for(poll, [&] {
        return wake_.notified.load(std::memory_order_acquire) != seen || shutdown_requested_.load();
      });
  }
  std::unique_lock<std::mutex> lock(wake_.mu);
  auto submitted = [&] {
    return shutdown_requested_.load() || queue_.waiting().any || next_cycle_now(false);
  };
  // A job of one rank with nothing in flight: no other rank takes part in its cycles and nothing
  // here waits for one, so it sleeps until a submission (or the shutdown) instead of waking every
  // HVD_CYCLE_TIME (~20 ms of CPU a second for nothing; a one-rank CPU job runs its operations
  // inline and never needs this thread).
  if (mpi_->topology().size == 1 && queue_.size() == 0)
    wake_.cv.wait(lock, submitted);
  else
    wake_.cv.wait_until(lock, next_cycle, submitted);
  // A lane's submission reads no clock (TensorQueue::Waiting): when the last submission's time is
  // not known, the window counts from when this thread first saw the count of submissions at its
  // present value (at most one window after the submission itself, when it came while this thread
  // slept in the window, so a burst that ends without a wait may close up to one window later).
  // Each look that finds the count moved doubles the time to the next one (up to the cycle): a
  // look is a wake-up of this thread, and on a machine whose cores the user threads fill, each one
  // took a core from a submitting thread (1000 cached tensors in ~150 us: 2-3 looks at the 50 us
  // window, 2-3 involuntary context switches of the submitting thread a step; docs/benchmarks.md).
  // The window still closes only after at least HVD_FUSION_WINDOW without a submission (a gap
  // under it never splits a burst), and a burst that ends without a wait closes at most one look
  // later, within the cycle (test_lane_window counts the looks).
  bool looked = false;
  uint64_t seen = 0;
  clock::time_point last{};
  clock::duration stretch = window;
  while (!shutdown_requested_.load()) {
    const TensorQueue::Waiting w = queue_.waiting();
    if (!w.any) return;  // the deadline passed with nothing submitted: a cycle for the others
    if (wake_.waited()) return;  // a user thread waits for what is queued
    const auto now = clock::now();
    if (!looked || w.submissions != seen) {
      if (looked && !w.last_exact) stretch = std::max(window, std::min(stretch * 2, cycle));
      looked = true;
      seen = w.submissions;
      last = w.last_exact ? w.last : now;
    }
    const auto until = std::min(last + stretch, w.first + cycle);
    if (now >= until) return;
    wake_.cv.wait_until(lock, until, [&] { return shutdown_requested_.load() || wake_.waited(); });
  }
}

bool Runtime::check_stalls() {
  if (!stall_) return false;
  StallInspector::Verdict v = stall_->check(*controller_);
  for (const auto& w : v.warnings) HVD_LOG(Warning) << w;
  if (v.failures.empty()) return false;
  HVD_LOG(Error) << v.shutdown_reason;
  controller_->fail_stalled(v.failures, v.shutdown_reason);
  shutdown_requested_ = true;
  return true;
}

// Order: the background thread, the watchdog, the GPU work, the timeline, then (unless a peer was
// lost) the communicators and MPI.
void Runtime::shutdown() {
  if (finished_) return;
  finished_ = true;
  shutdown_requested_ = true;
  wake_.notify();
  if (thread_.joinable()) thread_.join();
  if (watchdog_) watchdog_->stop();
  std::lock_guard<std::mutex> no_inline_op(exec_mu_);  // a user thread's single-rank op finishes
  copy_workers_.reset();  // joins the copy helpers (no op runs any more)
  if (gpu_backend_) gpu_backend_->shutdown();
  if (timeline_) timeline_->close();
  if (broken_) {
    // Its communicators may involve a lost peer: do not touch them. Kept reachable on purpose (a
    // leak checker would otherwise report it): the process is going down anyway.
    g_abandoned_mpi = mpi_.release();
    // The first process to exit non-zero makes mpirun end the whole job at once: give the other
    // ranks a moment to report their own error (rank 0 has just told them whom it lost), so that
    // every rank's log says what happened.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    HVD_LOG(Warning) << "not finalising MPI after a communication failure";
    return;
  }
  if (watchdog_) watchdog_->free_communicator();
  gpu_backend_.reset();
  mpi_.reset();
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace hvd
