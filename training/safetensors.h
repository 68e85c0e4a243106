#pragma once

// The safetensors file format (https://github.com/huggingface/safetensors), as hvd writes and reads
// it. This file is pure: no MPI, no runtime, no file system. A file is
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  a JSON object, padded with spaces so that 8 + N is a multiple of 8:
//              {"__metadata__":{"k":"v",...},
//               "name":{"dtype":"F32","shape":[2,3],"data_offsets":[begin,end]}, ...}
//   [rest]     the data section: every tensor's raw little-endian bytes; data_offsets are relative
//              to its start.
//
// Reading is strict, as the reference reader is, and then some: the header length is at most
// kMaxHeaderBytes and fits in the file; the JSON is exactly the shape above (no floats, booleans,
// nulls or unknown keys; no duplicate keys; valid UTF-8); every dtype is known; shapes are
// non-negative and their byte size does not overflow; each tensor's data_offsets span exactly
// dtype size x elements, and the tensors, sorted by offset, tile the data section with no gap
// and no overlap. Any violation throws hvd::Error naming what was wrong and where; parsing never
// allocates more than a small multiple of the header length.
//
// Checksum (our extension, in __metadata__): "checksum" is the XXH64 (seed 0), as 16 lowercase hex
// digits, of a canonical encoding of the header followed by the data section, so that corruption
// anywhere in a file - tensor table, metadata or data - is detected. The canonical encoding is
// "hvd-safetensors-checksum-v1\n", then for each tensor in data order (by begin, end, name)
//   "t " <len(name)> ":" <name> " " <dtype> " " <shape as [a,b]> " " <begin> " " <end> "\n"
// and for each metadata entry other than "checksum", sorted by key (bytewise)
//   "m " <len(key)> ":" <key> " " <len(value)> ":" <value> "\n"
// with lengths and numbers in decimal. "checksum_algorithm" names this scheme ("xxh64-v1").
//
// The host must be little-endian (static_assert in safetensors.cc): data is copied as is.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/tensor.h"

namespace hvd::training {

// The reference reader's limit (safetensors' MAX_HEADER_SIZE): a larger header is rejected before
// anything is allocated for it.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
inline constexpr const char* kChecksumKey = "checksum";
inline constexpr const char* kChecksumAlgorithmKey = "checksum_algorithm";
inline constexpr const char* kChecksumAlgorithm = "xxh64-v1";

// "U8", "I8", "I32", "I64", "F16", "BF16", "F32", "F64".
const char* safetensors_dtype_name(DataType dtype);
// The inverse; std::nullopt for any other name (safetensors' BOOL, U16, F8_E4M3... included).
std::optional<DataType> parse_safetensors_dtype(std::string_view name);
// Bytes per element (1, 1, 4, 8, 2, 2, 4, 8); no runtime needed.
std::size_t element_bytes(DataType dtype);

// XXH64 (the xxHash 64-bit algorithm; libxxhash), streaming. Not thread-safe; cheap to copy.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, std::size_t size);
  uint64_t digest() const;

 private:
  // libxxhash's XXH64_state_t, held by value (so the object copies like the old hand-written one)
  // without this header needing xxhash.h; safetensors.cc checks the size.
  alignas(8) unsigned char state_[88];
};

// A tensor as the format sees it: a name, a dtype, a shape and its bytes (CPU memory). For writing,
// data is read; for loading, data is written. data may be null when the tensor has no elements.
struct TensorBytes {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  void* data = nullptr;
};

// One entry of a header's tensor table; begin and end are relative to the data section.
struct SafetensorsEntry {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;        // in data order: by begin, then end, then name
  std::map<std::string, std::string> metadata;  // __metadata__, empty when absent
  uint64_t data_offset = 0;                     // file offset of the data section: 8 + N
  uint64_t data_size = 0;                       // file size - data_offset

  // The entry of that name, or nullptr.
  const SafetensorsEntry* find(std::string_view name) const;
};

// ---- writing ------------------------------------------------------------------------------------

// The tensor table for tensors laid out back to back in the given order. Throws
// hvd::InvalidArgumentError on an empty or duplicate name, a negative dimension, a byte size that
// overflows, or null data for a tensor with elements.
std::vector<SafetensorsEntry> plan_layout(const std::vector<TensorBytes>& tensors);

// A checksum in progress: the canonical header has been fed; feed the data section next, in
// order, then format_checksum(state.digest()). metadata's own "checksum" entry is ignored.
Xxh64 begin_checksum(const std::vector<SafetensorsEntry>& entries,
                     const std::map<std::string, std::string>& metadata);
// 16 lowercase hex digits.
std::string format_checksum(uint64_t digest);

// The 8-byte length and the padded JSON header. Throws hvd::InvalidArgumentError when the header
// would exceed kMaxHeaderBytes.
std::string encode_header(const std::vector<SafetensorsEntry>& entries,
                          const std::map<std::string, std::string>& metadata);

// A whole file in memory: plan_layout, the checksum (and checksum_algorithm) added to metadata,
// the header, the data. For tests and small tools; the checkpointer streams to disk instead.
std::string serialize_safetensors(const std::vector<TensorBytes>& tensors,
                                  std::map<std::string, std::string> metadata);

// ---- reading ------------------------------------------------------------------------------------

// The header length N from the first 8 bytes of a file of file_size bytes. Throws hvd::Error when
// fewer than 8 bytes are given, N is 0, N exceeds kMaxHeaderBytes, or 8 + N exceeds file_size.
uint64_t read_header_length(std::string_view first_bytes, uint64_t file_size);

// Parses and validates the header. prefix holds the file's first bytes (at least 8 + N of them;
// more is fine, e.g. the whole file); file_size is the size of the whole file. Throws hvd::Error
// on any violation listed at the top of this file.
SafetensorsHeader parse_header(std::string_view prefix, uint64_t file_size);

// Checks the "checksum" in header.metadata against actual_digest (from begin_checksum + data).
// Throws hvd::Error when it is missing, malformed, of another algorithm, or different.
void verify_checksum(const SafetensorsHeader& header, uint64_t actual_digest);

// parse_header on a whole file in memory, then verify_checksum. For tests and tools.
SafetensorsHeader parse_and_verify(std::string_view file);

}  // namespace hvd::training
