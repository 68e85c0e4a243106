// The safetensors format (training/safetensors.cc), in memory: round trips, the checksum,
// and a malformed file of every kind we know of being an hvd::Error, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hvd/error.h"
#include "training/safetensors.h"

namespace hvd::training {
namespace {

// A file from a header text and a data section, with the length prefix written by hand.
std::string make_file(const std::string& json, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Expects f() to throw hvd::Error whose message contains `needle`.
template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

void expect_parse_error(const std::string& file, const std::string& needle) {
  expect_error([&] { parse_and_verify(file); }, needle);
}

TEST(Xxh64, MatchesReferenceVectors) {
  // Reference values from the xxhash library (XXH64, seed 0 unless given).
  auto hash = [](const std::string& s, uint64_t seed = 0) {
    Xxh64 h(seed);
    h.update(s.data(), s.size());
    return h.digest();
  };
  EXPECT_EQ(hash(""), 0xef46db3751d8e999ULL);
  EXPECT_EQ(hash("a"), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(hash("abc"), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(hash("0123456789abcdef0123456789abcdef0123"), 0xc4255ba3d1af5461ULL);
  EXPECT_EQ(hash("abc", 1), 0xbea9ca8199328908ULL);
  std::string big;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) big += static_cast<char>(i);
  big += "xyz";
  EXPECT_EQ(hash(big), 0xe921a1b45bd779f8ULL);
}

TEST(Xxh64, StreamingInAnyChunksEqualsOneShot) {
  std::string s(1000, '\0');
  std::mt19937 rng(7);
  for (auto& c : s) c = static_cast<char>(rng());
  Xxh64 whole;
  whole.update(s.data(), s.size());
  for (std::size_t chunk : {1, 3, 7, 31, 32, 33, 64, 999}) {
    Xxh64 h;
    for (std::size_t p = 0; p < s.size(); p += chunk)
      h.update(s.data() + p, std::min(chunk, s.size() - p));
    EXPECT_EQ(h.digest(), whole.digest()) << "chunk " << chunk;
  }
}

TEST(Dtypes, NamesAndSizesRoundTrip) {
  const std::pair<DataType, const char*> all[] = {
      {DataType::kUInt8, "U8"},    {DataType::kInt8, "I8"},     {DataType::kInt32, "I32"},
      {DataType::kInt64, "I64"},   {DataType::kFloat16, "F16"}, {DataType::kBFloat16, "BF16"},
      {DataType::kFloat32, "F32"}, {DataType::kFloat64, "F64"}};
  const std::size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_STREQ(safetensors_dtype_name(all[i].first), all[i].second);
    EXPECT_EQ(parse_safetensors_dtype(all[i].second), all[i].first);
    EXPECT_EQ(element_bytes(all[i].first), sizes[i]);
  }
  for (const char* bad : {"f32", "BOOL", "F8_E4M3", "U16", "", "F32 "})
    EXPECT_FALSE(parse_safetensors_dtype(bad));
}

TEST(RoundTrip, EveryDtypeKeepsNameShapeAndBytes) {
  std::vector<uint8_t> u8 = {0, 1, 255};
  std::vector<int8_t> i8 = {-128, 0, 127, 5, -3};
  std::vector<int32_t> i32 = {INT32_MIN, -1, 0, 1, INT32_MAX, 7};
  std::vector<int64_t> i64 = {INT64_MIN, INT64_MAX};
  std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF};  // 1, -2, 65504
  std::vector<uint16_t> bf16 = {0x3FC0, 0xBF80};         // 1.5, -1
  std::vector<float> f32 = {0.5f, -0.0f, 3.25f, 1e-30f, 7.f, 8.f, 9.f};
  std::vector<double> f64 = {1.0 / 3.0, -2.5};
  std::vector<TensorBytes> in = {
      {"u8", DataType::kUInt8, {3}, u8.data()},
      {"i8", DataType::kInt8, {5, 1}, i8.data()},
      {"i32", DataType::kInt32, {2, 3}, i32.data()},
      {"i64", DataType::kInt64, {2}, i64.data()},
      {"f16", DataType::kFloat16, {3}, f16.data()},
      {"bf16", DataType::kBFloat16, {1, 2}, bf16.data()},
      {"f32", DataType::kFloat32, {7}, f32.data()},
      {"f64", DataType::kFloat64, {2}, f64.data()},
  };
  const std::string file = serialize_safetensors(in, {{"step", "5"}, {"who", "test"}});
  const SafetensorsHeader h = parse_and_verify(file);
  ASSERT_EQ(h.tensors.size(), in.size());
  EXPECT_EQ(h.metadata.at("step"), "5");
  EXPECT_EQ(h.metadata.at("who"), "test");
  EXPECT_EQ(h.metadata.at(kChecksumAlgorithmKey), kChecksumAlgorithm);
  EXPECT_EQ(h.metadata.at(kChecksumKey).size(), 16u);
  EXPECT_EQ(h.data_offset % 8, 0u);
  EXPECT_EQ(h.data_offset + h.data_size, file.size());
  const std::string expected_data = bytes_of(u8) + bytes_of(i8) + bytes_of(i32) + bytes_of(i64) +
                                    bytes_of(f16) + bytes_of(bf16) + bytes_of(f32) + bytes_of(f64);
  EXPECT_EQ(file.substr(h.data_offset), expected_data);
  for (const auto& t : in) {
    const SafetensorsEntry* e = h.find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->dtype, t.dtype) << t.name;
    EXPECT_EQ(e->shape, t.shape) << t.name;
    std::size_t bytes = element_bytes(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<std::size_t>(d);
    ASSERT_EQ(e->size(), bytes) << t.name;
    EXPECT_EQ(std::memcmp(file.data() + h.data_offset + e->begin, t.data, bytes), 0) << t.name;
  }
}

TEST(RoundTrip, HeaderIsSpacePaddedToEightBytesAndStartsWithBrace) {
  for (int name_len = 1; name_len <= 9; ++name_len) {
    float x = 1.f;
    const std::string file =
        serialize_safetensors({{std::string(name_len, 'n'), DataType::kFloat32, {}, &x}}, {});
    uint64_t n;
    std::memcpy(&n, file.data(), 8);
    EXPECT_EQ((8 + n) % 8, 0u);
    EXPECT_EQ(file[8], '{');
    std::string json = file.substr(8, n);
    EXPECT_EQ(json.find_last_not_of(' '), json.rfind('}'));
    EXPECT_NO_THROW(parse_and_verify(file));
  }
}

TEST(RoundTrip, ZeroElementScalarAndEmptyTensorLists) {
  float scalar = 2.5f;
  std::vector<TensorBytes> in = {{"empty_a", DataType::kFloat32, {0, 3}, nullptr},
                                 {"scalar", DataType::kFloat32, {}, &scalar},
                                 {"empty_b", DataType::kInt64, {4, 0}, nullptr},
                                 {"empty_c", DataType::kUInt8, {0}, nullptr}};
  const SafetensorsHeader h = parse_and_verify(serialize_safetensors(in, {}));
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.find("empty_a")->size(), 0u);
  EXPECT_EQ(h.find("empty_b")->shape, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(h.find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(h.find("scalar")->size(), 4u);
  EXPECT_EQ(h.data_size, 4u);

  const SafetensorsHeader none = parse_and_verify(serialize_safetensors({}, {}));
  EXPECT_TRUE(none.tensors.empty());
  EXPECT_EQ(none.data_size, 0u);
}

TEST(RoundTrip, NamesAndMetadataWithEscapesAndUnicode) {
  const std::string name = "w\"e\\i/r\td \xc3\xa9\xe2\x82\xac\x01";
  const std::map<std::string, std::string> md = {
      {"note", "quote \" backslash \\ newline \n tab \t \xe2\x82\xac"},
      {"ctrl", "\x01\x1f"},
      {"", "empty key"}};
  uint8_t b = 9;
  const SafetensorsHeader h =
      parse_and_verify(serialize_safetensors({{name, DataType::kUInt8, {1}, &b}}, md));
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, name);
  for (const auto& [k, v] : md) EXPECT_EQ(h.metadata.at(k), v) << k;
}

TEST(Parse, AcceptsHandWrittenFilesOfOtherWritersAndUnicodeEscapes) {
  // Key order, whitespace and \u escapes as another writer might produce them.
  const std::string file = make_file(
      " {\n  \"b\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ], "
      "\"dtype\":\"U8\" },"
      "\"__metadata__\":{\"format\":\"pt\"} }   ",
      "\x01\x02");
  expect_error([&] { parse_header(file, file.size()); }, "does not start with '{'");
  const std::string ok = make_file(
      "{\n  \"b\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ], "
      "\"dtype\":\"U8\" },"
      "\"__metadata__\":{\"format\":\"pt\"} }   ",
      "\x01\x02");
  const SafetensorsHeader h = parse_header(ok, ok.size());
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, "b\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(h.metadata.at("format"), "pt");
  // Readable, but without our checksum it does not verify.
  expect_error([&] { parse_and_verify(ok); }, "checksum_algorithm");
  EXPECT_NO_THROW(parse_header(make_file("{}"), 8 + 2));
}

// A valid single-tensor file to corrupt.
std::string valid_file() {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {-1, 7};
  return serialize_safetensors(
      {{"a", DataType::kFloat32, {2, 3}, a.data()}, {"b", DataType::kInt64, {2}, b.data()}},
      {{"step", "3"}});
}

TEST(Corrupt, FlippedDataByteFailsTheChecksum) {
  const std::string good = valid_file();
  const SafetensorsHeader h = parse_and_verify(good);
  for (uint64_t i = h.data_offset; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    expect_parse_error(bad, "checksum mismatch");
  }
}

TEST(Corrupt, ChangedMetadataOrShapeFailsTheChecksum) {
  // Edits that keep the header well-formed are caught by the checksum over the tensor table and
  // metadata, not only over the data.
  std::string good = valid_file();
  std::string bad = good;
  bad.replace(bad.find("\"step\":\"3\""), 10, "\"step\":\"4\"");
  expect_parse_error(bad, "checksum mismatch");
  bad = good;
  bad.replace(bad.find("[2,3]"), 5, "[3,2]");
  expect_parse_error(bad, "checksum mismatch");
}

TEST(Corrupt, EveryTruncationIsAnError) {
  const std::string good = valid_file();
  for (std::size_t len = 0; len < good.size(); ++len) {
    EXPECT_THROW(parse_and_verify(good.substr(0, len)), Error) << "length " << len;
  }
  expect_parse_error(good.substr(0, 5), "fewer than the 8-byte header length");
  expect_parse_error(good.substr(0, 20), "exceeds the");
  expect_parse_error(good.substr(0, good.size() - 1), "truncated file");
}

TEST(Corrupt, HugeOrZeroHeaderLengthIsRejectedBeforeAllocating) {
  const std::string good = valid_file();
  for (uint64_t n :
       {uint64_t{0}, kMaxHeaderBytes + 1, uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1} << 63}) {
    std::string bad = good;
    std::memcpy(bad.data(), &n, 8);
    EXPECT_THROW(parse_and_verify(bad), Error) << n;
  }
  std::string bad = good;
  uint64_t n = kMaxHeaderBytes + 1;
  std::memcpy(bad.data(), &n, 8);
  expect_parse_error(bad, "exceeds the limit of 100000000");
  n = good.size();  // one past what follows the length
  std::memcpy(bad.data(), &n, 8);
  expect_parse_error(bad, "exceeds the");
  n = 0;
  std::memcpy(bad.data(), &n, 8);
  expect_parse_error(bad, "header length is 0");
}

TEST(Corrupt, BadJsonIsAnErrorNamingTheProblem) {
  const std::string t = "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  const std::pair<std::string, std::string> cases[] = {
      {"{" + t + ",}", "expected a string as a tensor name"},
      {"{" + t, "expected ',' or '}'"},
      {"{\"a\" {}}", "expected ':'"},
      {"{\"a\":{\"dtype\":\"U8}}", "unterminated string"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", "fraction or exponent"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1e0],\"data_offsets\":[0,1]}}", "fraction or exponent"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", "leading zero"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,1]}}",
       "expected a non-negative integer"},
      {"{\"a\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,1]}}", "expected a string"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}",
       "unknown key 'extra'"},
      {"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
       "duplicate key 'dtype'"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", "lacks data_offsets"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", "lacks dtype"},
      {"{\"a\":{}}", "lacks dtype"},
      {"{" + t + "," + t + "}", "duplicate tensor name 'a'"},
      {"{\"a\\q\":{}}", "invalid escape"},
      {"{\"a\\ud800\":{}}", "high surrogate"},
      {"{\"a\\udc00\":{}}", "lone low surrogate"},
      {"{\"a\\u12\":{}}", "invalid hex digit"},
      {"{\"a\tb\":{}}", "raw control character"},
      {"{\"a\xff\":{}}", "not valid UTF-8"},
      {"{\"a\xc0\x80\":{}}", "not valid UTF-8"},
      {"{" + t + "} x", "trailing characters"},
      {"{" + t + "}}", "trailing characters"},
      {"[" + t + "]", "does not start with '{'"},
      {"{\"__metadata__\":{\"k\":1}," + t + "}", "values are strings"},
      {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}," + t + "}", "duplicate __metadata__ key"},
      {"{\"__metadata__\":{},\"__metadata__\":{}," + t + "}", "duplicate __metadata__"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "expected ']'"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", "expected ','"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,],\"data_offsets\":[0,1]}}",
       "expected a non-negative integer"},
      {"{\"a\":[]}", "expected '{' to open tensor 'a'"},
  };
  for (const auto& [json, needle] : cases) {
    SCOPED_TRACE(json);
    expect_parse_error(make_file(json, "x"), needle);
  }
}

