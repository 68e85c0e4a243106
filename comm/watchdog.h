#pragma once

// The watchdog: liveness probes between ranks, and the end of a process that MPI would otherwise
// keep waiting forever.
//
// Contract.
// - Threads. One watchdog thread per rank when the job has more than one rank (started by the
//   constructor, joined by stop()). op_started()/op_finished() and probe()/announce_lost() are
//   called by the background thread (probe() and announce_lost() through the controller's
//   ControllerOptions); background_stopped() by the background thread when it leaves its loop;
//   stop() and free_communicator() by the thread that shuts hvd down, after the background thread
//   was joined. The watchdog thread makes MPI calls only on its own communicator (a dup of the
//   world, made only with MPI_THREAD_MULTIPLE: probes() tells whether there is one).
// - Probes. With a communicator, the watchdog thread answers other ranks' pings every 100 ms,
//   whatever the background thread is doing (stuck in a collective included). probe(ranks) pings
//   those ranks and returns the ones that did not answer within the probe window
//   (HVD_PEER_TIMEOUT_SECONDS/6, from 3 to 5 s): the lost ones; the others are alive.
// - What it ends, and when. MPI calls cannot be interrupted, so a background thread blocked in a
//   collective with a lost peer can never report an error. The watchdog declares a peer loss
//   (peer_loss() below) when
//     1. one data-plane operation (op_started() .. op_finished()) has run for the peer timeout and
//        a probe of every other rank finds ranks that do not answer (it first tells every rank
//        that answered, announce_lost(), so that each names the lost ranks too); when every rank
//        answers, the operation is only slow: a warning, and another probe one timeout later;
//     2. another rank announced lost ranks and this rank's background thread has not stopped
//        within 1 s (it is stuck in a collective; one in the negotiation stops with an error the
//        program can catch, from rank 0's reply);
//     3. without a communicator (no MPI_THREAD_MULTIPLE, no probes): one data-plane operation has
//        run for the peer timeout + 5 s (the error cannot name the rank then).
//   A peer loss logs one error naming the lost ranks (common/ranks.h), calls the handler that
//   WatchdogOptions::handler returns (hvd::set_peer_loss_handler), if any, with that message, and
//   then, if the handler returns, applies WatchdogOptions::action: kExit ends the process with
//   std::_Exit(kPeerLossExitCode) (70, no destructors or atexit handlers: other threads are
//   blocked in MPI), kAbort calls std::abort() (a core dump of the stuck threads), kNone does
//   nothing more (the rank stays blocked until the launcher ends the job). The policy is
//   HVD_ON_PEER_LOSS (common/config.cc). A peer loss is declared at most once per Watchdog (that
//   is, per hvd::init()).
// - Nothing else ends the process; after background_stopped() the thread lets the answers in
//   flight go out (at most 200 ms) and returns.

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"

namespace hvd::comm {

// The exit status of a process that the watchdog ended after a peer loss (HVD_ON_PEER_LOSS=exit).
inline constexpr int kPeerLossExitCode = 70;

// HVD_ON_PEER_LOSS's values (common/config.h, parsed by load_config()).
using hvd::PeerLossAction;

struct WatchdogOptions {
  double peer_timeout_seconds = 30;               // HVD_PEER_TIMEOUT_SECONDS
  PeerLossAction action = PeerLossAction::kExit;  // HVD_ON_PEER_LOSS
  // Asked on the watchdog thread, when a peer loss is declared, for the program's handler (empty
  // function: none; the program may set it at any time). The handler is then called with the
  // error message (it names the lost ranks) before `action`. It must not call hvd or MPI: the
  // background thread may be blocked inside MPI. May itself be empty.
  std::function<std::function<void(const std::string& message)>()> handler;
};

class Watchdog {
 public:
  // `world`: the communicator the probes duplicate (collective over it when `thread_multiple` and
  // size > 1). Starts the watchdog thread when size > 1.
  Watchdog(MPI_Comm world, int rank, int size, bool thread_multiple,
           const WatchdogOptions& options);
  ~Watchdog();  // stop(); never frees the communicator (see free_communicator())
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Whether liveness probes exist (several ranks and MPI_THREAD_MULTIPLE).
  bool probes() const { return probe_comm_ != MPI_COMM_NULL; }

  // Background thread: a data-plane operation starts or ends. `describe` names it for the messages
  // ("allreduce of 'x'"); it is called (under the watchdog's lock) only while the operation runs,
  // so it may refer to the caller's response, and only when the watchdog looks, so that the
  // per-operation cost is no string at all (a job of one rank runs each tensor as an operation).
  void op_started(std::function<std::string()> describe);
  void op_finished();
  // Background thread: the background loop has ended (the watchdog thread then winds down).
  void background_stopped();

  // Of these ranks, those that do not answer a liveness probe within the probe window (callable
  // from the background thread while the watchdog thread runs). Without probes(): none.
  std::vector<int> probe(const std::vector<int>& ranks);
  // Tells every other rank's watchdog (except the lost ones) that these ranks were lost; waits at
  // most 500 ms for the notices to go out. Without probes(): nothing.
  void announce_lost(const std::vector<int>& lost);

  // Joins the watchdog thread (after background_stopped(), or it stops it). Idempotent.
  void stop();
  // After stop(): frees the probe communicator (skip it after a communication failure: it may
  // involve a lost peer). Idempotent.
  void free_communicator();

 private:
  void run();
  void answer_pings();  // watchdog thread
  void check_lost_notice();
  void check_op(int64_t started, const std::string& what);
  std::vector<int> probe_peers(const std::vector<int>& targets, bool answer_while_waiting);
  void peer_loss(const std::string& message);

  // Set at construction.
  const int rank_, size_;
  const WatchdogOptions options_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;

  // Shared between the background thread and the watchdog thread.
  std::atomic<int> probe_round_{0};
  std::atomic<int64_t> op_started_ns_{0};  // steady clock, 0 when no op runs
  std::atomic<bool> stopped_{false};       // the background loop has ended
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<std::string()> op_describe_;  // under mu_; empty when no op runs

  // Watchdog thread only.
  std::vector<MPI_Request> pongs_;  // answers being sent (empty messages: the tag says the round)
  int64_t probed_op_ = 0;           // the op (its start) that the next probe time is for
  int64_t next_probe_ns_ = 0;
  bool declared_ = false;  // a peer loss was declared (at most once)

  std::thread thread_;
};

}  // namespace hvd::comm
