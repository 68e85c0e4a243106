// Checkpoint files on disk (training/checkpoint_io.cc): naming, crash-safe writing,
// listing, pruning, verified reading and loading. One process, no MPI.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hvd/error.h"
#include "training/checkpoint_io.h"

namespace hvd::training {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hvd_ckpt_unit_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Tensors whose values depend on the step: weights[i] = step * 1000 + i, bias = -step.
struct Model {
  std::vector<float> weights;
  std::vector<int64_t> bias;
  explicit Model(int64_t step) : weights(11), bias(1, -step) {
    for (std::size_t i = 0; i < weights.size(); ++i)
      weights[i] = static_cast<float>(step * 1000 + static_cast<int64_t>(i));
  }
  std::vector<TensorBytes> tensors() {
    return {{"weights", DataType::kFloat32, {11}, weights.data()},
            {"bias", DataType::kInt64, {1}, bias.data()}};
  }
};

TEST(FileNames, ZeroPaddedAndParsedBack) {
  EXPECT_EQ(checkpoint_file_name(0), "ckpt-000000000000.safetensors");
  EXPECT_EQ(checkpoint_file_name(42), "ckpt-000000000042.safetensors");
  EXPECT_EQ(checkpoint_file_name(1234567890123456), "ckpt-1234567890123456.safetensors");
  for (int64_t s : {int64_t{0}, int64_t{1}, int64_t{42}, int64_t{999999999999}, INT64_MAX})
    EXPECT_EQ(parse_checkpoint_file_name(checkpoint_file_name(s)), s);
  for (const char* bad :
       {"ckpt-.safetensors", "ckpt-12.safetensors.tmp", ".ckpt-000000000001.safetensors.tmp",
        "ckpt-1a.safetensors", "ckpt--1.safetensors", "ckpt-99999999999999999999.safetensors",
        "model.safetensors", "ckpt-1.safetensor"})
    EXPECT_FALSE(parse_checkpoint_file_name(bad)) << bad;
}

TEST(WriteRead, RoundTripThroughDiskLeavesNoTemporaryFile) {
  TempDir dir;
  Model m(7);
  const std::string path =
      write_checkpoint_file(dir.path() + "/sub/dir", 7, m.tensors(), {{"step", "7"}});
  EXPECT_EQ(path, dir.path() + "/sub/dir/ckpt-000000000007.safetensors");
  EXPECT_EQ(names_in(dir.path() + "/sub/dir"),
            std::vector<std::string>{"ckpt-000000000007.safetensors"});

  const SafetensorsHeader h = read_verified_header(path);
  EXPECT_EQ(h.metadata.at("step"), "7");
  EXPECT_EQ(h.metadata.at(kChecksumAlgorithmKey), kChecksumAlgorithm);
  EXPECT_NO_THROW(parse_and_verify(read_file(path)));  // the streaming and in-memory readers agree

  Model out(0);
  load_tensors(path, h, out.tensors());
  EXPECT_EQ(out.weights, Model(7).weights);
  EXPECT_EQ(out.bias, Model(7).bias);
}

TEST(WriteRead, SubsetOfTensorsLoadsAndExtraFileTensorsAreIgnored) {
  TempDir dir;
  Model m(3);
  const std::string path = write_checkpoint_file(dir.path(), 3, m.tensors(), {});
  const SafetensorsHeader h = read_verified_header(path);
  std::vector<int64_t> bias(1, 0);
  load_tensors(path, h, {{"bias", DataType::kInt64, {1}, bias.data()}});
  EXPECT_EQ(bias[0], -3);
}

TEST(WriteRead, MismatchedTensorsAreInvalidArgumentErrors) {
  TempDir dir;
  Model m(3);
  const std::string path = write_checkpoint_file(dir.path(), 3, m.tensors(), {});
  const SafetensorsHeader h = read_verified_header(path);
  std::vector<float> buf(12);
  auto expect_mismatch = [&](const TensorBytes& t, const std::string& needle) {
    try {
      load_tensors(path, h, {t});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_mismatch({"missing", DataType::kFloat32, {11}, buf.data()}, "has no tensor 'missing'");
  expect_mismatch({"weights", DataType::kFloat32, {12}, buf.data()},
                  "as F32 [11] but the caller passed F32 [12]");
  expect_mismatch({"weights", DataType::kInt32, {11}, buf.data()},
                  "but the caller passed I32 [11]");
}

TEST(WriteRead, FileChangedAfterVerificationIsDetectedOnLoad) {
  TempDir dir;
  Model m(5);
  const std::string path = write_checkpoint_file(dir.path(), 5, m.tensors(), {});
  const SafetensorsHeader h = read_verified_header(path);
  std::string bytes = read_file(path);
  bytes[bytes.size() - 1] ^= 0x40;
  write_raw(path, bytes);
  Model out(0);
  EXPECT_THROW(load_tensors(path, h, out.tensors()), Error);
}

TEST(WriteRead, DirectoryBelowARegularFileIsAnErrorNamingIt) {
  // Tests run as root, so permissions would not stop the write; a regular file as parent does.
  TempDir dir;
  write_raw(dir / "file", "x");
  Model m(1);
  try {
    write_checkpoint_file(dir / "file/ckpt", 1, m.tensors(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "file/ckpt"), std::string::npos) << e.what();
  }
  try {
    write_checkpoint_file(dir / "file", 1, m.tensors(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
}

TEST(WriteRead, OverwritingAStepReplacesItAtomically) {
  TempDir dir;
  Model a(4), b(4);
  b.weights[0] = -1;
  write_checkpoint_file(dir.path(), 4, a.tensors(), {});
  const std::string path = write_checkpoint_file(dir.path(), 4, b.tensors(), {});
  Model out(0);
  load_tensors(path, read_verified_header(path), out.tensors());
  EXPECT_EQ(out.weights[0], -1);
  EXPECT_EQ(names_in(dir.path()).size(), 1u);
}

TEST(List, NewestFirstIgnoringOtherFilesAndMissingDirectory) {
  TempDir dir;
  EXPECT_TRUE(list_checkpoints(dir / "does-not-exist").empty());
  for (int64_t s : {5, 100, 7}) {
    Model m(s);
    write_checkpoint_file(dir.path(), s, m.tensors(), {});
  }
  write_raw(dir / ".ckpt-000000000200.safetensors.tmp", "torn");
  write_raw(dir / "notes.txt", "x");
  write_raw(dir / "ckpt-abc.safetensors", "x");
  const auto files = list_checkpoints(dir.path());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].step, 100);
  EXPECT_EQ(files[1].step, 7);
  EXPECT_EQ(files[2].step, 5);
  EXPECT_EQ(files[0].path, dir / "ckpt-000000000100.safetensors");
}

TEST(Prune, KeepsTheNewestAndTheOneJustWrittenAndRemovesStaleTemporaries) {
  TempDir dir;
  for (int64_t s = 1; s <= 5; ++s) {
    Model m(s);
    write_checkpoint_file(dir.path(), s, m.tensors(), {});
  }
  write_raw(dir / ".ckpt-000000000009.safetensors.tmp", "torn by a kill");
  EXPECT_TRUE(prune_checkpoints(dir.path(), 3, 5).empty());
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"ckpt-000000000003.safetensors",
                                                            "ckpt-000000000004.safetensors",
                                                            "ckpt-000000000005.safetensors"}));
  // A restarted job that saves an older step keeps it, plus the newest keep_last - 1 others.
  Model m(2);
  write_checkpoint_file(dir.path(), 2, m.tensors(), {});
  EXPECT_TRUE(prune_checkpoints(dir.path(), 3, 2).empty());
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"ckpt-000000000002.safetensors",
                                                            "ckpt-000000000004.safetensors",
                                                            "ckpt-000000000005.safetensors"}));
  EXPECT_TRUE(prune_checkpoints(dir.path(), 1, 5).empty());
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"ckpt-000000000005.safetensors"});
}

