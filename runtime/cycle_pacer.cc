#include "runtime/cycle_pacer.h"

#include <algorithm>

#include "common/backoff.h"

namespace hvd {

CyclePacer::CyclePacer(const Sets& sets, detail::WakeSignal& wake,
                       const std::atomic<bool>& stopping, const Parameters& params, bool one_rank)
    : sets_(sets), wake_(wake), stopping_(stopping), params_(params), one_rank_(one_rank) {}

// Between two cycles the background thread sleeps
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
// tests/runtime/test_missed_cycle.cc; docs/benchmarks.md). With several process sets, their queues
// count together: a cycle runs every set this rank is a member of.
void CyclePacer::pace(bool waited, bool worked) {
  if (next_cycle_now(waited)) return;
  cycle_ = params_.cycle();
  window_ = params_.fusion_window();
  wait_for_work(clock::now() + cycle_, worked);
}

// A run's waits are pace()'s, over every set of this rank, ending by the end of the run: a
// submission to another set ends the wait too, and the run's next cycle then asks to leave it
// (ProcessSetTable::cycle), so that work waits for no more than that cycle. (Waiting for the run's
// set alone held a pipeline stage's send on the global set up to one cycle time after each of its
// set's all-reduces: 2 pipelines x 2 stages of pipeline_cnn ran at 0.8x.)
void CyclePacer::pace_in_run(bool waited, bool worked, clock::time_point until) {
  if (next_cycle_now(waited)) return;
  cycle_ = params_.cycle();
  window_ = params_.fusion_window();
  wait_for_work(std::min(clock::now() + cycle_, until), worked);
}

bool CyclePacer::next_cycle_now(bool waited) const {
  return ((waited || wake_.cycle_wanted()) && holds_only_popped()) || wake_.report_wanted();
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
void CyclePacer::wait_for_work(std::chrono::steady_clock::time_point next_cycle, bool worked) {
  using clock = std::chrono::steady_clock;
  // Polls first (HVD_WAIT_POLL_US, where cores are spare): a submission that comes meanwhile
  // starts the next cycle without a futex wake-up of this thread. Not when requests are queued
  // already (submitted during the last cycle: their notify() came before `seen` was read), and
  // only after a cycle that performed an operation (`worked`): the next submission of an active
  // job tends to follow its last completion, while an idle runtime that polled after each of its
  // empty cycles spent 50 us of every 1 ms cycle spinning (7 % of a core; with HVD_WAIT_POLL_US
  // at 1000, all of it).
  if (const int64_t poll = wake_.poll_us.load(std::memory_order_relaxed); poll > 0 && worked) {
    const uint64_t seen = wake_.notified.load(std::memory_order_acquire);
    if (!waiting().any)
      poll_for(poll, [&] {
        return wake_.notified.load(std::memory_order_acquire) != seen || stopping_.load();
      });
  }
  std::unique_lock<std::mutex> lock(wake_.mu);
  auto submitted = [&] { return stopping_.load() || waiting().any || next_cycle_now(false); };
  // A job of one rank with nothing in flight: no other rank takes part in its cycles and nothing
  // here waits for one, so it sleeps until a submission (or the shutdown) instead of waking every
  // HVD_CYCLE_TIME (~20 ms of CPU a second for nothing; a one-rank CPU job runs its operations
  // inline and never needs this thread).
  if (one_rank_ && queued() == 0)
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
  clock::duration stretch = window_;
  while (!stopping_.load()) {
    const TensorQueue::Waiting w = waiting();
    if (!w.any) return;  // the deadline passed with nothing submitted: a cycle for the others
    if (wake_.waited()) return;  // a user thread waits for what is queued
    const auto now = clock::now();
    if (!looked || w.submissions != seen) {
      if (looked && !w.last_exact) stretch = std::max(window_, std::min(stretch * 2, cycle_));
      looked = true;
      seen = w.submissions;
      last = w.last_exact ? w.last : now;
    }
    const auto until = std::min(last + stretch, w.first + cycle_);
    if (now >= until) return;
    wake_.cv.wait_until(lock, until, [&] { return stopping_.load() || wake_.waited(); });
  }
}

TensorQueue::Waiting CyclePacer::waiting() const {
  if (sets_.size() == 1) return sets_[0]->queue().waiting();
  TensorQueue::Waiting all;
  for (const auto& set : sets_) {
    if (!set || !set->included()) continue;
    const TensorQueue::Waiting w = set->queue().waiting();
    all.submissions += w.submissions;
    if (!w.any) continue;
    all.first = all.any ? std::min(all.first, w.first) : w.first;
    if (!all.any || w.last > all.last) {
      all.last = w.last;
      all.last_exact = w.last_exact;
    }
    all.any = true;
  }
  return all;
}

bool CyclePacer::holds_only_popped() const {
  if (sets_.size() == 1) return sets_[0]->queue().holds_only_popped();
  bool any = false;
  for (const auto& set : sets_) {
    if (!set || !set->included()) continue;
    if (set->queue().waiting().any) return false;
    any = any || set->queue().holds_only_popped();
  }
  return any;
}

size_t CyclePacer::queued() const {
  size_t n = 0;
  for (const auto& set : sets_)
    if (set && set->included()) n += set->queue().size();
  return n;
}

}  // namespace hvd