TEST(Corrupt, UnknownDtypeIsAnError) {
  for (const char* d : {"F8_E4M3", "BOOL", "f32", "U16", ""}) {
    std::string json =
        std::string("{\"a\":{\"dtype\":\"") + d + "\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    expect_parse_error(make_file(json, "x"), "unknown dtype");
  }
}

TEST(Corrupt, NegativeOrHugeShapeIsAnError) {
  auto file = [](const std::string& shape, const std::string& offsets) {
    return make_file(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}",
        "abcd");
  };
  expect_parse_error(file("[-1]", "[0,4]"), "negative number");
  expect_parse_error(file("[9223372036854775808]", "[0,4]"), "too large");
  expect_parse_error(file("[99999999999999999999]", "[0,4]"), "number too large");
  expect_parse_error(file("[4294967296,4294967296,16]", "[0,4]"), "too many elements");
  expect_parse_error(file("[4611686018427387904]", "[0,4]"),
                     "too many elements");  // x4 bytes overflows
  expect_parse_error(file("[2]", "[0,4]"), "span 4 bytes, but F32 [2] needs 8");
}

TEST(Corrupt, BadOffsetsAreAnError) {
  auto two = [](const std::string& a_off, const std::string& b_off, const std::string& data) {
    return make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":" + a_off +
                         "},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":" + b_off + "}}",
                     data);
  };
  const std::string ok = two("[0,2]", "[2,4]", "abcd");
  EXPECT_EQ(parse_header(ok, ok.size()).tensors.size(), 2u);
  expect_error(
      [&] {
        auto f = two("[0,2]", "[1,3]", "abc");
        parse_header(f, f.size());
      },
      "overlap");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[3,5]", "abcde");
        parse_header(f, f.size());
      },
      "gap");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[2,4]", "abc");
        parse_header(f, f.size());
      },
      "truncated file");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[2,4]", "abcdef");
        parse_header(f, f.size());
      },
      "trailing bytes");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[4,2]", "abcd");
        parse_header(f, f.size());
      },
      "end before they begin");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[2,5]", "abcde");
        parse_header(f, f.size());
      },
      "needs 2");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[18446744073709551614,0]", "abcd");
        parse_header(f, f.size());
      },
      "end before they begin");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[18446744073709551615,1]", "abcd");
        parse_header(f, f.size());
      },
      "end before they begin");
  expect_error(
      [&] {
        auto f = two("[0,2]", "[0,2]", "abcd");
        parse_header(f, f.size());
      },
      "overlap");
}

