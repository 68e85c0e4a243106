#pragma once

// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed.
//
// IDX: a 4-byte magic (0x00, 0x00, type, number of dimensions), then one big-endian uint32 per
// dimension, then the elements in row-major order. Only type 0x08 (unsigned byte) is accepted, the
// type both data sets use. Images are idx3 [count, rows, cols]; labels are idx1 [count].
//
// Files are read through zlib's gzread, which decompresses a .gz file and passes an uncompressed
// one through unchanged, so either form works under any name. Every failure is an
// hvd::InvalidArgumentError naming the file: missing (with the fix: --data-dir or
// `apt install dataset-fashion-mnist`), bad magic, unsupported type, truncated (header or data,
// including a cut gzip stream), trailing bytes, or images and labels that disagree. Sizes are
// checked against the bytes actually read before anything is allocated from the header, and a
// decompressed file may not exceed kMaxIdxBytes, so a malformed file cannot cause a huge
// allocation.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace train_cnn::data {

inline constexpr int64_t kMaxIdxBytes = int64_t{1} << 30;  // 1 GiB decompressed

// Where the Debian package dataset-fashion-mnist installs the four .gz files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes
};

// The whole (decompressed) content of path.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Parses IDX bytes; `source` names the file in error messages.
IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& source);

IdxArray read_idx_file(const std::string& path);

// Images from an idx3 file scaled to [0, 1] (pixel / 255) and labels from an idx1 file, which
// must have the same count and labels in [0, num_classes).
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int num_classes = 10);

enum class Split { kTrain, kTest };

// Fashion-MNIST from dir: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each as NAME.gz or NAME
// (the .gz is tried first). 60000 training and 10000 test images of 28x28.
Dataset load_fashion_mnist(const std::string& dir, Split split);

}  // namespace train_cnn::data
