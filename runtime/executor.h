#pragma once

// The executor: turns each negotiated Response of a cycle into what it means on this rank. Control
// responses complete or fail handles (an error, a join, a barrier; rank 0's shutdown notice is
// kept as the reason for the shutdown); collectives become an ops::OpBatch of this rank's tensors
// that the first enabled op runs (ops/backends.h). A rank that has joined has no tensor for a
// name: it runs the collective with a stand-in (the identity of the reduction, no rows for
// allgather) and discards the result. With a timeline it draws each tensor's QUEUE end and op
// span; it tells the watchdog when a data-plane operation starts and ends (comm/watchdog.h).
//
// Completion: a CPU batch's handles complete as soon as its op returns; a GPU batch's on the
// finalizer thread when its device work is done (ops/gpu_backend.h). A failed op fails its
// handles with "<op> of '<names>' failed: <reason>"; a communication failure is then rethrown
// (the background thread stops), any other error is the batch's alone.
//
// Threading: background thread only.

#include <functional>
#include <string>

#include "comm/watchdog.h"
#include "ops/gpu_backend.h"
#include "ops/operation_manager.h"
#include "runtime/message.h"
#include "runtime/tensor_queue.h"
#include "runtime/timeline.h"

namespace hvd {

class Executor {
 public:
  // `rank`: this rank in the process set. `timeline` may be null (no HVD_TIMELINE, or not rank 0).
  // Everything must outlive the executor.
  // `timeline_prefix` goes before every name in the timeline (a process set's rows).
  // `stop_at_batch`: the test hook HVD_TEST_STOP_IN_OP (runtime/test_hooks.h): the process stops
  // (SIGSTOP) right before this data-plane batch (from 1); -1: never. `op_delay_us`: the test hook
  // HVD_TEST_OP_DELAY_US: every data-plane batch sleeps this long first (0: none).
  Executor(int rank, TensorQueue& queue, ops::OperationManager& ops, ops::GpuBackend& gpu,
           comm::Watchdog& watchdog, Timeline* timeline, std::string timeline_prefix = "",
           long stop_at_batch = -1, int64_t op_delay_us = 0);

  // Runs one response (in the order the controller returned them; the same on every rank).
  // Throws CommunicationError after failing the batch's handles when the op lost its peers.
  void perform(const Response& response);

  // A job of one rank's operation, on the caller's thread (runtime/runtime.cc, runs_inline): the
  // entry goes into the queue (a name in flight is refused as always) and its response, the one
  // negotiation would make, runs at once. The caller holds the lock that the cycle holds.
  void run_inline(TensorTableEntry&& entry, Request&& request);

  // From now on every handle this executor completes is marked HandleState::stop_agreed: the
  // ranks learnt of a stop request in this cycle (hvd/stop.h). Every rank calls it in the same
  // cycle, before that cycle's responses run.
  void stop_agreed() { stop_agreed_ = true; }

  // Runs add_process_set()/remove_process_set() responses (the global set's executor only):
  // returns the set's id, or throws InvalidArgumentError (the same on every rank).
  void on_process_set(std::function<int(const Response&)> f) { on_process_set_ = std::move(f); }

  // The reason rank 0 gave for shutting hvd down (its notice), or "".
  const std::string& shutdown_reason() const { return shutdown_reason_; }

 private:
  struct Batch;
  bool perform_control(const Response& r);
  void perform_unit(const Response& r);
  void recycle(Batch& b);
  void take_entries(const Response& r, Batch& b);
  void begin_spans(const Response& r, Batch& b);
  void execute(const Response& r, Batch& b);

  TensorQueue& queue_;
  ops::OperationManager& ops_;
  ops::GpuBackend& gpu_;
  comm::Watchdog& watchdog_;
  Timeline* timeline_;
  std::string row_prefix_;
  int rank_;  // this rank in the process set
  std::function<int(const Response&)> on_process_set_;
  std::string shutdown_reason_;
  std::vector<std::string> spare_names_;  // perform()'s scratch, reused
  std::string member_;                    // perform_unit()'s scratch, reused
  Response inline_response_;              // run_inline()'s, reused per tensor
  // The last Batch's vectors, emptied, their capacity kept.
  std::vector<std::shared_ptr<detail::HandleState>> handles_spare_;
  std::vector<ops::OpEntry> entries_spare_;
  long batches_ = 0;         // data-plane batches run so far
  long stop_at_batch_ = -1;  // test hook HVD_TEST_STOP_IN_OP (runtime/test_hooks.h)
  int64_t op_delay_us_ = 0;  // test hook HVD_TEST_OP_DELAY_US
  bool stop_agreed_ = false;
};

}  // namespace hvd
