#include "training/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "hvd/error.h"

namespace hvd::training {

static_assert(std::endian::native == std::endian::little,
              "hvd checkpoints copy tensor bytes as they are: a little-endian host is required");

namespace {

struct DtypeInfo {
  DataType dtype;
  const char* name;
  std::size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {DataType::kUInt8, "U8", 1},    {DataType::kInt8, "I8", 1},
    {DataType::kInt32, "I32", 4},   {DataType::kInt64, "I64", 8},
    {DataType::kFloat16, "F16", 2}, {DataType::kBFloat16, "BF16", 2},
    {DataType::kFloat32, "F32", 4}, {DataType::kFloat64, "F64", 8},
};

const DtypeInfo& info(DataType dtype) {
  for (const auto& d : kDtypes)
    if (d.dtype == dtype) return d;
  throw InvalidArgumentError("safetensors: unknown DataType value " +
                             std::to_string(static_cast<int>(dtype)));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Elements x bytes per element, or nullopt on a negative dimension or overflow.
std::optional<uint64_t> byte_size(DataType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  uint64_t b = element_bytes(dtype);
  if (n > std::numeric_limits<uint64_t>::max() / b) return std::nullopt;
  return n * b;
}

// Data order: by begin, then end (a zero-sized tensor sorts before the tensor that starts where it
// sits), then name.
bool data_order(const SafetensorsEntry& a, const SafetensorsEntry& b) {
  if (a.begin != b.begin) return a.begin < b.begin;
  if (a.end != b.end) return a.end < b.end;
  return a.name < b.name;
}

uint64_t load_le64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// ---- XXH64 constants -----------------------------------------------------------------------------
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}

uint64_t xxh_merge(uint64_t acc, uint64_t val) {
  acc ^= xxh_round(0, val);
  return acc * kP1 + kP4;
}

uint32_t load_le32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t load_le64u(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// ---- JSON ------------------------------------------------------------------------------------------

void append_json_string(std::string& out, std::string_view s) {
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

// True when s is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07;
    else
      return false;
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000))
      return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A strict reader of exactly the JSON a safetensors header holds: objects, strings, non-negative
// integers and arrays of them. It is driven by the schema (no recursion, no DOM), so nesting cannot
// exhaust the stack and memory stays proportional to the header.
class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("malformed safetensors header at byte " + std::to_string(pos_) +
                " of the JSON: " + what);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool at_end() {
    skip_ws();
    return pos_ == s_.size();
  }
  std::string found() const {
    if (pos_ >= s_.size()) return "the end of the header";
    auto c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
  }
  void expect(char c, const char* context) {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != c)
      fail(std::string("expected '") + c + "' " + context + ", found " + found());
    ++pos_;
  }
  // After an element of a container: true for ',' (another follows), false for the closer.
  bool next(char closer, const char* context) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      return true;
    }
    if (pos_ < s_.size() && s_[pos_] == closer) {
      ++pos_;
      return false;
    }
    fail(std::string("expected ',' or '") + closer + "' " + context + ", found " + found());
  }
  // True (and consumed) when the container opened just before is empty.
  bool empty(char closer) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == closer) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::string string(const char* context) {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != '"')
      fail(std::string("expected a string ") + context + ", found " + found());
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail(std::string("unterminated string ") + context);
      auto c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return out;
      if (c < 0x20) {
        --pos_;
        fail(std::string("raw control character in a string ") + context + " (" + found() + ")");
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              fail("high surrogate not followed by a low surrogate");
            pos_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("invalid escape \\" + found());
      }
    }
  }

  // A non-negative integer that fits in uint64_t; JSON syntax (no leading zeros, no fraction).
  uint64_t uint(const std::string& context) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '-') fail("negative number " + context);
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9')
      fail("expected a non-negative integer " + context + ", found " + found());
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      fail("number with a leading zero " + context);
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      auto d = static_cast<uint64_t>(s_[pos_] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) fail("number too large " + context);
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      fail("expected an integer " + context + ", found a fraction or exponent");
    return v;
  }

 private:
  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_];
      uint32_t d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        fail("invalid hex digit in a \\u escape: " + found());
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

