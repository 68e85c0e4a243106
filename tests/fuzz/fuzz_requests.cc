// libFuzzer target: the negotiation messages' parser (runtime/message.h, parse_requests), which
// reads what other ranks sent through MPI. A corrupt message must be rejected with hvd::Error,
// never read out of bounds or allocate without bound.
//
// Property checked on every accepted input: serialize_requests(parse_requests(bytes)) reproduces
// the bytes the parser consumed (a prefix of the input), field for field.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/message.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  hvd::fuzz::guarded([&] {
    std::vector<hvd::Request> parsed = hvd::parse_requests(bytes, size);
    const std::string again = hvd::serialize_requests(parsed);
    HVD_FUZZ_CHECK(again.size() <= size, "re-serialised " + std::to_string(again.size()) +
                                             " bytes from " + std::to_string(size));
    HVD_FUZZ_CHECK(again == std::string(bytes, again.size()),
                   "re-serialised bytes differ from the input");
  });
  return 0;
}
