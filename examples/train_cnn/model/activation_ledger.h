#pragma once

// The CNN graph's own accounting of activation memory (model/cnn_graph.h): which activation
// buffers hold contents the rest of the step still needs, how many bytes that is now, and the most
// it was at once since the step began. The graph calls hold() when a layer writes an activation
// (with the bytes of the batch it wrote) and drop() after that activation's last reader in the
// backward pass, or right after the forward pass of a block it recomputes (model/recompute.h);
// begin_step() at the start of each forward pass. So the peak is measured as the graph runs, from
// the sizes it really wrote, not estimated from the shapes.
//
// Not thread-safe (one per graph, as the graph).

#include <array>
#include <cstdint>
#include <string>

#include "hvd/error.h"

namespace train_cnn::model {

// What activation_memory() of a model reports (bytes).
struct ActivationMemory {
  int64_t peak_bytes = 0;  // most bytes held at once during the last step (forward(), backward())
  int64_t held_bytes = 0;  // held now (after backward(): what the step's output still holds)
  int64_t reserved_bytes = 0;  // allocated by the activation buffers (for the largest batch seen)
};

class ActivationLedger {
 public:
  static constexpr int kSlots = 8;

  // A new step: nothing held, peak 0.
  void begin_step() {
    held_.fill(0);
    total_ = 0;
    peak_ = 0;
  }
  // Slot now holds bytes (replacing what it held).
  void hold(int slot, int64_t bytes) {
    int64_t& h = at(slot);
    total_ += bytes - h;
    h = bytes;
    if (total_ > peak_) peak_ = total_;
  }
  // Slot's contents are no longer needed (a no-op when it holds nothing).
  void drop(int slot) { hold(slot, 0); }

  int64_t held_bytes() const { return total_; }
  int64_t peak_bytes() const { return peak_; }

 private:
  int64_t& at(int slot) {
    if (slot < 0 || slot >= kSlots)
      throw hvd::InvalidArgumentError("ActivationLedger: slot " + std::to_string(slot) +
                                      " is outside 0.." + std::to_string(kSlots - 1) + ".");
    return held_[static_cast<size_t>(slot)];
  }

  std::array<int64_t, kSlots> held_{};
  int64_t total_ = 0;
  int64_t peak_ = 0;
};

}  // namespace train_cnn::model
