#include "runtime/process_set.h"

#include <algorithm>

#include "comm/mpi_control_channel.h"
#include "common/logging.h"
#include "common/ranks.h"
#include "hvd/error.h"
#include "ops/backends.h"
#include "runtime/cycle_pacer.h"
#include "runtime/group_unit.h"
#include "runtime/spares.h"

namespace hvd {

ProcessSetState::ProcessSetState(int id, std::vector<int> ranks, int global_rank, MPI_Comm comm,
                                 int fake_local_size, std::shared_ptr<detail::WakeSignal> wake)
    : queue_(std::move(wake)) {
  auto info = std::make_shared<detail::ProcessSetInfo>();
  info->id = id;
  info->ranks = std::move(ranks);
  const auto it = std::lower_bound(info->ranks.begin(), info->ranks.end(), global_rank);
  if (it != info->ranks.end() && *it == global_rank)
    info->rank = static_cast<int>(it - info->ranks.begin());
  info_ = std::move(info);
  if (included()) mpi_ = std::make_unique<comm::MpiContext>(fake_local_size, comm);
}

ProcessSetState::~ProcessSetState() = default;

int ProcessSetState::index_of(int global_rank) const {
  const auto& r = info_->ranks;
  const auto it = std::lower_bound(r.begin(), r.end(), global_rank);
  return it != r.end() && *it == global_rank ? static_cast<int>(it - r.begin()) : -1;
}

void ProcessSetState::start(const SetShared& shared) {
  if (!included()) return;
  const Config& config = *shared.config;
  const bool global = id() == 0;
  mpi_->set_compression(config.compression);
  ops::OperationsOptions oo;
  oo.host_copies = shared.copy_workers;
  oo.hierarchical_allreduce = config.hierarchical_allreduce;
  oo.nccl_fp16_compression = config.compression == Compression::kFp16;
  // NCCL communicators of the set's own (the GpuBackend's span the world).
  oo.nccl = global ? shared.gpu->nccl() : shared.gpu->set_nccl(id(), *mpi_);
  gpu_ = shared.gpu;
  ops_ = ops::make_operations(*mpi_, *shared.fusion_buffer, *shared.gpu, oo);

  ControllerOptions co = shared.controller;
  if (!global) {
    // Messages name global ranks; the watchdog probes global ranks.
    co.global_ranks = ranks();
    co.lanes = false;        // a set's collectives take the ordinary path (runtime/api.cc)
    co.straggler = nullptr;  // measured for the global set only (runtime/straggler.h)
    co.tuner = nullptr;      // the global set's negotiation carries the tuner's verdicts
    if (shared.timeline)
      co.on_unit_expanded = [t = shared.timeline, this](const std::string& group, int32_t members) {
        t->end(timeline_row(group), "NEGOTIATE");
        std::string member;
        for (int32_t i = 0; i < members; ++i) {
          group_unit::member_name(group, static_cast<size_t>(i), &member);
          t->begin(timeline_row(member), "NEGOTIATE");
        }
      };
    auto to_global = [r = ranks()](std::vector<int> v) {
      for (int& x : v) x = r[static_cast<size_t>(x)];
      return v;
    };
    if (shared.controller.unresponsive)
      co.unresponsive = [probe = shared.controller.unresponsive, to_global,
                         r = ranks()](const std::vector<int>& v) {
        std::vector<int> out;
        for (int g : probe(to_global(v)))
          out.push_back(static_cast<int>(std::lower_bound(r.begin(), r.end(), g) - r.begin()));
        return out;
      };
    if (shared.controller.announce_lost)
      co.announce_lost = [announce = shared.controller.announce_lost,
                          to_global](const std::vector<int>& v) { announce(to_global(v)); };
  }
  controller_ = std::make_unique<Controller>(
      std::make_unique<comm::MpiControlChannel>(
          mpi_->world(), comm::resolve_control_topology(config.control_topology, size())),
      co, queue_);
  if (rank() == 0) stall_ = std::make_unique<StallInspector>(shared.stall);
  executor_ =
      std::make_unique<Executor>(rank(), queue_, ops_, *shared.gpu, *shared.watchdog,
                                 shared.timeline, global ? "" : timeline_row(""),
                                 shared.test_hooks ? shared.test_hooks->stop_batch_of(rank()) : -1,
                                 shared.test_hooks ? shared.test_hooks->op_delay_us : 0);
}

int64_t ProcessSetState::next_exchange(int from, int to, int tag) {
  std::lock_guard<std::mutex> lock(exchanges_mu_);
  return exchanges_[{from, to, tag}]++;
}

void ProcessSetState::close(detail::ErrorKind kind, const std::string& message) {
  queue_.close(kind, message);
}

void ProcessSetState::release(bool broken) {
  if (!mpi_) return;
  if (broken) {
    // Its communicators may involve a lost peer: never touch them again (the process is ending).
    // Kept reachable, so that a leak checker does not report them, and never destroyed.
    static auto* abandoned = new std::vector<std::unique_ptr<comm::MpiContext>>;
    abandoned->push_back(std::move(mpi_));
    return;
  }
  if (controller_) controller_->finish(2.0);
  executor_.reset();
  controller_.reset();
  ops_ = ops::OperationManager();
  if (gpu_ && id() != 0) gpu_->drop_set_nccl(id());  // the global set's: GpuBackend::shutdown()
  mpi_.reset();
}

ProcessSetTable::ProcessSetTable(std::shared_ptr<ProcessSetState> global) {
  sets_.push_back(std::move(global));
}

std::shared_ptr<ProcessSetState> ProcessSetTable::find(int id, const char* what) const {
  std::shared_ptr<ProcessSetState> set;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id >= 0 && static_cast<size_t>(id) < sets_.size()) set = sets_[static_cast<size_t>(id)];
    if (!set)
      throw InvalidArgumentError(
          std::string("hvd::ProcessSet::") + what + " failed: process set " + std::to_string(id) +
          (id >= 0 && static_cast<size_t>(id) < sets_.size()
               ? " was removed (remove_process_set()); add it again to use these ranks."
               : " does not exist; make one with hvd::add_process_set()."));
  }
  if (!set->included())
    throw InvalidArgumentError(std::string("hvd::ProcessSet::") + what + " failed: rank " +
                               std::to_string(sets_[0]->rank()) +
                               " is not a member of process set " + std::to_string(id) + " (" +
                               rank_list(set->ranks()) +
                               "); call it on the set's members only (ProcessSet::included()).");
  return set;
}

