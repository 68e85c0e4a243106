#include "runtime/runtime.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cluster/env_resolver.h"
#include "comm/mpi_control_channel.h"
#include "hvd/error.h"
#include "common/dtype_math.h"
#include "ops/hierarchical/hierarchical_ops.h"
#include "ops/mpi/mpi_ops.h"
#include "common/logging.h"

namespace hvd {
namespace {

// The watchdogs' liveness probes (probe_comm_): a ping carries its round, the answer is an empty
// message whose tag says the round; a lost-rank notice carries the lost ranks.
constexpr int kPingTag = 0x7001, kLostTag = 0x7002, kPongTagBase = 0x7100;
// How long a liveness probe waits for the answers: a watchdog answers every 100 ms, so seconds are
// only needed on an overloaded node; longer with a longer peer timeout, at most 5 s.
double probe_window_seconds(double peer_timeout_seconds) {
  return std::clamp(peer_timeout_seconds / 6, 3.0, 5.0);
}

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

ops::CollectiveType collective_of(ResponseType t) {
  switch (t) {
    case ResponseType::kAllgather:
      return ops::CollectiveType::kAllgather;
    case ResponseType::kBroadcast:
      return ops::CollectiveType::kBroadcast;
    case ResponseType::kAlltoall:
      return ops::CollectiveType::kAlltoall;
    case ResponseType::kReducescatter:
      return ops::CollectiveType::kReducescatter;
    default:
      return ops::CollectiveType::kAllreduce;
  }
}

std::string names_of(const Response& r) {
  std::string s;
  for (size_t i = 0; i < r.names.size() && i < 4; ++i) s += (i ? "', '" : "") + r.names[i];
  if (r.names.size() > 4)
    s += "' and " + std::to_string(r.names.size() - 4) + " more";
  else
    s += "'";
  return "'" + s;
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

}  // namespace

Runtime::Runtime(const Config& config) : config_(config) {
  set_log_level(parse_log_level(config_.log_level));
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
  mpi_ = std::make_unique<comm::MpiContext>(fake_local_size_from_env());
  set_log_rank(mpi_->topology().rank);
  if (provided < MPI_THREAD_MULTIPLE)
    HVD_LOG(Warning) << "MPI provides " << thread_level_name(provided)
                     << ": do not make MPI calls on other threads while hvd is running.";

  // Cross-check the launcher's view (Open MPI, MPICH/PMI or SLURM variables) against MPI's.
  try {
    if (auto env = cluster::resolve_placement(process_env_lookup());
        env && fake_local_size_from_env() == 0) {
      const auto& t = mpi_->topology();
      std::string mismatch =
          cluster::describe_mismatch(*env, t.rank, t.size, t.local_rank, t.local_size);
      if (!mismatch.empty()) HVD_LOG(Warning) << mismatch;
    }
  } catch (const std::exception& e) {
    HVD_LOG(Warning) << "could not read the launcher's placement variables: " << e.what();
  }

  // Backends, in order of preference (the first enabled op of a collective wins): the GPU ops
  // (NCCL, or host-staged MPI), then the hierarchical all-reduce (it declines, with a log line,
  // on one node or on nodes with different numbers of ranks), then plain MPI.
  {
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
    go.hierarchical = config_.hierarchical_allreduce;
    go.fp16_compression = config_.compression == "fp16";
    if (gpu_.device >= 0 && config_.gpu_operations != "MPI" && shared && topo.rank == 0)
      HVD_LOG(Warning)
          << "several ranks share a GPU: CUDA tensors go through host-staged MPI instead of NCCL.";
    gpu_backend_ = std::make_unique<ops::GpuBackend>(*mpi_, fusion_buffer_, go);
    gpu_backend_->register_ops(op_manager_);
    if (config_.hierarchical_allreduce)
      op_manager_.add(
          std::make_unique<ops::hierarchical::MpiHierarchicalAllreduce>(*mpi_, fusion_buffer_));
  }
  mpi_->set_compression(parse_compression(config_.compression));  // HVD_COMPRESSION (CPU, staged)
#if HVD_HAVE_NCCL
  // The NCCL path compresses fp16 only, so its CUDA tensors stay uncompressed under bf16.
  if (mpi_->compression() == Compression::kBf16 && mpi_->topology().rank == 0 &&
      ops::GpuBackend::visible_devices() > 0)
    HVD_LOG(Warning)
        << "HVD_COMPRESSION=bf16: CUDA tensors reduced by NCCL are not compressed (the NCCL path "
           "implements fp16 only); CPU tensors and host-staged CUDA tensors "
           "(HVD_GPU_OPERATIONS=MPI) travel as bf16.";
#endif
  op_manager_.add(std::make_unique<ops::mpi::MpiAllreduce>(*mpi_, fusion_buffer_));
  op_manager_.add(std::make_unique<ops::mpi::MpiAllgather>(*mpi_));
  op_manager_.add(std::make_unique<ops::mpi::MpiBroadcast>(*mpi_));
  op_manager_.add(std::make_unique<ops::mpi::MpiAlltoall>(*mpi_));
  op_manager_.add(std::make_unique<ops::mpi::MpiReducescatter>(*mpi_, fusion_buffer_));

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
  if (mpi_->topology().size > 1 && provided >= MPI_THREAD_MULTIPLE) {
    // Before blaming rank 0 for silence, ask its watchdog whether it is alive (then it is only
    // busy, e.g. stuck with the really lost rank, and will name it).
    co.unresponsive = [this](const std::vector<int>& ranks) { return probe_peers(ranks, nullptr); };
    co.announce_lost = [this](const std::vector<int>& lost) { announce_lost(lost); };
  }
  const auto& topo = mpi_->topology();
  controller_ = std::make_unique<Controller>(
      std::make_unique<comm::MpiControlChannel>(mpi_->world()), co, queue_);
  HVD_LOG(Debug) << "initialised: rank " << topo.rank << "/" << topo.size << ", local "
                 << topo.local_rank << "/" << topo.local_size << ", cross " << topo.cross_rank
                 << "/" << topo.cross_size
                 << (topo.homogeneous ? ", homogeneous" : ", not homogeneous");
  if (mpi_->topology().size > 1 && provided >= MPI_THREAD_MULTIPLE)
    MPI_CHECK(MPI_Comm_dup(mpi_->world(), &probe_comm_));  // the watchdog's liveness probes
  thread_ = std::thread([this] { loop(); });
  if (mpi_->topology().size > 1) watchdog_ = std::thread([this] { watchdog(); });
}

// Pings `targets` on probe_comm_ (their watchdog threads answer every 100 ms, whatever their
// background threads are doing) and returns those that did not answer within the probe window.
// `while_waiting` runs between polls (the watchdog answers pings meanwhile). Callable from the
// watchdog and from the background thread at once: every probe has its own round, and the answer's
// tag carries it. Requests to ranks that did not answer are left pending (the process ends next).
std::vector<int> Runtime::probe_peers(const std::vector<int>& targets,
                                      const std::function<void()>& while_waiting) {
  using namespace std::chrono;
  const int round = probe_round_.fetch_add(1) + 1;
  const size_t n = targets.size();
  std::vector<int> payload(n, round);
  std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL), recvs(n, MPI_REQUEST_NULL);
  std::vector<bool> answered(n, false), failed(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (MPI_Irecv(nullptr, 0, MPI_INT, targets[i], kPongTagBase + (round & 0xFFF), probe_comm_,
                  &recvs[i]) != MPI_SUCCESS ||
        MPI_Isend(&payload[i], 1, MPI_INT, targets[i], kPingTag, probe_comm_, &sends[i]) !=
            MPI_SUCCESS)
      failed[i] = true;  // counts as no answer
  }
  const auto until =
      steady_clock::now() + duration<double>(probe_window_seconds(config_.peer_timeout_seconds));
  while (steady_clock::now() < until) {
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      if (!answered[i] && !failed[i]) {
        int done = 0;
        if (MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
          answered[i] = true;
      }
      all = all && answered[i];
    }
    if (all) break;
    if (while_waiting) while_waiting();
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::vector<int> lost;
  for (size_t i = 0; i < n; ++i)
    if (!answered[i]) lost.push_back(targets[i]);
  if (lost.empty()) MPI_Waitall(static_cast<int>(n), sends.data(), MPI_STATUSES_IGNORE);
  return lost;
}

// Tells every other rank not in `lost` (their watchdogs) that these ranks were lost, so that each
// logs their names and ends, even one that is waiting in a collective; waits at most 500 ms.
void Runtime::announce_lost(const std::vector<int>& lost) {
  if (probe_comm_ == MPI_COMM_NULL) return;
  using namespace std::chrono;
  const int size = mpi_->topology().size, me = mpi_->topology().rank;
  std::vector<MPI_Request> notes;
  for (int r = 0; r < size; ++r) {
    if (r == me || std::find(lost.begin(), lost.end(), r) != lost.end()) continue;
    notes.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(lost.data(), static_cast<int>(lost.size()), MPI_INT, r, kLostTag, probe_comm_,
              &notes.back());
  }
  const auto until = steady_clock::now() + milliseconds(500);
  for (int all = 0; !all && steady_clock::now() < until;) {
    MPI_Testall(static_cast<int>(notes.size()), notes.data(), &all, MPI_STATUSES_IGNORE);
    if (!all) std::this_thread::sleep_for(milliseconds(5));
  }
}

// The watchdog thread. With MPI_THREAD_MULTIPLE it also answers other ranks' liveness probes on
// its own communicator (probe_comm_), every 100 ms, so a rank whose background thread is stuck in
// a collective still answers. When this rank's data-plane op has run for HVD_PEER_TIMEOUT_SECONDS
// it probes every other rank and waits up to the probe window (3-5 s) for the answers: a rank that does
// not answer is lost (its process died or its node's network failed), and the error names it
// before the process ends (exit 70: MPI cannot be interrupted). When every rank answers, the op is
// only slow (a large tensor on a slow network) and it may go on; it is probed again one timeout
// later. Without MPI_THREAD_MULTIPLE there are no probes, and the process ends after the timeout
// + 5 s with an error that cannot name the rank.
void Runtime::watchdog() {
  using namespace std::chrono;
  const int size = mpi_->topology().size, me = mpi_->topology().rank;
  const int64_t timeout_ns = static_cast<int64_t>(config_.peer_timeout_seconds * 1e9);
  const int64_t limit_ns = probe_comm_ != MPI_COMM_NULL ? timeout_ns : timeout_ns + 5'000'000'000;
  std::vector<MPI_Request> pongs;  // answers being sent (empty messages: the tag says the round)
  int64_t next_probe_ns = 0;       // per op: when to probe (again)
  int64_t probed_op = 0;

  // Answers every ping waiting on probe_comm_ (each ping carries its round; the answer's tag says it).
  auto answer_pings = [&] {
    if (probe_comm_ == MPI_COMM_NULL) return;
    for (int i = 0; i < 64; ++i) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, probe_comm_, &flag, &st) != MPI_SUCCESS || !flag)
        break;
      int r = 0;
      if (MPI_Recv(&r, 1, MPI_INT, st.MPI_SOURCE, kPingTag, probe_comm_, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS)
        break;
      pongs.emplace_back(MPI_REQUEST_NULL);
      MPI_Isend(nullptr, 0, MPI_INT, st.MPI_SOURCE, kPongTagBase + (r & 0xFFF), probe_comm_,
                &pongs.back());
    }
    // A lost-rank notice from a rank that found a peer gone: the job cannot go on. A background
    // thread in the negotiation gets the same news from rank 0 and stops with an error the program
    // can catch: give it a second. One stuck in a collective never would: end the process.
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kLostTag, probe_comm_, &flag, &st) == MPI_SUCCESS && flag) {
      int count = 0;
      MPI_Get_count(&st, MPI_INT, &count);
      std::vector<int> lost(static_cast<size_t>(std::max(count, 0)));
      MPI_Recv(lost.data(), count, MPI_INT, st.MPI_SOURCE, kLostTag, probe_comm_,
               MPI_STATUS_IGNORE);
      const auto until = steady_clock::now() + seconds(1);
      while (!stopped_.load() && op_started_ns_.load() == 0 && steady_clock::now() < until)
        std::this_thread::sleep_for(milliseconds(10));
      if (!stopped_.load()) {
        std::string ranks;
        for (int r : lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        HVD_LOG(Error)
            << "rank" << (lost.size() > 1 ? "s " : " ") << ranks
            << (lost.size() > 1 ? " were" : " was") << " lost: rank " << st.MPI_SOURCE
            << " had no answer from " << (lost.size() > 1 ? "them" : "it")
            << " for HVD_PEER_TIMEOUT_SECONDS=" << config_.peer_timeout_seconds
            << " s. The process died or its node's network failed; see that rank's log and the "
               "launcher's message. Ending this process so that the job does not hang.";
        std::_Exit(70);
      }
    }
    // Forget the answers that have gone out.
    for (size_t i = 0; i < pongs.size();) {
      int done = 0;
      if (pongs[i] == MPI_REQUEST_NULL ||
          (MPI_Test(&pongs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)) {
        pongs.erase(pongs.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  };

  std::vector<int> others;
  for (int r = 0; r < size; ++r)
    if (r != me) others.push_back(r);
  auto probe = [&] { return probe_peers(others, answer_pings); };

  std::unique_lock<std::mutex> lock(wake_mu_);
  while (!stopped_) {
    wake_cv_.wait_for(lock, milliseconds(probe_comm_ != MPI_COMM_NULL ? 100 : 500));
    if (stopped_) break;
    const int64_t started = op_started_ns_.load();
    const std::string what = op_what_;
    lock.unlock();
    answer_pings();
    const int64_t now = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
    if (started != 0 && now - started > limit_ns) {
      if (probe_comm_ == MPI_COMM_NULL) {
        HVD_LOG(Error) << what << " has not finished after " << (now - started) / 1000000000
                       << " s: a peer rank died or the network failed in the middle of it "
                          "(HVD_PEER_TIMEOUT_SECONDS="
                       << config_.peer_timeout_seconds
                       << "). Ending this process so that the job does not hang.";
        std::_Exit(70);
      }
      if (probed_op != started) {
        probed_op = started;
        next_probe_ns = 0;
      }
      if (now >= next_probe_ns) {
        std::vector<int> lost = probe();
        if (!lost.empty()) {
          // Tell every rank that answered, so that each names the lost rank too (rather than a
          // rank it waits for in turn), then end.
          announce_lost(lost);
          std::string ranks;
          for (int r : lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
          HVD_LOG(Error)
              << what << " did not complete: rank" << (lost.size() > 1 ? "s " : " ") << ranks
              << (lost.size() > 1 ? " were" : " was") << " lost: no answer for "
              << (now - started) / 1000000000
              << " s (HVD_PEER_TIMEOUT_SECONDS=" << config_.peer_timeout_seconds
              << "). The process died or its node's network failed; see that rank's log and the "
                 "launcher's message. Ending this process so that the job does not hang.";
          std::_Exit(70);
        }
        HVD_LOG(Warning) << what << " is still running after " << (now - started) / 1000000000
                         << " s; every rank answers, so it is only slow (raise "
                            "HVD_PEER_TIMEOUT_SECONDS to silence this).";
        next_probe_ns = now + timeout_ns;
      }
    }
    lock.lock();
  }
  lock.unlock();
  // Let the answers in flight go out (the other ranks are shutting down too).
  const auto until = steady_clock::now() + milliseconds(200);
  while (!pongs.empty() && steady_clock::now() < until) {
    answer_pings();
    std::this_thread::sleep_for(milliseconds(5));
  }
  for (auto& r : pongs) {
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
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
  queue_.add(std::move(entries), std::move(requests));
  for (const auto& n : names) timeline_->begin(n, "NEGOTIATE");
  return Handle(std::move(state));
}

void Runtime::loop() {
  using clock = std::chrono::steady_clock;
  const auto cycle = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
  const TestPause pause = test_pause_from_env(mpi_->topology().rank);
  try {
    for (long cycles = 0;; ++cycles) {
      if (cycles == pause.cycle)
        std::this_thread::sleep_for(std::chrono::duration<double>(pause.seconds));
      auto start = clock::now();
      bool shutdown = false;
      std::vector<Response> responses = controller_->cycle(shutdown_requested_.load(), &shutdown);
      if (timeline_) {
        timeline_->mark_cycle();
        for (const auto& r : responses)
          for (const auto& n : r.names) {
            timeline_->end(n, "NEGOTIATE");
            timeline_->begin(n, "QUEUE");
          }
      }
      for (const auto& r : responses) perform(r);
      if (shutdown) break;
      if (stall_) {
        StallInspector::Verdict v = stall_->check(*controller_);
        for (const auto& w : v.warnings) HVD_LOG(Warning) << w;
        if (!v.failures.empty()) {
          HVD_LOG(Error) << v.shutdown_reason;
          controller_->fail_stalled(v.failures, v.shutdown_reason);
          shutdown_requested_ = true;
          continue;  // the next cycle delivers the errors and stops every rank
        }
      }
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_cv_.wait_until(lock, start + cycle, [&] { return shutdown_requested_.load(); });
    }
    controller_->finish(2.0);
    queue_.close(
        detail::ErrorKind::kInvalidArgument,
        shutdown_reason_.empty()
            ? "hvd was shut down (a rank called hvd::shutdown()) before every rank submitted it."
            : "hvd was shut down by rank 0: " + shutdown_reason_);
  } catch (const std::exception& e) {
    auto [kind, message] = detail::classify(e);
    HVD_LOG(Error) << "background thread stopped: " << message;
    if (kind == detail::ErrorKind::kCommunication) broken_ = true;
    queue_.close(kind, message);
  }
  stopped_ = true;
  wake_cv_.notify_all();
}

void Runtime::fail_response(const Response& r, detail::ErrorKind kind, const std::string& message) {
  for (const auto& name : r.names)
    if (auto e = queue_.take(name)) e->handle->fail(kind, message);
}

void Runtime::perform(const Response& r) {
  if (r.type == ResponseType::kError && r.names.size() == 1 && r.names[0] == kShutdownNotice) {
    shutdown_reason_ = r.error;
    return;
  }
  if (timeline_)
    for (const auto& n : r.names) timeline_->end(n, "QUEUE");
  if (r.type == ResponseType::kError) {
    fail_response(r, detail::ErrorKind::kInvalidArgument, r.error);
    return;
  }
  if (r.type == ResponseType::kJoin) {
    if (auto e = queue_.take(r.names[0])) {
      e->handle->set_join_result(r.last_joined_rank);
      e->handle->complete_one();
    }
    return;
  }
  if (r.type == ResponseType::kBarrier) {
    // Negotiation itself proved that every rank reached the barrier.
    if (auto e = queue_.take(r.names[0])) e->handle->complete_one();
    return;
  }
  ops::OpBatch batch;
  batch.type = collective_of(r.type);
  batch.dtype = r.dtype;
  batch.reduce_op = r.reduce_op;
  batch.device.kind = r.device_kind;
  batch.root = r.root;
  batch.prescale = r.prescale;
  batch.postscale = r.postscale;
  batch.contributors = r.contributors;
  batch.first_dims = r.first_dims;
  std::vector<TensorTableEntry> taken;
  std::vector<std::vector<std::byte>> scratch;  // a joined rank's stand-in tensors
  Tensor scratch_result;
  taken.reserve(r.names.size());
  for (size_t i = 0; i < r.names.size(); ++i) {
    ops::OpEntry oe;
    oe.name = r.names[i];
    auto e = queue_.take(r.names[i]);
    if (e) {
      oe.input = e->input;
      oe.output = e->output;
      oe.splits = e->splits;
      oe.result = &e->handle->output;
      oe.received_splits = &e->handle->received_splits;
      batch.device = e->input.device();
      taken.push_back(std::move(*e));
    } else {
      // This rank has joined: it contributes the identity (nothing, for allgather) and discards
      // the result.
      std::vector<int64_t> shape = r.shapes[i];
      if (r.type == ResponseType::kAllgather && !shape.empty()) shape[0] = 0;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      scratch.emplace_back(static_cast<size_t>(n) * dtype_size(r.dtype));
      void* p = scratch.back().data();
      hvd::fill_identity(r.dtype, r.reduce_op, p, static_cast<size_t>(n));
      oe.input = TensorRef(p, r.dtype, shape);
      oe.output = oe.input;
      oe.result = &scratch_result;
    }
    batch.entries.push_back(std::move(oe));
  }
  std::string span;
  if (timeline_) {
    ops::CollectiveOp* op = op_manager_.select(batch);
    span = op ? op->name() : response_type_name(r.type);
    for (auto& c : span) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const std::string args = "{\"fused\":" + std::to_string(r.names.size()) +
                             ",\"bytes\":" + std::to_string(response_bytes(r)) + ",\"dtype\":\"" +
                             dtype_name(r.dtype) + "\"}";
    for (const auto& n : r.names) timeline_->begin(n, span, args);
    batch.trace = [this, &r](const char* activity, bool begin) {
      for (const auto& n : r.names)
        begin ? timeline_->begin(n, activity) : timeline_->end(n, activity);
    };
  }
  struct SpanEnd {
    Timeline* t;
    const Response& r;
    const std::string& span;
    ~SpanEnd() {
      if (t)
        for (const auto& n : r.names) t->end(n, span);
    }
  } span_end{timeline_.get(), r, span};
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    op_what_ = std::string(response_type_name(r.type)) + " of " + names_of(r);
  }
  op_started_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  struct OpDone {
    std::atomic<int64_t>& started;
    ~OpDone() { started = 0; }
  } op_done{op_started_ns_};
  try {
    op_manager_.execute(batch);
  } catch (const std::exception& e) {
    gpu_backend_->discard_pending();
    auto [kind, message] = detail::classify(e);
    std::string full = message.rfind(std::string(response_type_name(r.type)) + " of", 0) == 0
                           ? message
                           : std::string(response_type_name(r.type)) + " of " + names_of(r) +
                                 " failed: " + message;
    for (auto& t : taken) t.handle->fail(kind, full);
    if (kind == detail::ErrorKind::kCommunication) throw;
    return;
  }
  // CPU batches complete here and now; GPU batches when their work on the device is done (on the
  // finalizer thread), so the background thread never waits for the GPU.
  auto done = std::make_shared<std::vector<TensorTableEntry>>(std::move(taken));
  gpu_backend_->finish([done, what = std::string(response_type_name(r.type)) + " of " +
                                     names_of(r)](const std::string& error) {
    for (auto& t : *done) {
      if (error.empty())
        t.handle->complete_one();
      else
        t.handle->fail(detail::ErrorKind::kCommunication, what + " failed: " + error);
    }
  });
}

void Runtime::shutdown() {
  if (finished_) return;
  finished_ = true;
  shutdown_requested_ = true;
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  stopped_ = true;
  wake_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (gpu_backend_) gpu_backend_->shutdown();
  if (timeline_) timeline_->close();
  if (!broken_ && probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
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
  gpu_backend_.reset();
  mpi_.reset();
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace hvd