TEST(Writer, RejectsBadTensors) {
  float x = 0;
  auto fails = [](const std::vector<TensorBytes>& in, const std::string& needle) {
    try {
      plan_layout(in);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails({{"", DataType::kFloat32, {}, &x}}, "empty name");
  fails({{"a", DataType::kFloat32, {}, &x}, {"a", DataType::kFloat32, {}, &x}}, "appears twice");
  fails({{"a", DataType::kFloat32, {-1}, &x}}, "negative dimension");
  fails({{"a", DataType::kFloat32, {1}, nullptr}}, "null data pointer");
  fails({{"__metadata__", DataType::kFloat32, {}, &x}}, "reserved");
}

// Random damage to a valid file: every outcome is a successful parse or an hvd::Error. Run under
// HVD_SANITIZE=address,undefined this also proves no out-of-bounds access.
TEST(Fuzz, RandomByteFlipsParseOrThrowNeverCrash) {
  std::vector<float> a(37);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  std::vector<int32_t> b = {1, 2, 3};
  uint16_t h16 = 0x3C00;
  const std::string good =
      serialize_safetensors({{"layer.weight", DataType::kFloat32, {37}, a.data()},
                             {"b", DataType::kInt32, {3, 1}, b.data()},
                             {"z", DataType::kFloat64, {0}, nullptr},
                             {"h", DataType::kBFloat16, {}, &h16}},
                            {{"step", "12"}, {"note", "x\"y"}});
  ASSERT_NO_THROW(parse_and_verify(good));
  std::mt19937_64 rng(12345);
  int parsed = 0, header_ok = 0, errors = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Aim most damage at the length prefix and header, where the parser works hardest.
      std::size_t limit =
          (rng() % 4 == 0) ? bad.size() : std::min<std::size_t>(bad.size(), 8 + 200);
      std::size_t pos = rng() % limit;
      switch (rng() % 3) {
        case 0:
          bad[pos] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:
          bad[pos] = static_cast<char>(rng());
          break;
        default:
          bad[pos] = "{}[]\",:\\0-9 "[rng() % 13];
          break;
      }
    }
    if (rng() % 8 == 0) bad.resize(rng() % (bad.size() + 1));
    try {
      parse_header(bad, bad.size());
      ++header_ok;
    } catch (const Error&) {}
    try {
      parse_and_verify(bad);
      ++parsed;
    } catch (const Error&) {
      ++errors;
    }
  }
  // Damage is nearly always detected (a flip that restores the original byte is the exception).
  EXPECT_GT(errors, 19000);
  EXPECT_LE(parsed, header_ok);
}

}  // namespace
}  // namespace hvd::training
