// The Fashion-MNIST IDX reader on files this test writes (plain and gzip, good and broken), the
// epoch permutation and batch gather, the synthetic generator, and (when the Debian package
// dataset-fashion-mnist is installed) the real files.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/idx_reader.h"
#include "data/synthetic.h"
#include "hvd/error.h"

namespace td = train_cnn::data;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("hvd_cnn_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string dir() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::vector<uint8_t> idx_bytes(uint8_t ndims, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, ndims};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Three 2x3 images with pixels 0, 10, 20, ..., 170 and labels 7, 0, 9.
const std::vector<uint8_t> kPixels = [] {
  std::vector<uint8_t> p(18);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(10 * i);
  return p;
}();
const std::vector<uint8_t> kImages = idx_bytes(3, {3, 2, 3}, kPixels);
const std::vector<uint8_t> kLabels = idx_bytes(1, {3}, {7, 0, 9});

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hvd::InvalidArgumentError& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_small_set(const td::Dataset& set) {
  EXPECT_EQ(set.count, 3);
  EXPECT_EQ(set.rows, 2);
  EXPECT_EQ(set.cols, 3);
  EXPECT_EQ(set.channels, 1);
  ASSERT_EQ(set.images.size(), 18u);
  for (size_t i = 0; i < 18; ++i) EXPECT_FLOAT_EQ(set.images[i], 10.0f * i / 255.0f);
  EXPECT_EQ(set.labels, (std::vector<int32_t>{7, 0, 9}));
}

TEST(IdxReader, ReadsPlainFiles) {
  TempDir d;
  write_raw(d.file("img"), kImages);
  write_raw(d.file("lbl"), kLabels);
  expect_small_set(td::load_idx_dataset(d.file("img"), d.file("lbl")));
}

TEST(IdxReader, ReadsGzipFilesDirectly) {
  TempDir d;
  write_gz(d.file("img.gz"), kImages);
  write_gz(d.file("lbl.gz"), kLabels);
  expect_small_set(td::load_idx_dataset(d.file("img.gz"), d.file("lbl.gz")));
  const td::IdxArray a = td::read_idx_file(d.file("lbl.gz"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3}));
}

TEST(IdxReader, FindsFashionMnistNamesGzipFirstThenPlain) {
  TempDir d;
  write_gz(d.file("train-images-idx3-ubyte.gz"), kImages);
  write_raw(d.file("train-labels-idx1-ubyte"), kLabels);  // plain: found without .gz
  expect_small_set(td::load_fashion_mnist(d.dir(), td::Split::kTrain));
}

