#include "training/safetensors.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t's definition, held inside Xxh64
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "common/dtype.h"
#include "common/json_string.h"
#include "hvd/error.h"

namespace hvd::training {

static_assert(std::endian::native == std::endian::little,
              "hvd checkpoints copy tensor bytes as they are: a little-endian host is required");

namespace {

const dtypes::Info& info(DataType dtype) {
  if (const dtypes::Info* i = dtypes::find(dtype)) return *i;
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

// ---- JSON ---------------------------------------------------------------------------------------

// Writing: common/json_string.h (hvd's own escaping, not nlohmann's dump, so that the header
// bytes stay what they have always been).

// Reading: nlohmann's SAX parser (strict RFC 8259: escapes, surrogate pairs, UTF-8 validated in
// strings, nothing after the value but whitespace) drives HeaderReader, a state machine for
// exactly the schema of a safetensors header. It rejects any other value where it happens, so
// nesting never goes deeper than the schema and memory stays proportional to the header; no DOM
// is built. The parser's errors are turned into messages in the schema's terms ("expected a string
// as a tensor name, found '}'").

// An iterator over the header text that records how far the parser has read it, so that errors
// found in a SAX callback can say where (nlohmann tells the position of syntax errors only).
class TrackedIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedIterator() = default;
  TrackedIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const { return *p_; }
  TrackedIterator& operator++() {
    if (++p_ > *furthest_) *furthest_ = p_;
    return *this;
  }
  TrackedIterator operator++(int) {
    TrackedIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackedIterator& other) const { return p_ == other.p_; }

 private:
  const char* p_ = nullptr;
  const char** furthest_ = nullptr;
};

using Json = nlohmann::json;

class HeaderReader final : public nlohmann::json_sax<Json> {
 public:
  HeaderReader(std::string_view text, SafetensorsHeader& out)
      : text_(text), read_(text.data()), out_(out) {}

  void parse() {
    TrackedIterator begin(text_.data(), &read_), end(text_.data() + text_.size(), &read_);
    Json::sax_parse(begin, end, this, nlohmann::json::input_format_t::json, /*strict=*/true,
                    /*ignore_comments=*/false);
    if (state_ != kDone) fail(read_offset(), "incomplete header");  // not reached
  }

  // ---- values ----
  bool null() override { unexpected("'null'"); }
  bool boolean(bool v) override { unexpected(v ? "'true'" : "'false'"); }
  bool binary(binary_t&) override { unexpected("binary data"); }
  bool number_integer(number_integer_t v) override {
    // nlohmann reports only numbers written with a '-' here.
    if (wants_number()) fail(read_offset(), "negative number " + ctx());
    unexpected("'" + std::to_string(v) + "'");
  }
  bool number_float(number_float_t, const string_t& text) override {
    if (!wants_number()) unexpected("'" + text + "'");
    if (!text.empty() && text[0] == '-') fail(read_offset(), "negative number " + ctx());
    if (text.find_first_of(".eE") != string_t::npos)
      fail(read_offset(), "expected an integer " + ctx() + ", found a fraction or exponent");
    fail(read_offset(), "number too large " + ctx());  // an integer beyond uint64_t
  }
  bool number_unsigned(number_unsigned_t v) override {
    switch (state_) {
      case kShape:
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail(read_offset(), "dimension " + std::to_string(v) + " too large " + in_tensor());
        tensor().shape.push_back(static_cast<int64_t>(v));
        return true;
      case kBegin:
        tensor().begin = v;
        state_ = kEnd;
        return true;
      case kEnd:
        tensor().end = v;
        state_ = kOffsetsClose;
        return true;
      default:
        unexpected("'" + std::to_string(v) + "'");
    }
  }
  bool string(string_t& s) override {
    if (state_ == kMetaValue) {
      if (!out_.metadata.emplace(std::move(meta_key_), std::move(s)).second)
        fail(read_offset(), "duplicate __metadata__ key");
      state_ = kMeta;
      return true;
    }
    if (state_ != kDtype) unexpected("a string");
    auto dtype = parse_safetensors_dtype(s);
    if (!dtype) {
      std::string known;
      for (const auto& info : dtypes::kTable)
        known += std::string(known.empty() ? "" : ", ") + info.safetensors;
      fail(read_offset(),
           "unknown dtype '" + s + "' " + in_tensor() + " (hvd reads " + known + ")");
    }
    tensor().dtype = *dtype;
    state_ = kTensor;
    return true;
  }

