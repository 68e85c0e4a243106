#include "common/compression.h"

#include <cctype>

#include "hvd/error.h"

namespace hvd {

Compression parse_compression(const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "none") return Compression::kNone;
  if (v == "fp16") return Compression::kFp16;
  if (v == "bf16") return Compression::kBf16;
  throw InvalidArgumentError("HVD_COMPRESSION='" + value +
                             "' is not valid: expected one of none|fp16|bf16.");
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kBf16:
      return "bf16";
  }
  return "?";
}

}  // namespace hvd
