#pragma once

// The control channel over MPI (comm/control_channel.h): the controller's star AND as non-blocking
// point-to-point messages with a deadline (tag 7301, [status | lost rank | bits] replies), its
// gather as MPI_Gather + MPI_Gatherv, its broadcast as two MPI_Bcast (length, bytes).
//
// Thread safety: background thread only (the contract of ControlChannel). The communicator must
// stay valid while the channel is used; the destructor makes no MPI call (it may run after
// MPI_Finalize), so replies still pending then are dropped.

#include <mpi.h>

#include <deque>
#include <vector>

#include "comm/control_channel.h"

namespace hvd::comm {

class MpiControlChannel : public ControlChannel {
 public:
  explicit MpiControlChannel(MPI_Comm comm);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  StarOutcome star_and(std::vector<uint64_t>& bits, const StarPatience& patience) override;
  std::vector<std::string> gather(const std::string& mine) override;
  void broadcast(std::string& data) override;
  void finish(double seconds) override;

 private:
  StarOutcome collect_and_reply(std::vector<uint64_t>& bits, const StarPatience& patience);
  StarOutcome send_and_wait(std::vector<uint64_t>& bits, const StarPatience& patience);
  void send_replies(std::vector<uint64_t> reply, const std::vector<int>& lost);
  void reap_replies();  // forgets the replies whose sends have completed

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  // Rank 0: star replies still being sent (the buffer lives until every send completes).
  struct PendingReply {
    std::vector<uint64_t> buffer;
    std::vector<MPI_Request> requests;
  };
  std::deque<PendingReply> replies_;
};

}  // namespace hvd::comm
