#pragma once

// Spare names and shapes: std::string and std::vector<int64_t> objects that keep their heap
// buffers, handed from the background thread, which ends a tensor's request and entry, back to
// the user threads, which submit the next tensors.
//
// Every tensor submitted copies its name twice (the request's and the queue entry's) and its shape
// once (the request's), and the background thread frees all three after the operation. Names
// longer than std::string's inline 15 characters ("model.layer3.conv2.weight.grad") and every
// shape live on the heap: three malloc calls on the user thread and three free calls on the
// background thread per tensor, and a free of another thread's block takes glibc's locked arena
// path once its per-thread cache is full (7 blocks per size: a step's burst of tensors overflows
// it at once). With spares, the copies land in buffers earlier tensors left behind, and a step in
// the steady state allocates nothing for them (docs/benchmarks.md, "Spare names and shapes").
//
// Thread safety: take_*() and give() may be called from any thread. Each thread takes from a
// stash of its own (no lock), refilled from the shared pool in runs of kRefill under one lock;
// give() fills the calling thread's stash (a job of one rank runs its tensors on the user thread,
// which then gives and takes without a lock) and adds the rest of a batch under one lock. The
// pool keeps at most kMax of each kind; beyond that, and for buffers too large to be worth
// keeping, the caller frees them as before.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/tensor.h"

namespace hvd::detail {

class Spares {
 public:
  static constexpr std::size_t kMax = 16384;         // of names and of shapes
  static constexpr std::size_t kRefill = 64;         // taken from the pool at a time
  static constexpr std::size_t kMaxNameBytes = 256;  // larger buffers are not kept
  static constexpr std::size_t kMaxDims = 16;

  // Assigns `name` to *out, in a spare buffer when *out's own is too small and one is at hand.
  static void take_name(std::string_view name, std::string* out);
  // Assigns `shape` to *out, likewise.
  static void take_shape(const Shape& shape, std::vector<int64_t>* out);

  // Moves the strings' and vectors' buffers (those worth keeping) into the calling thread's stash,
  // up to 2 * kRefill of each kind, and the rest into the pool: the elements are left moved-from
  // or as they were (the caller frees those). Either may be null.
  static void give(std::vector<std::string>* names, std::vector<std::vector<int64_t>>* shapes);

  // The spares in the shared pool now (tests; the calling thread's stash is not counted).
  static std::size_t pooled_names();
  static std::size_t pooled_shapes();
};

}  // namespace hvd::detail
