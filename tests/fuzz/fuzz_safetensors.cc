// libFuzzer target: the checkpoint reader's parsing (training/safetensors.h).
//
// The input is a whole file. Each run exercises read_header_length, parse_header with the whole
// file and with only the header as prefix, and parse_and_verify. Properties checked on every
// accepted header:
//  - data_offset is 8 + N, 8-byte header length included, and data_size what follows it;
//  - the tensors are in data order and tile [0, data_size) exactly, each spanning
//    element_bytes(dtype) x elements, with unique names;
//  - re-encoding the table and metadata (encode_header) parses back to the same header, so the
//    writer can express everything the reader accepts;
//  - with a freshly computed checksum the file verifies, and with a different one it does not.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <string_view>

#include "training/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

namespace st = hvd::training;

namespace {

bool same(const st::SafetensorsHeader& a, const st::SafetensorsHeader& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& x = a.tensors[i];
    const auto& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin ||
        x.end != y.end)
      return false;
  }
  return true;
}

void check_header(const st::SafetensorsHeader& h, std::string_view file) {
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  HVD_FUZZ_CHECK(h.data_offset == 8 + n, std::to_string(h.data_offset));
  HVD_FUZZ_CHECK(h.data_offset + h.data_size == file.size(), std::to_string(h.data_size));
  uint64_t expected = 0;
  std::set<std::string> names;
  for (const auto& e : h.tensors) {
    HVD_FUZZ_CHECK(names.insert(e.name).second, "duplicate name '" + e.name + "'");
    HVD_FUZZ_CHECK(e.begin == expected,
                   "tensor '" + e.name + "' does not start where the previous ended");
    uint64_t elements = 1;
    for (int64_t d : e.shape) {
      HVD_FUZZ_CHECK(d >= 0, "negative dimension");
      elements *= static_cast<uint64_t>(d);  // no overflow: the reader checked the byte size
    }
    HVD_FUZZ_CHECK(e.size() == elements * st::element_bytes(e.dtype),
                   "tensor '" + e.name + "' size");
    expected = e.end;
  }
  HVD_FUZZ_CHECK(expected == h.data_size, "tensors do not cover the data section");

  // Round trip through the writer: same table, same metadata, same data.
  std::string rewritten = st::encode_header(h.tensors, h.metadata);
  const std::size_t header_end = rewritten.size();
  rewritten.append(file.substr(h.data_offset));
  st::SafetensorsHeader again = st::parse_header(rewritten, rewritten.size());
  HVD_FUZZ_CHECK(same(h, again), "encode_header(parse_header(file)) parses differently");
  HVD_FUZZ_CHECK(again.data_offset == header_end, "rewritten data offset");
  HVD_FUZZ_CHECK(header_end % 8 == 0, "rewritten header is not padded to 8 bytes");

  // The checksum over this content verifies; one bit off does not.
  st::SafetensorsHeader with_sum = h;
  with_sum.metadata[st::kChecksumAlgorithmKey] = st::kChecksumAlgorithm;
  st::Xxh64 y = st::begin_checksum(with_sum.tensors, with_sum.metadata);
  y.update(file.data() + h.data_offset, h.data_size);
  with_sum.metadata[st::kChecksumKey] = st::format_checksum(y.digest());
  st::verify_checksum(with_sum, y.digest());
  bool rejected = false;
  try {
    st::verify_checksum(with_sum, y.digest() ^ 1);
  } catch (const hvd::Error&) {
    rejected = true;
  }
  HVD_FUZZ_CHECK(rejected, "a wrong digest verified");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  hvd::fuzz::guarded([&] {
    uint64_t n = st::read_header_length(file, file.size());
    HVD_FUZZ_CHECK(n >= 1 && n <= st::kMaxHeaderBytes && 8 + n <= file.size(), std::to_string(n));
    // The checkpointer reads only the first 8 + N bytes and passes the real file size.
    st::SafetensorsHeader from_prefix = st::parse_header(file.substr(0, 8 + n), file.size());
    st::SafetensorsHeader h = st::parse_header(file, file.size());
    HVD_FUZZ_CHECK(same(h, from_prefix), "the prefix and the whole file parse differently");
    check_header(h, file);
  });
  hvd::fuzz::guarded([&] {
    st::SafetensorsHeader h = st::parse_and_verify(file);
    check_header(h, file);
  });
  return 0;
}