TEST(Prune, KeepLastZeroKeepsEverything) {
  TempDir dir;
  for (int64_t s = 0; s < 4; ++s) {
    Model m(s);
    write_checkpoint_file(dir.path(), s, m.tensors(), {});
  }
  EXPECT_TRUE(prune_checkpoints(dir.path(), 0, 3).empty());
  EXPECT_EQ(names_in(dir.path()).size(), 4u);
}

TEST(ReadVerified, DamagedFilesOnDiskAreErrorsNamingTheReason) {
  TempDir dir;
  Model m(9);
  const std::string path = write_checkpoint_file(dir.path(), 9, m.tensors(), {});
  const std::string good = read_file(path);
  auto expect_bad = [&](const std::string& bytes, const std::string& needle) {
    write_raw(path, bytes);
    try {
      read_verified_header(path);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_bad("", "fewer than the 8-byte header length");
  expect_bad(good.substr(0, 100), "exceeds the");
  expect_bad(good.substr(0, good.size() - 3), "truncated file");
  std::string flipped = good;
  flipped[good.size() - 5] ^= 1;
  expect_bad(flipped, "checksum mismatch");
  std::string huge = good;
  uint64_t n = uint64_t{1} << 62;
  std::memcpy(huge.data(), &n, 8);
  expect_bad(huge, "exceeds the limit");
  write_raw(path, good);
  EXPECT_NO_THROW(read_verified_header(path));

  EXPECT_THROW(read_verified_header(dir / "missing.safetensors"), Error);
  fs::create_directory(dir / "ckpt-000000000010.safetensors");
  EXPECT_THROW(read_verified_header(dir / "ckpt-000000000010.safetensors"), Error);
}

TEST(ReadVerified, LargeTensorsStreamInChunks) {
  // Bigger than the 4 MiB read buffer and not a multiple of it.
  TempDir dir;
  std::vector<double> big((5 << 20) / 8 + 3);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i) * 0.5;
  const std::string path = write_checkpoint_file(
      dir.path(), 1, {{"big", DataType::kFloat64, {static_cast<int64_t>(big.size())}, big.data()}},
      {});
  const SafetensorsHeader h = read_verified_header(path);
  std::vector<double> out(big.size());
  load_tensors(path, h,
               {{"big", DataType::kFloat64, {static_cast<int64_t>(out.size())}, out.data()}});
  EXPECT_EQ(out, big);
}

}  // namespace
}  // namespace hvd::training