  // ---- containers ----
  bool start_object(std::size_t) override {
    switch (state_) {
      case kStart:
        state_ = kTop;
        return true;
      case kMetaOpen:
        state_ = kMeta;
        return true;
      case kTensorOpen:
        state_ = kTensor;
        return true;
      default:
        unexpected("'{'");
    }
  }
  bool key(string_t& k) override {
    switch (state_) {
      case kTop:
        if (k == "__metadata__") {
          if (have_metadata_) fail(read_offset(), "duplicate __metadata__");
          have_metadata_ = true;
          state_ = kMetaOpen;
          return true;
        }
        if (!names_.insert(k).second) fail(read_offset(), "duplicate tensor name '" + k + "'");
        out_.tensors.emplace_back().name = std::move(k);
        have_dtype_ = have_shape_ = have_offsets_ = false;
        state_ = kTensorOpen;
        return true;
      case kMeta:
        meta_key_ = std::move(k);
        state_ = kMetaValue;
        return true;
      default:  // kTensor: the grammar allows keys in objects only
        break;
    }
    bool* seen = k == "dtype"          ? &have_dtype_
                 : k == "shape"        ? &have_shape_
                 : k == "data_offsets" ? &have_offsets_
                                       : nullptr;
    if (!seen)
      fail(read_offset(),
           "unknown key '" + k + "' " + in_tensor() + " (expected dtype, shape, data_offsets)");
    if (*seen) fail(read_offset(), "duplicate key '" + k + "' " + in_tensor());
    *seen = true;
    state_ = seen == &have_dtype_ ? kDtype : seen == &have_shape_ ? kShapeOpen : kOffsetsOpen;
    return true;
  }
  bool end_object() override {
    switch (state_) {
      case kTop:
        state_ = kDone;
        return true;
      case kMeta:
        state_ = kTop;
        return true;
      default:  // kTensor
        if (!have_dtype_ || !have_shape_ || !have_offsets_)
          fail(read_offset(), "tensor '" + tensor().name + "' lacks " +
                                  (!have_dtype_   ? "dtype"
                                   : !have_shape_ ? "shape"
                                                  : "data_offsets"));
        state_ = kTop;
        return true;
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == kShapeOpen) {
      state_ = kShape;
    } else if (state_ == kOffsetsOpen) {
      state_ = kBegin;
    } else {
      unexpected("'['");
    }
    return true;
  }
  bool end_array() override {
    if (state_ == kShape || state_ == kOffsetsClose) {
      state_ = kTensor;
      return true;
    }
    if (state_ == kEnd)
      fail(read_offset(),
           "expected ',' between the two data_offsets " + in_tensor() + ", found ']'");
    unexpected("']'");
  }