SafetensorsEntry parse_entry(JsonReader& json, std::string name) {
  SafetensorsEntry e;
  e.name = std::move(name);
  const std::string ctx = "in tensor '" + e.name + "'";
  bool have_dtype = false, have_shape = false, have_offsets = false;
  json.expect('{', ("to open tensor '" + e.name + "'").c_str());
  if (!json.empty('}')) {
    do {
      std::string key = json.string(ctx.c_str());
      json.expect(':', ("after a key " + ctx).c_str());
      if (key == "dtype") {
        if (have_dtype) json.fail("duplicate key 'dtype' " + ctx);
        have_dtype = true;
        std::string d = json.string(("as the dtype " + ctx).c_str());
        auto dt = parse_safetensors_dtype(d);
        if (!dt)
          json.fail("unknown dtype '" + d + "' " + ctx +
                    " (hvd reads U8, I8, I32, I64, F16, BF16, F32, F64)");
        e.dtype = *dt;
      } else if (key == "shape") {
        if (have_shape) json.fail("duplicate key 'shape' " + ctx);
        have_shape = true;
        json.expect('[', ("to open the shape " + ctx).c_str());
        if (!json.empty(']')) {
          do {
            uint64_t d = json.uint("as a dimension " + ctx);
            if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
              json.fail("dimension " + std::to_string(d) + " too large " + ctx);
            e.shape.push_back(static_cast<int64_t>(d));
          } while (json.next(']', ("in the shape " + ctx).c_str()));
        }
      } else if (key == "data_offsets") {
        if (have_offsets) json.fail("duplicate key 'data_offsets' " + ctx);
        have_offsets = true;
        json.expect('[', ("to open data_offsets " + ctx).c_str());
        e.begin = json.uint("as the begin offset " + ctx);
        json.expect(',', ("between the two data_offsets " + ctx).c_str());
        e.end = json.uint("as the end offset " + ctx);
        json.expect(']', ("after the two data_offsets " + ctx).c_str());
      } else {
        json.fail("unknown key '" + key + "' " + ctx + " (expected dtype, shape, data_offsets)");
      }
    } while (json.next('}', ctx.c_str()));
  }
  if (!have_dtype || !have_shape || !have_offsets)
    json.fail("tensor '" + e.name + "' lacks " +
              (!have_dtype   ? "dtype"
               : !have_shape ? "shape"
                             : "data_offsets"));
  return e;
}

void parse_metadata(JsonReader& json, std::map<std::string, std::string>& out) {
  json.expect('{', "to open __metadata__");
  if (json.empty('}')) return;
  do {
    std::string key = json.string("as a __metadata__ key");
    json.expect(':', "after a __metadata__ key");
    std::string value =
        json.string(("as the value of __metadata__ '" + key + "' (values are strings)").c_str());
    if (!out.emplace(std::move(key), std::move(value)).second)
      json.fail("duplicate __metadata__ key");
  } while (json.next('}', "in __metadata__"));
}

}  // namespace

// ---- dtypes ----------------------------------------------------------------------------------------

const char* safetensors_dtype_name(DataType dtype) { return info(dtype).name; }

std::optional<DataType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::size_t element_bytes(DataType dtype) { return info(dtype).bytes; }

// ---- XXH64 -----------------------------------------------------------------------------------------

Xxh64::Xxh64(uint64_t seed)
    : v_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, buffer_{}, seed_(seed) {}

