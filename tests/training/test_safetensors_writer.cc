// Writes safetensors files for the independent-reader test (test_safetensors_reader.py), which
// computes the same values itself and compares them with what the Python safetensors package reads.
//   test_safetensors_writer OUT_DIR   writes OUT_DIR/all.safetensors (every dtype, BF16 included)
//                                     and OUT_DIR/numpy.safetensors (the dtypes numpy can load)
// The value formulas here and in the Python script must match; element index j is row-major.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "hvd/error.h"
#include "training/safetensors.h"

using hvd::DataType;
using hvd::training::TensorBytes;

namespace {

template <class T, class F>
std::vector<T> fill(std::size_t n, F f) {
  std::vector<T> v(n);
  for (std::size_t j = 0; j < n; ++j) v[j] = f(static_cast<int64_t>(j));
  return v;
}

bool write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto u8 = fill<uint8_t>(15, [](int64_t j) { return static_cast<uint8_t>((7 * j + 3) % 256); });
  auto i8 = fill<int8_t>(17, [](int64_t j) { return static_cast<int8_t>((5 * j) % 256 - 128); });
  auto i32 = fill<int32_t>(24, [](int64_t j) { return static_cast<int32_t>(j * 7919 - 123456); });
  auto i64 = fill<int64_t>(5, [](int64_t j) { return j * 3000000000LL - 7; });
  std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800, 0x7BFF};   // 1, -2, 0.5, 65504
  std::vector<uint16_t> bf16 = {0x3FC0, 0xBF80, 0x0000, 0x4040};  // 1.5, -1, 0, 3
  auto f32 = fill<float>(3 * 5 * 7, [](int64_t j) { return static_cast<float>(j - 50) * 0.25f; });
  auto f64 = fill<double>(6, [](int64_t j) { return static_cast<double>(j) / 3.0; });
  float scalar = 42.5f;
  int64_t one = -1;
  uint8_t weird[2] = {1, 2};

  std::vector<TensorBytes> numpy_ok = {
      {"u8", DataType::kUInt8, {3, 5}, u8.data()},
      {"i8", DataType::kInt8, {17}, i8.data()},
      {"i32", DataType::kInt32, {2, 3, 4}, i32.data()},
      {"i64", DataType::kInt64, {5}, i64.data()},
      {"f16", DataType::kFloat16, {4}, f16.data()},
      {"f32", DataType::kFloat32, {3, 5, 7}, f32.data()},
      {"f64", DataType::kFloat64, {6}, f64.data()},
      {"scalar", DataType::kFloat32, {}, &scalar},
      {"empty", DataType::kFloat32, {0, 3}, nullptr},
      {"one", DataType::kInt64, {1}, &one},
      {"weird \xc3\xbc \"q\" \\ name/\xc3\xa9", DataType::kUInt8, {2}, weird},
  };
  const std::map<std::string, std::string> metadata = {
      {"note", "quote \" backslash \\ newline \n tab \t \xc3\xa9 \xe2\x82\xac"},
      {"ctrl", "\x01\x1f"},
      {"step", "12"}};
  std::vector<TensorBytes> all = numpy_ok;
  all.push_back({"bf16", DataType::kBFloat16, {2, 2}, bf16.data()});
  try {
    if (!write(dir + "/numpy.safetensors",
               hvd::training::serialize_safetensors(numpy_ok, metadata)) ||
        !write(dir + "/all.safetensors", hvd::training::serialize_safetensors(all, metadata))) {
      std::fprintf(stderr, "cannot write into %s\n", dir.c_str());
      return 1;
    }
  } catch (const hvd::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
