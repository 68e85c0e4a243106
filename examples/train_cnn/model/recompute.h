#pragma once

// Activation recomputation (train_cnn --recompute): which blocks of the CNN graph
// (model/cnn_graph.h) keep only their input during the forward pass and run their forward again,
// just before their backward, to get the rest back.
//
// The graph is three blocks, each with an input kept for backward (its checkpoint), inner
// activations, and an output that is the next block's input:
//   conv1  images -> conv1 -> ReLU -> [a1] -> max-pool -> p1     inner a1 [N, C1, H, W]
//   conv2  p1     -> conv2 -> ReLU -> [a2] -> max-pool -> p2     inner a2 [N, C2, H/2, W/2]
//   fc     p2     -> fc1   -> ReLU -> [h]  -> fc2      -> logits  inner h  [N, hidden]
// (C1, C2: conv1_channels, conv2_channels.)
// A recomputed block's inner activation lives in one scratch buffer shared by all recomputed
// blocks (sized for the largest), so it is held only while that block runs: once in the forward
// pass, once more in the backward pass, where the block re-runs conv/fc + ReLU from its kept input
// (the pooling layer and fc2 are not re-run: their outputs are still held). The layers are
// deterministic, so the recomputed activations, and with them the gradients, are bitwise those of
// a run that kept them.

#include <string>
#include <utility>

#include "hvd/error.h"

namespace train_cnn::model {

struct RecomputeBlocks {
  bool conv1 = false;
  bool conv2 = false;
  bool fc = false;

  bool any() const { return conv1 || conv2 || fc; }
  static RecomputeBlocks all() { return {.conv1 = true, .conv2 = true, .fc = true}; }
  bool operator==(const RecomputeBlocks&) const = default;
};

// "none", "all", or the recomputed blocks in graph order joined by commas ("conv1,conv2").
inline std::string describe(const RecomputeBlocks& r) {
  if (!r.any()) return "none";
  if (r == RecomputeBlocks::all()) return "all";
  std::string s;
  for (const auto& [on, name] : {std::pair{r.conv1, "conv1"}, {r.conv2, "conv2"}, {r.fc, "fc"}})
    if (on) s += (s.empty() ? "" : ",") + std::string(name);
  return s;
}

// The inverse of describe(): "none", "all", or a comma-separated list of conv1, conv2, fc (each at
// most once, no spaces). Anything else is an hvd::InvalidArgumentError naming the value and what
// is accepted; who prefixes it (e.g. "--recompute").
inline RecomputeBlocks parse_recompute_blocks(const std::string& value, const std::string& who) {
  if (value == "none") return {};
  if (value == "all") return RecomputeBlocks::all();
  auto bad = [&](const std::string& why) {
    return hvd::InvalidArgumentError(who + " is '" + value + "': " + why +
                                     "; it must be none, all, or a comma-separated list of the "
                                     "blocks conv1, conv2, fc (e.g. conv1,conv2).");
  };
  RecomputeBlocks r;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const std::string name =
        value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool* block = name == "conv1"   ? &r.conv1
                  : name == "conv2" ? &r.conv2
                  : name == "fc"    ? &r.fc
                                    : nullptr;
    if (block == nullptr)
      throw bad(name.empty() ? std::string("an empty block name") : "no block '" + name + "'");
    if (*block) throw bad("block '" + name + "' is named twice");
    *block = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return r;
}

}  // namespace train_cnn::model
