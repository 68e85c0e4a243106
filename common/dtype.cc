#include "common/dtype.h"

#include <string>

#include "hvd/error.h"

namespace hvd::dtypes {

void throw_unknown(DataType dtype) {
  throw InvalidArgumentError("unknown DataType " + std::to_string(static_cast<int>(dtype)));
}

const char* name(DataType dtype) {
  const Info* info = find(dtype);
  return info ? info->name : "unknown";
}

std::optional<DataType> from_safetensors(std::string_view code) {
  for (const Info& info : kTable)
    if (code == info.safetensors) return info.dtype;
  return std::nullopt;
}

}  // namespace hvd::dtypes
