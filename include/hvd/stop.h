#pragma once

// Stopping together: a signal (a batch system's time limit, a preemption, `kill`) on any rank
// becomes one decision that every rank takes after the same step, so that rank 0 can write a
// checkpoint that the requeued job resumes from (docs/fault-tolerance.md).
//
//   hvd::StopOnSignal stop;                   // after hvd::init(): SIGTERM and SIGUSR1
//   hvd::Checkpointer ckpt("/scratch/run42");
//   std::vector<hvd::NamedTensor> state{{"w", hvd::TensorRef(w.data(), hvd::DataType::kFloat32,
//                                                            {static_cast<int64_t>(w.size())})}};
//   int status = 0;                           // what main() returns after hvd::shutdown()
//   for (int64_t step = ckpt.restore_latest(state).value_or(-1) + 1; step < steps; ++step) {
//     train_one_step();                       // waits for its gradients' all-reduces
//     if (stop.should_stop()) {               // true on every rank after the same step
//       ckpt.save(step, state);
//       status = hvd::kExitRequeue;           // 75: "saved, please requeue"
//       break;
//     }
//   }
//
// How the ranks agree without an extra collective per step: every negotiation cycle already ANDs
// one word of flags across ranks (runtime/controller.h); a rank that was asked to stop clears one
// more bit of it. Every rank learns of the request in the same cycle, and the operations that
// cycle (and every later one) releases are marked on every rank alike. A rank stops after the
// first step in which its thread waited for a marked operation: the same operation on every rank,
// so the same step. The request costs one atomic load per cycle; the check, a thread-local read.

#include <csignal>
#include <string>
#include <vector>

namespace hvd {

// The exit status of a job that stopped on request after saving: "saved, please requeue"
// (EX_TEMPFAIL of <sysexits.h>). Distinct from 0 (done), 1 (failed), 2 (bad command line) and 70
// (a peer rank was lost, HVD_ON_PEER_LOSS=exit). cluster/slurm/ turns it into `scontrol requeue`.
inline constexpr int kExitRequeue = 75;

// Asks every rank to stop at an agreed point. Async-signal-safe (one atomic store): call it from a
// signal handler, any thread, before or after init(). `signal` is recorded for messages (0: not a
// signal). The request lasts until shutdown(); asking again changes nothing.
void request_stop(int signal = 0) noexcept;
// Whether this process asked (request_stop), and with which signal (0: none, or not a signal).
bool stop_requested() noexcept;
int stop_signal() noexcept;

// True once some rank has asked to stop and the calling thread has waited (Handle::wait(), or a
// blocking collective) for an operation that the ranks negotiated after they learnt of it. Every
// rank waits for the same operations in the same order, so every rank first sees true after the
// same wait: call it at a step boundary, from the thread that waits for the step's collectives.
// Stays true until shutdown(). A job of one rank needs no agreement: its own request_stop().
// Throws hvd::Error before init().
bool stop_agreed();

// Installs handlers that call request_stop() for `signals` (default SIGTERM and SIGUSR1: SLURM's
// time limit and `--signal=B:USR1@<s>`, and what hvdrun turns a SIGTERM into), and restores the
// previous handlers when destroyed. A handler never ends the process: a second signal changes
// nothing (SIGKILL still does). Not copyable; one at a time per process.
class StopOnSignal {
 public:
  explicit StopOnSignal(std::vector<int> signals = {SIGTERM, SIGUSR1});
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  // stop_agreed(), at a step boundary. Collective the first time it returns true (every rank
  // reaches that call together): the ranks then share who received what, for reason().
  bool should_stop();
  // After should_stop() returned true: which signal reached which ranks, e.g. "SIGUSR1 on rank 1"
  // or "SIGTERM on ranks 0-3"; "" before.
  const std::string& reason() const { return reason_; }
  const std::vector<int>& signals() const { return signals_; }

  static constexpr int kExitStatus = kExitRequeue;

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  bool stopping_ = false;
  std::string reason_;
};

// "SIGTERM", "SIGUSR1", ... for a signal number ("signal 42" for others).
std::string signal_name(int signal);
// A comma-separated list of signal names ("TERM,USR1", "SIGTERM, USR1", numbers too) as numbers;
// "none" gives an empty list. Throws hvd::InvalidArgumentError naming `flag` and the bad entry
// (SIGKILL and SIGSTOP cannot be caught, and are refused).
std::vector<int> parse_signals(const std::string& list, const std::string& flag);

}  // namespace hvd
