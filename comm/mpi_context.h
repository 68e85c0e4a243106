#pragma once

// What the MPI backend needs: hvd's own communicators (a duplicate of the world, so user traffic on
// MPI_COMM_WORLD never mixes with ours; the node-local one; the cross-node one among ranks of the
// same local rank), the MPI datatype and reduction op for every hvd dtype (fp16 and bf16 through a
// 2-byte datatype and custom ops that round to nearest even), and MPI_CHECK.
//
// Created by the runtime at init() on the user's thread (the communicator calls are collective),
// then used by the background thread only. Every communicator returns errors
// (MPI_ERRORS_RETURN) so that MPI_CHECK can report them.

#include <mpi.h>

#include <mutex>
#include <string>

#include "common/compression.h"
#include "common/sanitizers.h"
#include "hvd/tensor.h"

namespace hvd::comm {

// Throws CommunicationError naming the call, the rank, MPI's error string and the library.
[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line);

// Under ThreadSanitizer only: the ordering Open MPI gives two threads that both call it, made
// visible. Open MPI is not built with TSan. A thread other than the background thread that calls
// MPI (the watchdog, answering liveness probes every 100 ms) runs MPI's progress engine, which may
// copy a fragment of the background thread's collective into hvd's buffer or into Open MPI's own
// temporary buffer (or run hvd's fp16 reduction on it); the background thread reads that buffer
// once its own call returns, or inside the same call (the reduction of the received fragment).
// Open MPI's atomics order the two, but TSan cannot see them and reported the read as a race with
// the watchdog's write (docs/reliability.md). So in a TSan build:
// - MPI_CHECK ends with mpi_progress_seen() and the watchdog holds an MpiProgressScope around its
//   own MPI calls: both take one mutex, so what MPI did inside a watchdog call happens-before what
//   a thread does after its next checked MPI call, as it does in fact. Never while a thread is
//   inside an MPI call of its own (a scope's thread takes the mutex before its call), so no lock
//   order with MPI's own locks.
// - Inside a scope TSan ignores the thread's memory accesses (__tsan_ignore_thread_begin): the
//   copies that the progress engine makes there for the background thread's collective are not
//   recorded. The mutex cannot order a copy that the background thread reads before its own call
//   returns (the received fragment that Open MPI reduces inside MPI_Allreduce): TSan reported each
//   of those elements as a race, every report then dropped by the `race:mca_` suppression, and
//   handling them held the thread for tens of seconds (seen with gdb). Such a storm on a thread
//   inside Open MPI's shared-memory progress, which one thread of a process runs at a time (the
//   vader BTL's try-lock), leaves the whole process deaf, its watchdog's answers included: the
//   likely cause of healthy ranks declared lost under TSan (issue 42, docs/reliability.md).
// In other builds both are empty.
std::recursive_mutex& mpi_progress_mutex();

inline void mpi_progress_seen() {
  if constexpr (kThreadSanitizer) std::lock_guard<std::recursive_mutex> lock(mpi_progress_mutex());
}

// TSan builds only (mpi_context.cc): the scope's mutex and TSan's ignoring of the thread's
// accesses.
void enter_mpi_progress_scope();
void leave_mpi_progress_scope();

class MpiProgressScope {
 public:
  MpiProgressScope() {
    if constexpr (kThreadSanitizer) enter_mpi_progress_scope();
  }
  ~MpiProgressScope() {
    if constexpr (kThreadSanitizer) leave_mpi_progress_scope();
  }
  MpiProgressScope(const MpiProgressScope&) = delete;
  MpiProgressScope& operator=(const MpiProgressScope&) = delete;
};

#define MPI_CHECK(call)                                                     \
  do {                                                                      \
    int hvd_mpi_rc_ = (call);                                               \
    ::hvd::comm::mpi_progress_seen();                                       \
    if (hvd_mpi_rc_ != MPI_SUCCESS)                                         \
      ::hvd::comm::throw_mpi_error(#call, hvd_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

struct MpiTopology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool homogeneous = true;
  // The cores this rank may count as its own (cluster/cores.h: its affinity mask divided among
  // the node's ranks whose masks overlap it); at least 1.
  int cores_per_rank = 1;
};

class MpiContext {
 public:
  // Collective over `base` (MPI_COMM_WORLD, or a process set's communicator), which it duplicates:
  // world() is the duplicate, the topology is that of `base`'s ranks. `fake_local_size` > 0 splits
  // them into fake nodes of that many consecutive ranks (tests of the hierarchical path on one
  // machine).
  explicit MpiContext(int fake_local_size = 0, MPI_Comm base = MPI_COMM_WORLD);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  MPI_Comm world() const { return world_; }
  MPI_Comm local() const { return local_; }
  MPI_Comm cross() const { return cross_; }
  const MpiTopology& topology() const { return topo_; }

  MPI_Datatype datatype(DataType dtype) const;
  MPI_Op op(DataType dtype, ReduceOp op) const;

  // Set once by the runtime at init(), before the background thread starts (HVD_COMPRESSION);
  // read by the MPI all-reduce ops.
  void set_compression(Compression c);
  Compression compression() const { return compression_; }

 private:
  MPI_Comm world_ = MPI_COMM_NULL, local_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  MpiTopology topo_;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Op half_ops_[2][5] = {};  // [fp16, bf16][sum, min, max, product, (unused)]
  Compression compression_ = Compression::kNone;
};

// MPI counts are int: calls on more elements run in chunks of at most this many.
constexpr int64_t kMaxMpiCount = (int64_t{1} << 30);

}  // namespace hvd::comm
