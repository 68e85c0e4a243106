// Compares two --dump-weights files of train_cnn (raw little-endian float32).
//
//   test_train_cnn_compare A B TOLERANCE     every |a_i - b_i| <= TOLERANCE (absolute)
//   test_train_cnn_compare A B bitwise       the files are byte for byte equal
//
// Prints the element count and the largest difference; exit status 0 when they match, 1 when
// they differ (the first differing elements are listed), 2 for a usage or file error (missing,
// empty, a size that is not a whole number of floats, or sizes that differ).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

bool read_floats(const char* path, std::vector<float>& out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path);
    return false;
  }
  const std::streamsize bytes = in.tellg();
  if (bytes <= 0 || bytes % static_cast<std::streamsize>(sizeof(float)) != 0) {
    std::fprintf(stderr, "%s has %lld bytes: not a non-empty float32 array\n", path,
                 static_cast<long long>(bytes));
    return false;
  }
  out.resize(static_cast<size_t>(bytes) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), bytes);
  return static_cast<bool>(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s A B TOLERANCE|bitwise\n", argv[0]);
    return 2;
  }
  std::vector<float> a, b;
  if (!read_floats(argv[1], a) || !read_floats(argv[2], b)) return 2;
  if (a.size() != b.size()) {
    std::fprintf(stderr, "FAIL: %zu floats in %s, %zu in %s\n", a.size(), argv[1], b.size(),
                 argv[2]);
    return 2;
  }
  const bool bitwise = std::strcmp(argv[3], "bitwise") == 0;
  const double tolerance = bitwise ? 0.0 : std::atof(argv[3]);
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    const bool differs =
        bitwise ? std::memcmp(&a[i], &b[i], sizeof(float)) != 0 : !(d <= tolerance);  // NaN differs
    if (d > worst || std::isnan(d)) worst = std::isnan(d) ? INFINITY : d;
    if (differs && bad++ < 5)
      std::printf("element %zu differs: %.9g vs %.9g\n", i, static_cast<double>(a[i]),
                  static_cast<double>(b[i]));
  }
  std::printf("%zu floats, largest difference %.3g (%s)\n", a.size(), worst,
              bitwise ? "bitwise" : (std::string("tolerance ") + argv[3]).c_str());
  if (bad) {
    std::printf("FAIL: %zu elements differ\n", bad);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
