// libFuzzer target: the -H host spec (cluster/hostfile.h, parse_host_spec, format_host_spec).
//
// Properties checked on every accepted input:
//  - at least one host; names non-empty, unique, without blanks or ','; slots in [1, 2^20];
//  - every host passes the host-name rule (cluster/host_name.h) that hostfiles and SLURM lists use;
//  - format_host_spec (what mpirun -H receives) parses back to the same list.

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
    auto hosts = hvd::cluster::parse_host_spec(input);
    HVD_FUZZ_CHECK(!hosts.empty(), "no hosts and no error");
    std::set<std::string> seen;
    for (const auto& h : hosts) {
      HVD_FUZZ_CHECK(!h.host.empty(), "empty host");
      HVD_FUZZ_CHECK(h.host.find_first_of(" \t,") == std::string::npos, "host '" + h.host + "'");
      HVD_FUZZ_CHECK(hvd::cluster::host_name_problem(h.host).empty(), "host '" + h.host + "'");
      HVD_FUZZ_CHECK(h.slots >= 1 && h.slots <= (1 << 20), std::to_string(h.slots));
      HVD_FUZZ_CHECK(seen.insert(h.host).second, "duplicate host '" + h.host + "' accepted");
    }
    const std::string spec = hvd::cluster::format_host_spec(hosts);
    HVD_FUZZ_CHECK(hvd::cluster::parse_host_spec(spec) == hosts,
                   "'" + spec + "' parses differently");
  });
  return 0;
}
