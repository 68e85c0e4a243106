#pragma once

// The pace of the background thread's cycles: when the next cycle starts after one ends. A cycle
// starts at once when a user thread is blocked on requests the last cycle popped; otherwise after
// HVD_CYCLE_TIME, or sooner once requests are waiting and the fusion window (HVD_FUSION_WINDOW)
// has closed on their burst (cycle_pacer.cc has the reasons and the measurements). It reads the
// queues of every process set this rank is a member of (runtime/process_set.h) and the wake signal
// (runtime/handle.h) that submissions and waits raise.
//
// Threading: the background thread only (the queues it reads take their own locks).

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "runtime/handle.h"
#include "runtime/parameters.h"
#include "runtime/process_set.h"
#include "runtime/tensor_queue.h"

namespace hvd {

class CyclePacer {
 public:
  using Sets = std::vector<std::shared_ptr<ProcessSetState>>;  // by id; null: removed
  // `sets`, `wake`, `stopping` (a shutdown was requested: return at once) and `params` (the cycle
  // time and the fusion window, read before each wait: runtime/parameters.h) must outlive the
  // pacer. `one_rank`: a job of one rank, whose idle background thread sleeps until a submission.
  CyclePacer(const Sets& sets, detail::WakeSignal& wake, const std::atomic<bool>& stopping,
             const Parameters& params, bool one_rank);

  // After a cycle (`waited`: a user thread was blocked on requests it popped; `worked`: it ran an
  // operation): returns when the next cycle should start.
  void pace(bool waited, bool worked);

  // A process set's run of cycles (ProcessSetTable::cycle): how long it may last (the cycle time:
  // the ranks outside the set wait that long for the next cycle of the global set anyway), and,
  // between two of its cycles, as pace(), returning by `until` at the latest.
  std::chrono::steady_clock::duration run_budget() const { return params_.cycle(); }
  void pace_in_run(bool waited, bool worked, std::chrono::steady_clock::time_point until);
  // Whether a user thread is blocked on queued requests (pace_in_run's `waited`, read before each
  // cycle of a run). A run's cycles are not counted in WakeSignal::cycles: a user thread blocked on
  // an operation of another set that wants the next cycle (cycle_wanted) wants the next loop's, and
  // counting them made the run's waits ignore it (a pipeline stage's sends on the global set then
  // waited up to one cycle time after its set's all-reduce).
  bool waited() const { return wake_.waited(); }
  bool stopping() const { return stopping_.load(); }

 private:
  using clock = std::chrono::steady_clock;
  bool next_cycle_now(bool waited) const;
  void wait_for_work(clock::time_point next_cycle, bool worked);
  // The sets' queues together (one set: its queue's own answer).
  TensorQueue::Waiting waiting() const;
  bool holds_only_popped() const;
  size_t queued() const;

  const Sets& sets_;
  detail::WakeSignal& wake_;
  const std::atomic<bool>& stopping_;
  const Parameters& params_;
  clock::duration cycle_{}, window_{};  // params_', as pace() last read them
  const bool one_rank_;
};

}  // namespace hvd