void Xxh64::update(const void* data, std::size_t size) {
  auto p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ + size < 32) {
    if (size) std::memcpy(buffer_ + buffered_, p, size);
    buffered_ += size;
    return;
  }
  if (buffered_) {
    std::size_t fill = 32 - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = xxh_round(v_[i], load_le64u(buffer_ + 8 * i));
    p += fill;
    size -= fill;
    buffered_ = 0;
  }
  while (size >= 32) {
    v_[0] = xxh_round(v_[0], load_le64u(p));
    v_[1] = xxh_round(v_[1], load_le64u(p + 8));
    v_[2] = xxh_round(v_[2], load_le64u(p + 16));
    v_[3] = xxh_round(v_[3], load_le64u(p + 24));
    p += 32;
    size -= 32;
  }
  if (size) std::memcpy(buffer_, p, size);
  buffered_ = size;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(v_[0], 1) + std::rotl(v_[1], 7) + std::rotl(v_[2], 12) + std::rotl(v_[3], 18);
    for (uint64_t v : v_) h = xxh_merge(h, v);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const unsigned char* p = buffer_;
  std::size_t n = buffered_;
  while (n >= 8) {
    h ^= xxh_round(0, load_le64u(p));
    h = std::rotl(h, 27) * kP1 + kP4;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    h ^= static_cast<uint64_t>(load_le32(p)) * kP1;
    h = std::rotl(h, 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    h ^= (*p) * kP5;
    h = std::rotl(h, 11) * kP1;
    ++p;
    --n;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// ---- header ----------------------------------------------------------------------------------------

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<SafetensorsEntry> plan_layout(const std::vector<TensorBytes>& tensors) {
  std::vector<SafetensorsEntry> out;
  out.reserve(tensors.size());
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty())
      throw InvalidArgumentError(
          "safetensors: a tensor has an empty name; give every tensor a unique name");
    if (t.name == "__metadata__")
      throw InvalidArgumentError(
          "safetensors: '__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(t.name).second)
      throw InvalidArgumentError("safetensors: tensor name '" + t.name +
                                 "' appears twice; names must be unique");
    auto bytes = byte_size(t.dtype, t.shape);
    if (!bytes)
      throw InvalidArgumentError("safetensors: tensor '" + t.name + "' has shape " +
                                 shape_text(t.shape) +
                                 ", which has a negative dimension or too many elements");
    if (*bytes > 0 && t.data == nullptr)
      throw InvalidArgumentError("safetensors: tensor '" + t.name + "' has " +
                                 std::to_string(*bytes) + " bytes but a null data pointer");
    if (offset > std::numeric_limits<uint64_t>::max() - *bytes)
      throw InvalidArgumentError("safetensors: the tensors' total size overflows 64 bits");
    out.push_back({t.name, t.dtype, t.shape, offset, offset + *bytes});
    offset += *bytes;
  }
  return out;
}

Xxh64 begin_checksum(const std::vector<SafetensorsEntry>& entries,
                     const std::map<std::string, std::string>& metadata) {
  Xxh64 h;
  auto feed = [&h](std::string_view s) { h.update(s.data(), s.size()); };
  feed("hvd-safetensors-checksum-v1\n");
  std::vector<const SafetensorsEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return data_order(*a, *b);
  });
  for (const auto* e : order) {
    std::string line = "t " + std::to_string(e->name.size()) + ":" + e->name + " " +
                       safetensors_dtype_name(e->dtype) + " " + shape_text(e->shape) + " " +
                       std::to_string(e->begin) + " " + std::to_string(e->end) + "\n";
    feed(line);
  }
  for (const auto& [k, v] : metadata) {
    if (k == kChecksumKey) continue;
    std::string line =
        "m " + std::to_string(k.size()) + ":" + k + " " + std::to_string(v.size()) + ":" + v + "\n";
    feed(line);
  }
  return h;
}