TEST(IdxReader, MissingFileNamesThePathAndTheFix) {
  TempDir d;
  const std::string msg = error_of([&] { td::load_fashion_mnist(d.dir(), td::Split::kTest); });
  EXPECT_NE(msg.find(d.file("t10k-images-idx3-ubyte.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data-dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
  const std::string direct = error_of([&] { td::read_idx_file(d.file("nope")); });
  EXPECT_NE(direct.find(d.file("nope")), std::string::npos) << direct;
}

TEST(IdxReader, BadMagicIsRejected) {
  TempDir d;
  std::vector<uint8_t> bad = kImages;
  bad[0] = 0x1f;  // not 0x00
  write_raw(d.file("bad"), bad);
  const std::string msg = error_of([&] { td::read_idx_file(d.file("bad")); });
  EXPECT_NE(msg.find("bad magic"), std::string::npos) << msg;
  EXPECT_NE(msg.find(d.file("bad")), std::string::npos) << msg;
  std::vector<uint8_t> type = kImages;
  type[2] = 0x0D;  // float elements
  write_raw(d.file("type"), type);
  EXPECT_NE(error_of([&] { td::read_idx_file(d.file("type")); }).find("0x0D"), std::string::npos);
}

TEST(IdxReader, TruncatedPlainFilesAreRejected) {
  TempDir d;
  for (size_t keep : {size_t{0}, size_t{3}, size_t{9}, kImages.size() - 1}) {
    write_raw(d.file("cut"), std::vector<uint8_t>(kImages.begin(), kImages.begin() + keep));
    const std::string msg = error_of([&] { td::read_idx_file(d.file("cut")); });
    EXPECT_NE(msg.find("truncated"), std::string::npos) << keep << ": " << msg;
  }
  std::vector<uint8_t> extra = kImages;
  extra.push_back(1);
  write_raw(d.file("extra"), extra);
  EXPECT_NE(error_of([&] { td::read_idx_file(d.file("extra")); }).find("1 bytes after"),
            std::string::npos);
}

TEST(IdxReader, TruncatedGzipStreamIsRejected) {
  TempDir d;
  // Enough incompressible-ish data that cutting the stream loses real content.
  std::vector<uint8_t> pixels(100 * 28 * 28);
  uint32_t x = 12345;
  for (uint8_t& p : pixels) p = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
  write_gz(d.file("full.gz"), idx_bytes(3, {100, 28, 28}, pixels));
  std::ifstream in(d.file("full.gz"), std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t keep : {gz.size() / 2, gz.size() - 4}) {  // mid-stream, and only the trailer cut
    std::ofstream(d.file("cut.gz"), std::ios::binary)
        .write(gz.data(), static_cast<std::streamsize>(keep));
    const std::string msg = error_of([&] { td::read_idx_file(d.file("cut.gz")); });
    EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                msg.find("cannot read") != std::string::npos)
        << keep << ": " << msg;
  }
}

TEST(IdxReader, HugeHeaderDimensionsFailWithoutAllocating) {
  TempDir d;
  write_raw(d.file("huge"), idx_bytes(3, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {1, 2, 3}));
  EXPECT_NE(error_of([&] { td::read_idx_file(d.file("huge")); }).find("truncated"),
            std::string::npos);
}

TEST(IdxReader, MismatchedCountsOutOfRangeLabelsAndWrongRanksAreRejected) {
  TempDir d;
  write_raw(d.file("img"), kImages);
  write_raw(d.file("two"), idx_bytes(1, {2}, {1, 2}));
  EXPECT_NE(error_of([&] { td::load_idx_dataset(d.file("img"), d.file("two")); }).find("3 images"),
            std::string::npos);
  write_raw(d.file("big"), idx_bytes(1, {3}, {1, 10, 2}));
  EXPECT_NE(error_of([&] { td::load_idx_dataset(d.file("img"), d.file("big")); }).find("label 10"),
            std::string::npos);
  write_raw(d.file("lbl"), kLabels);
  EXPECT_THROW(td::load_idx_dataset(d.file("lbl"), d.file("lbl")), hvd::InvalidArgumentError);
}

TEST(IdxReader, EmptySetIsValid) {
  TempDir d;
  write_raw(d.file("img"), idx_bytes(3, {0, 28, 28}, {}));
  write_raw(d.file("lbl"), idx_bytes(1, {0}, {}));
  const td::Dataset set = td::load_idx_dataset(d.file("img"), d.file("lbl"));
  EXPECT_EQ(set.count, 0);
  EXPECT_TRUE(set.images.empty());
}

TEST(EpochPermutation, IsADeterministicPermutationThatChangesPerEpoch) {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    const std::vector<int64_t> p = td::epoch_permutation(n, 42, 0);
    ASSERT_EQ(static_cast<int64_t>(p.size()), n);
    EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), static_cast<size_t>(n));
    for (int64_t v : p) EXPECT_TRUE(v >= 0 && v < n);
    EXPECT_EQ(p, td::epoch_permutation(n, 42, 0));
  }
  const auto e0 = td::epoch_permutation(1000, 42, 0);
  EXPECT_NE(e0, td::epoch_permutation(1000, 42, 1));
  EXPECT_NE(e0, td::epoch_permutation(1000, 43, 0));
  std::vector<int64_t> identity(1000);
  for (int64_t i = 0; i < 1000; ++i) identity[i] = i;
  EXPECT_NE(e0, identity);
}

