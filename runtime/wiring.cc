// How the runtime is put together from its Config: MPI's initialisation, the global set's
// communicators (Runtime), what every process set shares (SharedServices, runtime/services.h: GPU
// backend, copy helpers, watchdog, timeline, parameters) and the options each set's controller and
// stall inspector are built with (runtime/process_set.cc). The Runtime's lifecycle itself is
// runtime/runtime.cc.
#include <unistd.h>

#include <cstdlib>

#include "cluster/env_resolver.h"
#include "common/backoff.h"
#include "common/logging.h"
#include "hvd/config.h"
#include "hvd/error.h"
#include "runtime/group_unit.h"
#include "runtime/runtime.h"
#include "runtime/services.h"

namespace hvd {
namespace {

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

// Cross-checks the launcher's view (Open MPI, MPICH/PMI or SLURM variables) against MPI's; not on
// fake nodes (the test hook HVD_TEST_FAKE_LOCAL_SIZE, `fake_local_size` > 0).
void check_placement(const comm::MpiTopology& t, int fake_local_size) {
  try {
    if (auto env = cluster::resolve_placement(process_env_lookup()); env && fake_local_size == 0) {
      std::string mismatch =
          cluster::describe_mismatch(*env, t.rank, t.size, t.local_rank, t.local_size);
      if (!mismatch.empty()) HVD_LOG(Warning) << mismatch;
    }
  } catch (const std::exception& e) {
    HVD_LOG(Warning) << "could not read the launcher's placement variables: " << e.what();
  }
}

}  // namespace

// MPI (unless the program initialised it) and the global set's communicators.
void Runtime::build_world() {
  const int provided = init_mpi();
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<int> everyone(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) everyone[static_cast<size_t>(r)] = r;
  const int fake_local_size = services_->test_hooks().fake_local_size;
  world_ = std::make_shared<ProcessSetState>(0, std::move(everyone), rank, MPI_COMM_WORLD,
                                             fake_local_size, services_->wake());
  set_log_rank(rank);
  if (provided < MPI_THREAD_MULTIPLE)
    HVD_LOG(Warning) << "MPI provides " << thread_level_name(provided)
                     << ": do not make MPI calls on other threads while hvd is running.";
  check_placement(topology(), fake_local_size);
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

// The GPU assignment, the GPU contexts and the copy helpers, which every set's ops use.
void SharedServices::build_operations(ProcessSetState& world) {
  const auto& topo = world.mpi().topology();
  const cluster::GpuAssignmentInput gin{topo.local_rank, topo.local_size,
                                        ops::GpuBackend::visible_devices()};
  gpu_ = cluster::assign_gpu(gin, process_env_lookup());
  HVD_LOG(Debug) << "GPU: " << cluster::to_string(gpu_, gin);
  if (gpu_.device >= 0 && !gpu_.note.empty()) HVD_LOG(Warning) << gpu_.note;
  // NCCL communicators are collective: every rank must take the same decision.
  int shared = gpu_.shared ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_LOR, world.mpi().world()));
  // NCCL's version and the host name matter only to ranks that may keep NCCL on a shared GPU.
  const bool may_share = shared != 0 && config_.nccl_shared_gpu;
  char host[256] = {};
  if (may_share && gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const cluster::NcclPlan nccl = cluster::plan_nccl(
      config_.gpu_operations, config_.nccl_shared_gpu, gpu_, shared != 0,
      may_share ? ops::GpuBackend::nccl_version() : 0, process_env_lookup(), host, topo.rank);
  // Before NCCL's first communicator: NCCL reads these when it first looks at the host.
  if (nccl.multi_rank_gpu) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  if (!nccl.host_id.empty()) setenv("NCCL_HOSTID", nccl.host_id.c_str(), 1);
  if (nccl.multi_rank_gpu || !nccl.host_id.empty())
    HVD_LOG(Debug) << "HVD_NCCL_SHARED_GPU: "
                   << (nccl.multi_rank_gpu ? "NCCL_MULTI_RANK_GPU_ENABLE=1"
                                           : "NCCL_HOSTID=" + nccl.host_id);
  ops::GpuBackendOptions go;
  go.device = gpu_.device;
  go.use_nccl = nccl.use_nccl;
  go.finalizer_poll_us = wait_poll_us(config_.wait_poll_us, topo.cores_per_rank,
                                      /*threads_per_rank=*/3);
  go.async_completion = config_.async_completion;
  if (gpu_.device >= 0 && config_.gpu_operations != GpuOperations::kMpi && shared && topo.rank == 0)
    HVD_LOG(Warning) << (nccl.use_nccl
                             ? "several ranks share a GPU and HVD_NCCL_SHARED_GPU=1: CUDA "
                               "tensors stay on NCCL (docs/gpu.md)."
                             : "several ranks share a GPU: CUDA tensors go through host-staged "
                               "MPI instead of NCCL (HVD_NCCL_SHARED_GPU=1 keeps NCCL).");
  gpu_backend_ = std::make_unique<ops::GpuBackend>(world.mpi(), go);
#if HVD_HAVE_NCCL
  // The NCCL path compresses fp16 only, so its CUDA tensors stay uncompressed under bf16.
  if (config_.compression == Compression::kBf16 && topo.rank == 0 &&
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
}

// The timeline (rank 0), the watchdog, and the options of every set's controller and stall
// inspector (runtime/process_set.h builds them).
void SharedServices::build_controller(ProcessSetState& world, bool thread_multiple,
                                      PeerLossHandler on_peer_loss) {
  const auto& topo = world.mpi().topology();
  StallOptions so;
  so.check_seconds = config_.stall_check_time_seconds;
  so.shutdown_seconds = config_.stall_shutdown_time_seconds;
  so.disabled = config_.stall_check_disable;
  ControllerOptions co;
  co.fast_path_patience_seconds = StallInspector(so).fast_path_patience_seconds();
  if (topo.rank == 0 && !config_.timeline_path.empty())
    timeline_ = std::make_unique<Timeline>(config_.timeline_path, config_.timeline_mark_cycles);
  params_ = std::make_shared<Parameters>(
      ParameterValues{.fusion_threshold_bytes = config_.fusion_threshold_bytes,
                      .cycle_time_ms = config_.cycle_time_ms,
                      .fusion_window_us = config_.fusion_window_us});
  co.params = params_;
  if (config_.autotune && topo.size > 1) {
    AutotuneOptions ao;
    ao.rank = topo.rank;
    ao.warmup_steps = static_cast<int>(config_.autotune_warmup_steps);
    ao.steps_per_trial = static_cast<int>(config_.autotune_steps_per_trial);
    ao.trial_seconds = config_.autotune_trial_seconds;
    ao.log_path = config_.autotune_log;
    tuner_ = std::make_shared<Autotuner>(ao, *params_);
    co.tuner = tuner_;
  } else if (config_.autotune) {
    HVD_LOG(Warning) << "HVD_AUTOTUNE=1: a job of one rank negotiates nothing (its operations "
                        "run as they are submitted), so there is nothing to tune.";
  }
  co.peer_timeout_seconds = config_.peer_timeout_seconds;
  co.cache_capacity = static_cast<size_t>(config_.cache_capacity);
  co.lanes = config_.cached_lanes;
  if (topo.size > 1) {
    straggler_ = std::make_shared<StragglerWindow>(topo.size, config_.straggler_threshold_ms,
                                                   timeline_.get());
    co.straggler = straggler_;
  }
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
  wo.action = config_.on_peer_loss;
  wo.handler = std::move(on_peer_loss);
  watchdog_ = std::make_unique<comm::Watchdog>(world.mpi().world(), topo.rank, topo.size,
                                               thread_multiple, wo);
  if (watchdog_->probes()) {
    // Before blaming rank 0 for silence, ask its watchdog whether it is alive (then it is only
    // busy, e.g. stuck with the really lost rank, and will name it).
    co.unresponsive = [w = watchdog_.get()](const std::vector<int>& r) { return w->probe(r); };
    co.announce_lost = [w = watchdog_.get()](const std::vector<int>& l) { w->announce_lost(l); };
  }
  view_.config = &config_;
  view_.fusion_buffer = &fusion_buffer_;
  view_.copy_workers = copy_workers_.get();
  view_.gpu = gpu_backend_.get();
  view_.watchdog = watchdog_.get();
  view_.timeline = timeline_.get();
  view_.controller = std::move(co);
  view_.stall = so;
  view_.test_hooks = &test_hooks_;
  view_.wake = wake_;
  HVD_LOG(Debug) << "initialised: rank " << topo.rank << "/" << topo.size << ", local "
                 << topo.local_rank << "/" << topo.local_size << ", cross " << topo.cross_rank
                 << "/" << topo.cross_size
                 << (topo.homogeneous ? ", homogeneous" : ", not homogeneous");
}

}  // namespace hvd