std::vector<std::shared_ptr<const detail::ProcessSetInfo>> ProcessSetTable::infos() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const detail::ProcessSetInfo>> out;
  for (const auto& s : sets_)
    if (s) out.push_back(s->info());
  return out;
}

int ProcessSetTable::apply(const Response& r, const SetShared& shared, int fake_local_size) {
  if (r.root >= 0) {  // remove_process_set(): runtime/api.cc checked the id on every rank
    std::shared_ptr<ProcessSetState> set;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.root == 0 || static_cast<size_t>(r.root) >= sets_.size() || !sets_[r.root])
        throw InvalidArgumentError("remove_process_set() failed: process set " +
                                   std::to_string(r.root) + " is not there to remove.");
      set.swap(sets_[r.root]);
    }
    set->close(detail::ErrorKind::kInvalidArgument,
               "process set " + std::to_string(r.root) +
                   " was removed (remove_process_set()) before every member submitted it; wait "
                   "for a set's operations on every member before removing it.");
    set->release(false);
    HVD_LOG(Debug) << "process set " << r.root << " removed";
    return r.root;
  }
  std::vector<int> ranks(r.shapes[0].begin(), r.shapes[0].end());  // checked by runtime/api.cc
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : sets_)
      if (s && s->ranks() == ranks)
        throw InvalidArgumentError("add_process_set(" + shape_string(r.shapes[0]) +
                                   ") failed: process set " + std::to_string(s->id()) +
                                   " has these ranks already; use it (hvd::process_sets()).");
  }
  const int id = static_cast<int>(sets_.size());
  ProcessSetState& global = *sets_[0];
  const int me = global.rank();  // the global set's ranks are global ranks
  const bool member = std::binary_search(ranks.begin(), ranks.end(), me);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(global.mpi().world(), member ? 0 : MPI_UNDEFINED, me, &comm));
  auto set = std::make_shared<ProcessSetState>(id, std::move(ranks), me, comm, fake_local_size,
                                               shared.wake);
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);  // the set keeps its own duplicate
  set->start(shared);
  {
    std::lock_guard<std::mutex> lock(mu_);
    sets_.push_back(std::move(set));
  }
  HVD_LOG(Debug) << "process set " << id << " added: " << shape_string(r.shapes[0]);
  return id;
}

