#include "cluster/cores.h"

#include <algorithm>

namespace hvd::cluster {

int cores_per_rank(const cpu_set_t& mine, const std::vector<cpu_set_t>& node) {
  int sharing = 0;
  for (const cpu_set_t& other : node) {
    cpu_set_t both;
    CPU_AND(&both, &mine, &other);
    if (CPU_COUNT(&both) > 0) ++sharing;
  }
  return std::max(1, CPU_COUNT(&mine) / std::max(sharing, 1));
}

}  // namespace hvd::cluster
