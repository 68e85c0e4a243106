#pragma once

// JSON string literals as hvd writes them (the timeline's trace file, safetensors headers): the
// escapes \" \\ \n \r \t, \u00XX for the other control characters, every other byte as is (UTF-8
// passes through). Reading JSON is nlohmann's job (training/safetensors.cc); this is the writing
// half, kept byte-stable so that files keep their exact bytes.

#include <cstdio>
#include <string>
#include <string_view>

namespace hvd {

inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

inline std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

}  // namespace hvd
