#include "common/ranks.h"

namespace hvd {

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  size_t runs = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (runs == 16) {
      out += " and " + std::to_string(ranks.size() - i) + " more";
      break;
    }
    out += (runs ? ", " : "") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    ++runs;
    i = j + 1;
  }
  return out;
}

std::string lost_ranks_message(const std::vector<int>& lost, const std::string& why) {
  return rank_list(lost) + (lost.size() == 1 ? " was" : " were") + " lost: " + why +
         ". The process died or its node's network failed; see that rank's log and the "
         "launcher's message.";
}

}  // namespace hvd