std::string format_checksum(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

std::string encode_header(const std::vector<SafetensorsEntry>& entries,
                          const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      first = false;
      append_json_string(json, k);
      json += ':';
      append_json_string(json, v);
    }
    json += '}';
  }
  for (const auto& e : entries) {
    if (json.size() > 1) json += ',';
    append_json_string(json, e.name);
    json += ":{\"dtype\":\"";
    json += safetensors_dtype_name(e.dtype);
    json += "\",\"shape\":" + shape_text(e.shape) + ",\"data_offsets\":[" +
            std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  json += '}';
  while ((8 + json.size()) % 8 != 0) json += ' ';
  if (json.size() > kMaxHeaderBytes)
    throw InvalidArgumentError("safetensors: the header would be " + std::to_string(json.size()) +
                               " bytes, more than the format's limit of " +
                               std::to_string(kMaxHeaderBytes) +
                               "; save fewer tensors or less metadata per file");
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

std::string serialize_safetensors(const std::vector<TensorBytes>& tensors,
                                  std::map<std::string, std::string> metadata) {
  auto entries = plan_layout(tensors);
  metadata[kChecksumAlgorithmKey] = kChecksumAlgorithm;
  Xxh64 h = begin_checksum(entries, metadata);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (entries[i].size()) h.update(tensors[i].data, entries[i].size());
  metadata[kChecksumKey] = format_checksum(h.digest());
  std::string out = encode_header(entries, metadata);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (entries[i].size()) out.append(static_cast<const char*>(tensors[i].data), entries[i].size());
  return out;
}

uint64_t read_header_length(std::string_view first_bytes, uint64_t file_size) {
  if (first_bytes.size() < 8 || file_size < 8)
    throw Error("truncated safetensors file: " + std::to_string(file_size) +
                " bytes, fewer than the 8-byte header length");
  uint64_t n = load_le64(first_bytes.data());
  if (n == 0) throw Error("safetensors header length is 0");
  if (n > kMaxHeaderBytes)
    throw Error("safetensors header length " + std::to_string(n) + " exceeds the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > file_size - 8)
    throw Error("safetensors header length " + std::to_string(n) + " exceeds the " +
                std::to_string(file_size - 8) +
                " bytes that follow it in the file (truncated file?)");
  return n;
}

SafetensorsHeader parse_header(std::string_view prefix, uint64_t file_size) {
  const uint64_t n = read_header_length(prefix, file_size);
  if (prefix.size() < 8 + n)
    throw Error("safetensors header: " + std::to_string(prefix.size()) +
                " bytes given, the header needs " + std::to_string(8 + n));
  std::string_view text = prefix.substr(8, n);
  if (text.empty() || text[0] != '{') throw Error("safetensors header does not start with '{'");
  if (!valid_utf8(text)) throw Error("safetensors header is not valid UTF-8");

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  h.data_size = file_size - h.data_offset;
  JsonReader json(text);
  json.expect('{', "at the start of the header");
  bool have_metadata = false;
  std::set<std::string> names;
  if (!json.empty('}')) {
    do {
      std::string key = json.string("as a tensor name");
      json.expect(':', "after a tensor name");
      if (key == "__metadata__") {
        if (have_metadata) json.fail("duplicate __metadata__");
        have_metadata = true;
        parse_metadata(json, h.metadata);
        continue;
      }
      if (!names.insert(key).second) json.fail("duplicate tensor name '" + key + "'");
      h.tensors.push_back(parse_entry(json, std::move(key)));
    } while (json.next('}', "after a tensor"));
  }
  if (!json.at_end()) json.fail("trailing characters after the header object");

  // Offsets: each tensor spans exactly its byte size, and sorted by begin they tile the data
  // section [0, data_size) without gap or overlap.
  for (const auto& e : h.tensors) {
    auto bytes = byte_size(e.dtype, e.shape);
    if (!bytes)
      throw Error("safetensors tensor '" + e.name + "': shape " + shape_text(e.shape) +
                  " has too many elements");
    if (e.end < e.begin)
      throw Error("safetensors tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) +
                  "," + std::to_string(e.end) + "] end before they begin");
    if (e.end - e.begin != *bytes)
      throw Error("safetensors tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) +
                  "," + std::to_string(e.end) + "] span " + std::to_string(e.end - e.begin) +
                  " bytes, but " + safetensors_dtype_name(e.dtype) + " " + shape_text(e.shape) +
                  " needs " + std::to_string(*bytes));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), data_order);
  uint64_t expected = 0;
  for (const auto& e : h.tensors) {
    if (e.begin != expected)
      throw Error("safetensors tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) +
                  "," + std::to_string(e.end) + "] " +
                  (e.begin < expected ? "overlap the previous tensor" : "leave a gap") +
                  " (expected it to begin at " + std::to_string(expected) + ")");
    expected = e.end;
  }
  if (expected != h.data_size)
    throw Error("safetensors data section is " + std::to_string(h.data_size) +
                " bytes but the tensors cover " + std::to_string(expected) +
                (expected > h.data_size ? " (truncated file?)" : " (trailing bytes)"));
  return h;
}

void verify_checksum(const SafetensorsHeader& header, uint64_t actual_digest) {
  auto alg = header.metadata.find(kChecksumAlgorithmKey);
  if (alg == header.metadata.end() || alg->second != kChecksumAlgorithm)
    throw Error(std::string("safetensors __metadata__ has no ") + kChecksumAlgorithmKey + " '" +
                kChecksumAlgorithm + "'" +
                (alg == header.metadata.end() ? "" : " (found '" + alg->second + "')"));
  auto it = header.metadata.find(kChecksumKey);
  if (it == header.metadata.end()) throw Error("safetensors __metadata__ has no checksum");
  std::string actual = format_checksum(actual_digest);
  if (it->second != actual)
    throw Error("checksum mismatch: the header records " + it->second +
                " but the contents hash to " + actual + " (the file is corrupted or torn)");
}

SafetensorsHeader parse_and_verify(std::string_view file) {
  SafetensorsHeader h = parse_header(file, file.size());
  Xxh64 x = begin_checksum(h.tensors, h.metadata);
  x.update(file.data() + h.data_offset, h.data_size);
  verify_checksum(h, x.digest());
  return h;
}

}  // namespace hvd::training
