#pragma once

// The umbrella header: everything a trainer needs.
#include <functional>
#include <string>

#include "hvd/checkpoint.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "hvd/loss_scaler.h"
#include "hvd/prefetch.h"
#include "hvd/process_set.h"
#include "hvd/stop.h"
#include "hvd/straggler.h"
#include "hvd/strategy.h"
#include "hvd/tensor.h"
#include "hvd/tuning.h"
#include "hvd/version.h"

namespace hvd {

// Starts the runtime: MPI_Init_thread unless MPI is already initialised (then MPI stays its owner's
// and hvd never finalises it), reads and validates the HVD_* configuration, learns the topology and
// starts the background thread. Idempotent. Collective: every rank must call it.
void init();
// Collective: completes or fails every pending handle, stops the background thread and finalises
// MPI if init() initialised it. Safe to call twice.
void shutdown();
bool initialized();

// What happens when a peer rank is lost while this rank is blocked inside MPI (MPI calls cannot be
// interrupted, so no hvd::Error can reach the program). hvd's watchdog thread notices it after
// HVD_PEER_TIMEOUT_SECONDS, logs an error naming the lost ranks ("... rank 1 was lost: ..."),
// calls the handler set here with that message, and then applies HVD_ON_PEER_LOSS: `exit`
// (default) ends the process with std::_Exit(70), so that the job does not hang; `abort` calls
// std::abort() (a core dump); `none` leaves the rank blocked until the launcher ends the job. A
// lost peer that the negotiation notices instead (this rank not inside MPI) fails operations with
// a CommunicationError and calls no handler. docs/reliability.md has the details.
//
// The handler runs on hvd's watchdog thread while other threads may be blocked in MPI: it must not
// call hvd or MPI functions (they would block forever) nor wait for those threads. It may log,
// flush files, notify a supervisor, or end the process itself (e.g. std::_Exit with the code a
// scheduler treats as "requeue"); if it returns, HVD_ON_PEER_LOSS applies. It is called at most
// once per init(); an exception thrown from it ends the process (std::terminate). May be set
// before or after init(), from any thread; an empty function removes it.
using PeerLossHandler = std::function<void(const std::string& message)>;
void set_peer_loss_handler(PeerLossHandler handler);

// Deterministic reductions. On, every floating-point sum, average and product that an all-reduce
// or grouped all-reduce submitted afterwards makes is reduced element by element in rank order
// (rank 0's value, plus rank 1's, ..., in double, rounded once), whatever the element's place in
// the fusion buffer and the buffer's size: the same program on the same ranks with the same data
// gives the same bits on every run, with fusion on. Not across rank counts (the sums
// have other operands). Starts as HVD_DETERMINISTIC says (default off). Every rank must switch it
// at the same point of its sequence of collectives: an operation that ranks submit one way and
// another fails on every rank, naming them. Integer and min/max reductions are exact in any order
// and unchanged. docs/determinism.md has the cost and the details. Both throw before init().
void set_deterministic(bool on);
bool deterministic();

// Topology. All throw hvd::Error before init() and after shutdown().
int rank();
int size();
int local_rank();  // rank within this node
int local_size();  // ranks on this node
int cross_rank();  // index of this node among nodes (rank among the ranks with this local_rank)
int cross_size();  // number of nodes (ranks with this local_rank)
bool is_homogeneous();  // every node has the same local_size

}  // namespace hvd
