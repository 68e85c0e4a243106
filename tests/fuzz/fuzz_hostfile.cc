// libFuzzer target: hostfile text (cluster/hostfile.h, parse_hostfile).
//
// Properties checked on every accepted input:
//  - host names are non-empty, unique, free of blanks, '#' and '='; slots in [1, 2^20];
//  - every host passes the host-name rule (cluster/host_name.h) that -H and SLURM lists use;
//  - writing the hosts back as "HOST slots=N" lines parses to the same list;
//  - total_slots is the sum of the slots (no overflow for these bounds).

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "cluster/host_name.h"
#include "cluster/hostfile.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  hvd::fuzz::guarded([&] {
    auto hosts = hvd::cluster::parse_hostfile(input, "fuzz.hosts");
    std::set<std::string> seen;
    std::string text;
    long long sum = 0;
    for (const auto& h : hosts) {
      HVD_FUZZ_CHECK(!h.host.empty(), "empty host");
      HVD_FUZZ_CHECK(h.host.find_first_of(" \t\r\n#=") == std::string::npos,
                     "host '" + h.host + "'");
      HVD_FUZZ_CHECK(hvd::cluster::host_name_problem(h.host).empty(), "host '" + h.host + "'");
      HVD_FUZZ_CHECK(h.slots >= 1 && h.slots <= (1 << 20), std::to_string(h.slots));
      HVD_FUZZ_CHECK(seen.insert(h.host).second, "duplicate host '" + h.host + "' accepted");
      text += h.host + " slots=" + std::to_string(h.slots) + "\n";
      sum += h.slots;
    }
    HVD_FUZZ_CHECK(hvd::cluster::parse_hostfile(text, "rewritten") == hosts,
                   "rewritten file differs");
    if (sum <= 0x7fffffff)
      HVD_FUZZ_CHECK(hvd::cluster::total_slots(hosts) == sum, std::to_string(sum));
  });
  return 0;
}
