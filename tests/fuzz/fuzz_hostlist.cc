// libFuzzer target: SLURM hostlist expansion (cluster/hostlist.h, expand_hostlist).
//
// Properties checked on every accepted input:
//  - at most kMaxExpandedHosts names, none empty, none containing a separator or a bracket;
//  - every name passes the host-name rule (cluster/host_name.h) that -H and hostfiles use;
//  - the expansion is a fixed point: the names joined with ',' expand to the same list (checked
//    for expansions of up to 10,000 names).

#include <cstddef>
#include <cstdint>
#include <string>

#include "cluster/host_name.h"
#include "cluster/hostlist.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  hvd::fuzz::guarded([&] {
    auto hosts = hvd::cluster::expand_hostlist(input);
    HVD_FUZZ_CHECK(hosts.size() <= hvd::cluster::kMaxExpandedHosts, std::to_string(hosts.size()));
    std::string joined;
    for (const auto& h : hosts) {
      HVD_FUZZ_CHECK(!h.empty(), "empty host name");
      HVD_FUZZ_CHECK(h.find_first_of(",[] \t\r\n") == std::string::npos, "name '" + h + "'");
      HVD_FUZZ_CHECK(hvd::cluster::host_name_problem(h).empty(), "name '" + h + "'");
      if (!joined.empty()) joined += ',';
      joined += h;
    }
    // The fixed-point check doubles the cost; skip it for the large expansions (up to a million
    // names, ~1 s each under ASan) so that the fuzzer's time goes to new inputs.
    if (hosts.size() <= 10000) {
      auto again = hvd::cluster::expand_hostlist(joined);
      HVD_FUZZ_CHECK(again == hosts, "re-expanding the joined names changed the list");
    }
  });
  return 0;
}