TEST(GatherBatch, CopiesTheChosenSamplesAndRejectsBadIndices) {
  TempDir d;
  write_raw(d.file("img"), kImages);
  write_raw(d.file("lbl"), kLabels);
  const td::Dataset set = td::load_idx_dataset(d.file("img"), d.file("lbl"));
  std::vector<float> images(2 * 6);
  std::vector<int32_t> labels(2);
  td::gather_batch(set, std::vector<int64_t>{2, 0}, images, labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{9, 7}));
  EXPECT_FLOAT_EQ(images[0], 120.0f / 255.0f);
  EXPECT_FLOAT_EQ(images[6], 0.0f);
  EXPECT_THROW(td::gather_batch(set, std::vector<int64_t>{3, 0}, images, labels),
               hvd::InvalidArgumentError);
  EXPECT_THROW(td::gather_batch(set, std::vector<int64_t>{0}, images, labels),
               hvd::InvalidArgumentError);
}

TEST(Synthetic, IsDeterministicInRangeAndSharesShapesAcrossSampleSeeds) {
  const td::Dataset a = td::make_synthetic(50, 1), b = td::make_synthetic(50, 1);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.rows, 28);
  std::set<int32_t> classes;
  for (int32_t l : a.labels) {
    EXPECT_TRUE(l >= 0 && l < 10);
    classes.insert(l);
  }
  EXPECT_GE(classes.size(), 8u);
  for (float p : a.images) EXPECT_TRUE(p >= 0.0f && p <= 1.0f);
  // Without noise and jitter every sample is its class's shape, the same under another sample
  // seed; an object on a black background (some pixels 0, some not), and the classes differ.
  td::SyntheticOptions clean;
  clean.noise = 0.0f;
  clean.jitter = 0.0f;
  const td::Dataset c = td::make_synthetic(40, 3, clean), e = td::make_synthetic(40, 4, clean);
  for (int64_t i = 0; i < c.count; ++i) {
    for (int64_t j = 0; j < e.count; ++j) {
      if (c.labels[i] != e.labels[j]) continue;
      EXPECT_TRUE(std::equal(c.image(i).begin(), c.image(i).end(), e.image(j).begin()));
    }
  }
  for (int64_t i = 0; i < c.count; ++i) {
    const auto img = c.image(i);
    const auto lit = std::count_if(img.begin(), img.end(), [](float p) { return p > 0.0f; });
    EXPECT_GT(lit, 28 * 28 / 20) << "sample " << i << ": no object";
    EXPECT_LT(lit, 28 * 28 * 3 / 4) << "sample " << i << ": no background";
    for (int64_t k = 0; k < i; ++k) {
      if (c.labels[k] != c.labels[i]) {
        EXPECT_FALSE(std::equal(img.begin(), img.end(), c.image(k).begin()))
            << "classes " << c.labels[k] << " and " << c.labels[i] << " look alike";
      }
    }
  }
  EXPECT_EQ(td::make_synthetic(0, 1).count, 0);
  EXPECT_THROW(td::make_synthetic(-1, 1), hvd::InvalidArgumentError);
  td::SyntheticOptions bad;
  bad.jitter = -0.1f;
  EXPECT_THROW(td::make_synthetic(1, 1, bad), hvd::InvalidArgumentError);
}

TEST(FashionMnist, InstalledTrainAndTestSetsHaveTheKnownShape) {
  const std::string dir = td::kDefaultFashionMnistDir;
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed in " << dir
                 << " (apt-get install dataset-fashion-mnist)";
  }
  for (auto [split, count] :
       {std::pair{td::Split::kTrain, 60000}, std::pair{td::Split::kTest, 10000}}) {
    const td::Dataset set = td::load_fashion_mnist(dir, split);
    EXPECT_EQ(set.count, count);
    EXPECT_EQ(set.rows, 28);
    EXPECT_EQ(set.cols, 28);
    ASSERT_EQ(set.images.size(), static_cast<size_t>(count) * 784);
    std::vector<int> per_class(10, 0);
    for (int32_t l : set.labels) {
      ASSERT_TRUE(l >= 0 && l <= 9) << l;
      ++per_class[l];
    }
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], count / 10) << "class " << c;  // balanced
    float lo = 1, hi = 0;
    double sum = 0;
    for (float p : set.images) {
      lo = std::min(lo, p);
      hi = std::max(hi, p);
      sum += p;
    }
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);
    EXPECT_NEAR(sum / set.images.size(), 0.286, 0.005);  // the published Fashion-MNIST mean
  }
}

}  // namespace