  // ---- syntax errors ----
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) override {
    const std::size_t at = position > 0 ? position - 1 : 0;
    if (state_ == kDone) fail(at, "trailing characters after the header object");
    // ex.what(): "... syntax error while parsing <context> - <detail>[; expected <token>]", where
    // detail is "unexpected <token>" or the lexer's complaint "<problem>; last read: '<text>'".
    const std::string what = ex.what();
    const std::size_t c = what.find("while parsing ");
    const std::size_t d = what.find(" - ", c);
    const std::string context =
        c == std::string::npos || d == std::string::npos ? "" : what.substr(c + 14, d - c - 14);
    const std::string detail = d == std::string::npos ? what : what.substr(d + 3);
    auto has = [&](const char* s) { return detail.rfind(s, 0) == 0; };

    static constexpr const char* kStringErrors[][2] = {
        {"invalid string: missing closing quote", "unterminated string"},
        {"invalid string: '\\u' must be followed by 4 hex digits",
         "invalid hex digit in a \\u escape (4 are needed)"},
        {"invalid string: surrogate U+D800..U+DBFF",
         "high surrogate not followed by a low surrogate"},
        {"invalid string: surrogate U+DC00..U+DFFF", "lone low surrogate in a \\u escape"},
    };
    for (const auto& [prefix, message] : kStringErrors)
      if (has(prefix)) fail(at, std::string(message) + " " + ctx());
    if (has("invalid string: forbidden character after backslash"))
      fail(at, "invalid escape \\" + found_at(position, detail) + " " + ctx());
    if (has("invalid string: control character")) {
      const std::size_t u = detail.find("U+");
      fail(at, "raw control character in a string " + ctx() + " (" +
                   (u == std::string::npos ? "escape it" : detail.substr(u, 6)) + ")");
    }
    if (has("invalid string: ill-formed UTF-8"))
      throw Error("safetensors header is not valid UTF-8 (at byte " + std::to_string(at) +
                  " of the JSON, " + ctx() + ")");
    if (has("invalid number") && wants_number()) {
      if (!last_token.empty() && last_token[0] == '-') fail(at, "negative number " + ctx());
      fail(at, "expected an integer " + ctx() + ", found a fraction or exponent");
    }
    // A number right after a '0' that began a number: "01" is lexed as 0 then 1. (The lexer
    // restarts last_token at each number, string and literal; structural characters accumulate.)
    const std::size_t token_start =
        position >= last_token.size() ? position - last_token.size() : 0;
    if (has("unexpected number literal") && !last_token.empty() && last_token[0] != '-' &&
        token_start > 0 && text_[token_start - 1] == '0')
      fail(token_start - 1, "number with a leading zero " + ctx());

    std::string expected;
    if (context == "object key") {
      expected = "a string " + ctx();
    } else if (context == "object separator") {
      expected = std::string("':' ") + (state_ == kTensorOpen || state_ == kMetaOpen
                                            ? "after a tensor name"
                                        : state_ == kMetaValue ? "after a __metadata__ key"
                                                               : "after a key " + in_tensor());
    } else if (context == "object") {
      expected = std::string("',' or '}' ") + (state_ == kTop    ? "after a tensor"
                                               : state_ == kMeta ? "in __metadata__"
                                                                 : in_tensor());
    } else if (context == "array") {
      expected = state_ == kShape ? "',' or ']' in the shape " + in_tensor()
                 : state_ == kEnd ? "',' between the two data_offsets " + in_tensor()
                                  : "']' after the two data_offsets " + in_tensor();
    } else {
      expected = wanted() + " " + ctx();
    }
    fail(at, "expected " + expected + ", found " + found_at(position, detail));
  }

