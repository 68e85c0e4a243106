#pragma once

// The control plane's transport: the few operations the controller's negotiation protocol
// (runtime/controller.h) needs, as Horovod's Controller has them over MPI and over Gloo. The MPI
// implementation is comm/mpi_control_channel.h; the unit tests run the controller over an
// in-process one (tests/runtime/in_process_channel.h, ranks as threads).
//
// Contract, for every implementation:
//  - Threading: one channel per rank, used by that rank's background thread only.
//  - Ordering: every rank makes the same sequence of calls (one star_and per cycle, then, when
//    the cycle takes the slow path, one gather and one broadcast). Messages between two ranks
//    arrive in the order they were sent; a call never returns another call's message.
//  - Rank 0 is the root of every operation.
//  - Errors: a transport failure (an MPI error, a peer that the implementation knows is gone
//    during gather or broadcast) throws CommunicationError. A rank that goes silent during the
//    star is not an error of the channel: star_and reports it (StarOutcome) and the controller
//    decides, through its liveness policy, whether it is lost and throws a CommunicationError
//    naming it ("rank K was lost: ...", common/ranks.h).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hvd::comm {

// How long star_and waits, and whom it asks when the wait runs out.
struct StarPatience {
  double first_seconds = 30;  // before the first call of `silent`
  double again_seconds = 30;  // each further round, when `silent` says "wait again"
  // Called on the calling thread when the deadline has passed with `ranks` unheard (the ranks
  // whose vectors have not arrived: at rank 0, and in a tree at any rank with ranks below it; {0}:
  // no reply from the coordinator) after `waited` seconds in all. Returns the ranks to declare lost
  // (a subset of `ranks`); empty: wait `again_seconds` more. Null: every silent rank is lost at the
  // first deadline.
  std::function<std::vector<int>(const std::vector<int>& ranks, double waited)> silent;
};

// What star_and ended with.
struct StarOutcome {
  enum class Status {
    kDone,      // every rank took part: the bits are the AND over all ranks
    kSilent,    // this rank gave up waiting: `lost` went silent (rank 0: then told the others)
    kReported,  // rank 0 reported `lost` (its first lost rank) in its reply
  };
  Status status = Status::kDone;
  std::vector<int> lost;
  double waited_seconds = 0;  // kSilent: how long this rank waited for them
};

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // The cycle's bit-vector AND, rooted at rank 0 (named for its first shape, a star; the MPI
  // channel may also run it up and down a tree, comm/mpi_control_channel.h): every rank's `bits`
  // reach rank 0, which ANDs them and sends the result back (or, when ranks were lost, a notice
  // naming the first of them, to every rank it did not lose). `bits` has the same length on every
  // rank; on kDone it holds the AND. Rank 0 does not wait for its replies to be delivered (a send
  // to a rank that has just stopped may never complete): they complete in the background and
  // finish() lets the last ones out. With one rank: kDone at once, `bits` unchanged.
  virtual StarOutcome star_and(std::vector<uint64_t>& bits, const StarPatience& patience) = 0;

  // The last `n` words of every star_and vector combine by unsigned maximum instead of AND
  // (runtime/straggler.h: the ranks' waits, each with its rank in the low bits). Both operations
  // are associative and commutative, so the tree combines them level by level as the star does at
  // rank 0, in the same messages. Every rank must set the same `n`, before its first star_and.
  void set_max_words(size_t n) { max_words_ = n; }
  size_t max_words() const { return max_words_; }

  // Rank 0 receives every rank's `mine` (index = rank, its own included); other ranks get an
  // empty vector. Blocking, collective.
  virtual std::vector<std::string> gather(const std::string& mine) = 0;

  // Rank 0's `data` replaces `data` on every other rank. Blocking, collective.
  virtual void broadcast(std::string& data) = 0;

  // After the last cycle of a normal shutdown: lets rank 0's last star replies reach their ranks
  // (at most `seconds`), so that nothing is pending when the transport shuts down.
  virtual void finish(double seconds) = 0;

 protected:
  // `into` = `into` combined with `from` (n words each): AND, the last max_words() by maximum.
  void combine(uint64_t* into, const uint64_t* from, size_t n) const {
    const size_t and_words = n > max_words_ ? n - max_words_ : 0;
    for (size_t i = 0; i < and_words; ++i) into[i] &= from[i];
    for (size_t i = and_words; i < n; ++i) into[i] = into[i] > from[i] ? into[i] : from[i];
  }

 private:
  size_t max_words_ = 0;
};

}  // namespace hvd::comm