// Each set's rank 0 inspects its set. Stalled tensors fail, and hvd shuts down, as for the global
// set (the shutdown notice goes to the set's members; the others learn of the shutdown itself).
bool ProcessSetTable::check_stalls() {
  bool failed = false;
  for (const auto& set : sets_) {
    if (!set || !set->stall()) continue;
    StallInspector::Verdict v = set->stall()->check(set->controller());
    const std::string where =
        set->id() == 0 ? "" : "process set " + std::to_string(set->id()) + ": ";
    for (const auto& w : v.warnings) HVD_LOG(Warning) << where << w;
    if (v.failures.empty()) continue;
    HVD_LOG(Error) << where << v.shutdown_reason;
    set->controller().fail_stalled(v.failures, v.shutdown_reason);
    failed = true;
  }
  return failed;
}

// One cycle per set, in id order, on every member (runtime/process_set.h). Only the global set's
// cycle carries the flags: the shutdown (every rank stops after its responses, before the other
// sets' cycles of this loop, which no rank then runs) and the stop request, which marks every set's
// handles from this cycle on (hvd/stop.h). A set added by the global set's responses is cycled in
// this same loop on all its members; one removed there, by none.
//
// With `runs`, a set other than the global one goes on cycling by itself, in a run, while its
// cycles release operations or take new requests on some member, until a member asks to leave:
// its run has lasted the cycle time, another of its sets (the global one included) has requests
// waiting, or the runtime is shutting down. Every member sees the same flags after each cycle's
// AND, so all make the same number of cycles, and the order of the loop stays the same on every
// rank (no two ranks can wait for each other across sets: a rank waits only for members that are
// at this set or at an earlier one of the same loop). Without runs, the global set's cycle, which
// pairs with every rank, paced every set's: with one rank idle outside a set of 2 ranks, each of
// the set's cycles waited up to HVD_CYCLE_TIME for the idle rank's next global cycle (a 4-byte
// all-reduce on the set took 1055 us, against 39 us with runs; docs/benchmarks.md).
bool ProcessSetTable::cycle(const Controller::CycleFlags& flags, Timeline* timeline, bool* worked,
                            CyclePacer* runs) {
  const Sets& sets = sets_;
  for (size_t id = 0; id < sets.size(); ++id) {
    ProcessSetState* set = sets[id].get();
    if (set == nullptr || !set->included()) continue;
    if (id == 0) {
      Controller::CycleFlags any;
      const bool released = cycle_once(*set, flags, &any, timeline);
      *worked = *worked || released;
      if (any.stop)  // marks this cycle's handles on (hvd/stop.h)
        for (const auto& s : sets_)
          if (s && s->included()) s->executor().stop_agreed();
      if (any.shutdown) return true;
      continue;
    }
    const auto until = runs ? std::chrono::steady_clock::now() + runs->run_budget()
                            : std::chrono::steady_clock::time_point{};
    bool waited = false, released = false;
    for (bool first = true;; first = false) {
      if (!first) {
        runs->pace_in_run(waited, released, until);
        waited = runs->waited();
      }
      Controller::CycleFlags mine, any;
      mine.leave = runs == nullptr || runs->stopping() ||
                   std::chrono::steady_clock::now() >= until || others_waiting(id);
      released = cycle_once(*set, mine, &any, timeline);
      *worked = *worked || released;
      if (any.leave || !(any.more || released) || !sets[id]) break;
    }
  }
  return false;
}

bool ProcessSetTable::others_waiting(size_t id) const {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (i != id && sets_[i] && sets_[i]->included() && sets_[i]->queue().waiting().any) return true;
  return false;
}

// One cycle of `set` and its responses; returns whether it released any.
bool ProcessSetTable::cycle_once(ProcessSetState& set, const Controller::CycleFlags& mine,
                                 Controller::CycleFlags* any, Timeline* timeline) {
  const bool global = set.id() == 0;
  std::vector<Response> responses = set.controller().cycle(mine, any);
  if (timeline) {
    if (global) timeline->mark_cycle();
    for (const auto& r : responses)
      for (const auto& n : r.names) {
        const std::string row = global ? std::string() : set.timeline_row(n);
        timeline->end(global ? n : row, "NEGOTIATE");
        timeline->begin(global ? n : row, "QUEUE");
      }
  }
  for (const auto& r : responses) set.executor().perform(r);
  // (perform() may have added or removed sets: `set` is still alive, its slot may be null.)
  const size_t id = static_cast<size_t>(set.id());
  if (sets_[id]) set.controller().sync_lanes();
  // The names and shapes the requests brought, for the next submissions (runtime/spares.h).
  // A response whose members all came through lanes has none (its names and shapes are empty
  // placeholders: Response::lanes).
  for (auto& r : responses)
    if (r.lanes.empty() || std::find(r.lanes.begin(), r.lanes.end(), kNoLane) != r.lanes.end())
      detail::Spares::give(&r.names, &r.shapes);
  return !responses.empty();
}

}  // namespace hvd