 private:
  enum State {
    kStart,         // before the header object
    kTop,           // in the header object: a tensor name, __metadata__ or its end
    kMetaOpen,      // after "__metadata__":
    kMeta,          // in __metadata__: a key or its end
    kMetaValue,     // after a __metadata__ key
    kTensorOpen,    // after a tensor name
    kTensor,        // in a tensor: dtype, shape, data_offsets or its end
    kDtype,         // after "dtype":
    kShapeOpen,     // after "shape":
    kShape,         // in the shape
    kOffsetsOpen,   // after "data_offsets":
    kBegin,         // after "data_offsets":[
    kEnd,           // after the begin offset
    kOffsetsClose,  // after the end offset
    kDone,          // after the header object
  };

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw Error("malformed safetensors header at byte " + std::to_string(at) +
                " of the JSON: " + what);
  }
  // A value the schema does not allow here.
  [[noreturn]] void unexpected(const std::string& found) const {
    fail(read_offset(), "expected " + wanted() + " " + ctx() + ", found " + found);
  }
  std::size_t read_offset() const {
    const auto n = static_cast<std::size_t>(read_ - text_.data());
    return n > 0 ? n - 1 : 0;
  }
  SafetensorsEntry& tensor() { return out_.tensors.back(); }
  std::string in_tensor() const { return "in tensor '" + out_.tensors.back().name + "'"; }
  bool wants_number() const { return state_ == kShape || state_ == kBegin || state_ == kEnd; }
  // Per state: what the schema wants at a value there, and where that is ('%' stands for "in
  // tensor '<name>'", '#' for the tensor's name, '@' for the __metadata__ key).
  struct StateText {
    const char* wanted;
    const char* where;
  };
  static constexpr StateText kText[] = {
      {"'{'", "at the start of the header"},
      {"a string", "as a tensor name"},
      {"'{'", "to open __metadata__"},
      {"a string", "as a __metadata__ key"},
      {"a string", "as the value of __metadata__ '@' (values are strings)"},
      {"'{'", "to open tensor '#'"},
      {"a string", "%"},
      {"a string", "as the dtype %"},
      {"'['", "to open the shape %"},
      {"a non-negative integer", "as a dimension %"},
      {"'['", "to open data_offsets %"},
      {"a non-negative integer", "as the begin offset %"},
      {"a non-negative integer", "as the end offset %"},
      {"']'", "after the two data_offsets %"},
      {"nothing", "after the header object"},
  };
  static_assert(std::size(kText) == kDone + 1);
  std::string wanted() const { return kText[state_].wanted; }
  std::string ctx() const {
    std::string out;
    for (const char* p = kText[state_].where; *p; ++p) {
      if (*p == '%')
        out += in_tensor();
      else if (*p == '#')
        out += out_.tensors.back().name;
      else if (*p == '@')
        out += meta_key_;
      else
        out += *p;
    }
    return out;
  }
  // What the parser stopped at: the byte before `position` (the character that ended the token
  // in error), as the messages show it.
  std::string found_at(std::size_t position, const std::string& detail) const {
    if (position == 0 || position > text_.size() ||
        detail.find("end of input") != std::string::npos)
      return "the end of the header";
    const auto c = static_cast<unsigned char>(text_[position - 1]);
    if (c == '"') return "a string";
    if (c < 0x20 || c >= 0x7F) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
      return buf;
    }
    return std::string("'") + static_cast<char>(c) + "'";
  }

  std::string_view text_;
  const char* read_;  // how far the parser has read text_
  SafetensorsHeader& out_;
  State state_ = kStart;
  std::set<std::string> names_;
  std::string meta_key_;
  bool have_metadata_ = false, have_dtype_ = false, have_shape_ = false, have_offsets_ = false;
};

}  // namespace

// ---- dtypes -------------------------------------------------------------------------------------

const char* safetensors_dtype_name(DataType dtype) { return info(dtype).safetensors; }

std::optional<DataType> parse_safetensors_dtype(std::string_view name) {
  return dtypes::from_safetensors(name);
}

std::size_t element_bytes(DataType dtype) { return info(dtype).size; }

// ---- XXH64 --------------------------------------------------------------------------------------

namespace {
XXH64_state_t* xxh_state(unsigned char* bytes) {
  return std::launder(reinterpret_cast<XXH64_state_t*>(bytes));
}
const XXH64_state_t* xxh_state(const unsigned char* bytes) {
  return std::launder(reinterpret_cast<const XXH64_state_t*>(bytes));
}
}  // namespace

Xxh64::Xxh64(uint64_t seed) {
  static_assert(sizeof(XXH64_state_t) == sizeof(state_) && alignof(XXH64_state_t) <= 8,
                "Xxh64::state_ must hold an XXH64_state_t (training/safetensors.h)");
  static_assert(std::is_trivially_copyable_v<XXH64_state_t>);
  XXH64_reset(new (state_) XXH64_state_t, seed);
}

void Xxh64::update(const void* data, std::size_t size) {
  if (size) XXH64_update(xxh_state(state_), data, size);
}

uint64_t Xxh64::digest() const { return XXH64_digest(xxh_state(state_)); }

// ---- header -------------------------------------------------------------------------------------

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

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  h.data_size = file_size - h.data_offset;
  HeaderReader(text, h).parse();

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
