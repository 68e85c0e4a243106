#include "data/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "hvd/error.h"

namespace train_cnn::data {
namespace {

std::string missing_hint() {
  return " Point --data-dir at a folder holding the Fashion-MNIST IDX files, install them with "
         "`apt-get install dataset-fashion-mnist` (they go to " +
         std::string(kDefaultFashionMnistDir) + "), or run with --synthetic.";
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Closes the gzFile on every path out of read_file_bytes.
struct GzCloser {
  gzFile f;
  ~GzCloser() {
    if (f != nullptr) gzclose(f);
  }
};

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw hvd::InvalidArgumentError("IDX file '" + path + "' does not exist or is not a file." +
                                    missing_hint());
  }
  GzCloser file{gzopen(path.c_str(), "rb")};
  if (file.f == nullptr) {
    throw hvd::InvalidArgumentError("cannot open IDX file '" + path + "': " + std::strerror(errno) +
                                    ".");
  }
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    const size_t old = bytes.size();
    if (static_cast<int64_t>(old) >= kMaxIdxBytes) {
      throw hvd::InvalidArgumentError("IDX file '" + path + "' decompresses to more than " +
                                      std::to_string(kMaxIdxBytes) +
                                      " bytes; it is not an MNIST-sized IDX file.");
    }
    bytes.resize(old + kChunk);
    const int got = gzread(file.f, bytes.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(file.f, &code);
      throw hvd::InvalidArgumentError("cannot read IDX file '" + path +
                                      "': " + (msg != nullptr ? msg : "zlib error") +
                                      " (a corrupt or truncated .gz file?).");
    }
    bytes.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // A gzip stream cut short reads as a short file; zlib reports it on close as Z_BUF_ERROR.
  gzFile f = file.f;
  file.f = nullptr;
  const int rc = gzclose(f);
  if (rc == Z_BUF_ERROR) {
    throw hvd::InvalidArgumentError("IDX file '" + path +
                                    "' is truncated: its gzip stream ends early. Re-download or "
                                    "reinstall the file.");
  }
  if (rc != Z_OK) {
    throw hvd::InvalidArgumentError("cannot read IDX file '" + path + "': gzclose returned " +
                                    std::to_string(rc) + ".");
  }
  return bytes;
}

IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& source) {
  if (bytes.size() < 4) {
    throw hvd::InvalidArgumentError("IDX file '" + source +
                                    "' is truncated: " + std::to_string(bytes.size()) +
                                    " bytes, shorter than the 4-byte magic number.");
  }
  const uint8_t type = bytes[2];
  const int ndims = bytes[3];
  if (bytes[0] != 0 || bytes[1] != 0 || ndims == 0) {
    char magic[16];
    std::snprintf(magic, sizeof(magic), "0x%08X", read_be32(bytes.data()));
    throw hvd::InvalidArgumentError("IDX file '" + source + "' has bad magic number " + magic +
                                    "; expected 0x00000801 (labels) or 0x00000803 (images). Is it "
                                    "an MNIST-style IDX file?");
  }
  if (type != 0x08) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", type);
    throw hvd::InvalidArgumentError("IDX file '" + source + "' has element type " + hex +
                                    "; only unsigned bytes (0x08) are supported.");
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < header) {
    throw hvd::InvalidArgumentError("IDX file '" + source +
                                    "' is truncated: " + std::to_string(bytes.size()) +
                                    " bytes, its header for " + std::to_string(ndims) +
                                    " dimensions needs " + std::to_string(header) + ".");
  }
  IdxArray out;
  uint64_t elements = 1;
  std::string shape;
  for (int d = 0; d < ndims; ++d) {
    const uint32_t dim = read_be32(bytes.data() + 4 + 4 * d);
    out.dims.push_back(dim);
    shape += (d ? "x" : "") + std::to_string(dim);
    // Saturate: any product above the data we hold is rejected below.
    elements = (dim != 0 && elements > bytes.size() / dim) ? bytes.size() + 1 : elements * dim;
  }
  const uint64_t data_bytes = bytes.size() - header;
  if (elements > data_bytes) {
    throw hvd::InvalidArgumentError("IDX file '" + source + "' is truncated: its header says " +
                                    shape + " but only " + std::to_string(data_bytes) +
                                    " data bytes follow.");
  }
  if (elements < data_bytes) {
    throw hvd::InvalidArgumentError("IDX file '" + source + "' has " +
                                    std::to_string(data_bytes - elements) + " bytes after the " +
                                    shape + " data; the file is corrupt.");
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

IdxArray read_idx_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx(bytes, path);
}

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int num_classes) {
  IdxArray images = read_idx_file(images_path);
  if (images.dims.size() != 3) {
    throw hvd::InvalidArgumentError("IDX file '" + images_path + "' has " +
                                    std::to_string(images.dims.size()) +
                                    " dimensions; images need 3 (count, rows, cols).");
  }
  IdxArray labels = read_idx_file(labels_path);
  if (labels.dims.size() != 1) {
    throw hvd::InvalidArgumentError("IDX file '" + labels_path + "' has " +
                                    std::to_string(labels.dims.size()) +
                                    " dimensions; labels need 1 (count).");
  }
  if (labels.dims[0] != images.dims[0]) {
    throw hvd::InvalidArgumentError("'" + images_path + "' holds " +
                                    std::to_string(images.dims[0]) + " images but '" + labels_path +
                                    "' holds " + std::to_string(labels.dims[0]) +
                                    " labels; use files of the same split.");
  }
  Dataset set;
  set.count = images.dims[0];
  set.channels = 1;
  set.rows = static_cast<int>(images.dims[1]);
  set.cols = static_cast<int>(images.dims[2]);
  set.num_classes = num_classes;
  set.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) {
    set.images[i] = static_cast<float>(images.data[i]) / 255.0f;
  }
  set.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= num_classes) {
      throw hvd::InvalidArgumentError("IDX file '" + labels_path + "': label " +
                                      std::to_string(labels.data[i]) + " of sample " +
                                      std::to_string(i) + " is outside 0.." +
                                      std::to_string(num_classes - 1) + ".");
    }
    set.labels[i] = labels.data[i];
  }
  return set;
}

Dataset load_fashion_mnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  auto find = [&](const std::string& base) {
    const std::filesystem::path gz = std::filesystem::path(dir) / (base + ".gz");
    const std::filesystem::path raw = std::filesystem::path(dir) / base;
    std::error_code ec;
    if (std::filesystem::is_regular_file(gz, ec)) return gz.string();
    if (std::filesystem::is_regular_file(raw, ec)) return raw.string();
    throw hvd::InvalidArgumentError("Fashion-MNIST file not found: neither '" + gz.string() +
                                    "' nor '" + raw.string() + "' exists." + missing_hint());
  };
  const std::string images = find(prefix + "-images-idx3-ubyte");  // reported first if missing
  const std::string labels = find(prefix + "-labels-idx1-ubyte");
  return load_idx_dataset(images, labels, 10);
}

}  // namespace train_cnn::data
