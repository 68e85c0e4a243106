// libFuzzer target: SLURM task-count expansion (cluster/hostlist.h, expand_task_counts).
//
// Properties checked on every accepted input:
//  - at most kMaxExpandedHosts counts, each in [0, 1e9];
//  - the expansion is a fixed point: the counts written "a,b,c" expand to the same list.

#include <cstddef>
#include <cstdint>
#include <string>

#include "cluster/hostlist.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  hvd::fuzz::guarded([&] {
    auto counts = hvd::cluster::expand_task_counts(input);
    HVD_FUZZ_CHECK(counts.size() <= hvd::cluster::kMaxExpandedHosts, std::to_string(counts.size()));
    std::string written;
    for (int c : counts) {
      HVD_FUZZ_CHECK(c >= 0 && c <= 1'000'000'000, std::to_string(c));
      if (!written.empty()) written += ',';
      written += std::to_string(c);
    }
    auto again = hvd::cluster::expand_task_counts(written);
    HVD_FUZZ_CHECK(again == counts, "re-expanding the written counts changed the list");
  });
  return 0;
}
