#include "training/checkpoint_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "hvd/error.h"

namespace hvd::training {

namespace {

// Directories are made and listed with POSIX calls, not std::filesystem: hvd runs in processes
// that load pip's LibTorch 2.x, whose libtorch.so exports a statically linked copy of
// std::filesystem (pytorch/pytorch#133437); the dynamic linker may bind hvd's calls to it, and
// parts of that copy crash (torch 2.11.0: remove_all jumps to address 0).
constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".safetensors";
constexpr std::string_view kTempPrefix = ".ckpt-";
constexpr std::string_view kTempSuffix = ".safetensors.tmp";
constexpr std::size_t kChunk = 4 << 20;

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

[[noreturn]] void fail_errno(const std::string& what, int err) {
  throw Error(what + ": " + errno_text(err));
}

// Closes a file descriptor on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  auto p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, std::min(size, kChunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("cannot write checkpoint '" + path + "'", errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// Reads exactly size bytes at offset; a short file is an error naming the path.
void pread_all(int fd, void* data, std::size_t size, uint64_t offset, const std::string& path) {
  auto p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, std::min(size, kChunk), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("cannot read '" + path + "'", errno);
    }
    if (n == 0)
      throw Error("unexpected end of file reading '" + path + "' at byte " +
                  std::to_string(offset));
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void fsync_directory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno("cannot open checkpoint directory '" + dir + "' to fsync it", errno);
  if (::fsync(fd.get()) != 0)
    fail_errno("fsync of checkpoint directory '" + dir + "' failed", errno);
}

enum class PathKind { kMissing, kDirectory, kOther };

PathKind path_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return PathKind::kMissing;
  return S_ISDIR(st.st_mode) ? PathKind::kDirectory : PathKind::kOther;
}

// The entries of `dir` (without . and ..), or false with errno set.
bool list_names(const std::string& dir, std::vector<std::string>* names) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names->push_back(name);
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  errno = err;
  return err == 0;
}

void make_directories(const std::string& dir) {
  if (path_kind(dir) == PathKind::kOther)
    throw Error("checkpoint directory '" + dir +
                "' exists but is not a directory; pass a directory path");
  // Each prefix that ends before a '/', then the whole path (mkdir -p).
  for (std::size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error("cannot create checkpoint directory '" + dir + "': " + errno_text(errno) +
                  "; pass a directory that can be created and written");
  }
  if (path_kind(dir) != PathKind::kDirectory)
    throw Error("checkpoint directory '" + dir + "' exists but is not a directory");
}

std::string temp_file_name(int64_t step) {
  std::string final_name = checkpoint_file_name(step);
  return "." + final_name + ".tmp";
}

bool is_temp_file_name(std::string_view name) {
  return name.size() > kTempPrefix.size() + kTempSuffix.size() && name.starts_with(kTempPrefix) &&
         name.ends_with(kTempSuffix);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string describe(const SafetensorsEntry& e) {
  std::string s = std::string(safetensors_dtype_name(e.dtype)) + " [";
  for (std::size_t i = 0; i < e.shape.size(); ++i) s += (i ? "," : "") + std::to_string(e.shape[i]);
  return s + "]";
}

std::string describe(const TensorBytes& t) {
  std::string s = std::string(safetensors_dtype_name(t.dtype)) + " [";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

}  // namespace

std::string checkpoint_file_name(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld.safetensors", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_checkpoint_file_name(std::string_view name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::vector<CheckpointFile> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> out;
  if (path_kind(dir) == PathKind::kMissing) return out;
  std::vector<std::string> names;
  if (!list_names(dir, &names))
    throw Error("cannot list checkpoint directory '" + dir + "': " + errno_text(errno));
  for (const std::string& name : names)
    if (auto step = parse_checkpoint_file_name(name)) out.push_back({*step, join(dir, name)});
  // Newest first; two names for one step ("ckpt-5" and "ckpt-000000000005") resolve by name.
  std::sort(out.begin(), out.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return out;
}

std::string write_checkpoint_file(const std::string& dir, int64_t step,
                                  const std::vector<TensorBytes>& tensors,
                                  std::map<std::string, std::string> metadata) {
  auto entries = plan_layout(tensors);
  metadata[kChecksumAlgorithmKey] = kChecksumAlgorithm;
  Xxh64 hash = begin_checksum(entries, metadata);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (entries[i].size()) hash.update(tensors[i].data, entries[i].size());
  metadata[kChecksumKey] = format_checksum(hash.digest());
  const std::string header = encode_header(entries, metadata);

  make_directories(dir);
  const std::string tmp = join(dir, temp_file_name(step));
  const std::string path = join(dir, checkpoint_file_name(step));
  try {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail_errno("cannot create checkpoint file '" + tmp + "'", errno);
    write_all(fd.get(), header.data(), header.size(), tmp);
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (entries[i].size()) write_all(fd.get(), tensors[i].data, entries[i].size(), tmp);
    if (::fsync(fd.get()) != 0) fail_errno("fsync of checkpoint file '" + tmp + "' failed", errno);
    if (::close(fd.release()) != 0)
      fail_errno("close of checkpoint file '" + tmp + "' failed", errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail_errno("cannot rename '" + tmp + "' to '" + path + "'", errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_directory(dir);
  return path;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep_last, int64_t keep) {
  std::vector<std::string> warnings;
  std::vector<std::string> names;
  if (!list_names(dir, &names))
    warnings.push_back("cannot list '" + dir +
                       "' to delete stale temporary files: " + errno_text(errno));
  for (const std::string& name : names) {
    if (is_temp_file_name(name) && ::unlink(join(dir, name).c_str()) != 0)
      warnings.push_back("cannot delete stale temporary file '" + join(dir, name) +
                         "': " + errno_text(errno));
  }
  if (keep_last <= 0) return warnings;
  std::vector<CheckpointFile> files;
  try {
    files = list_checkpoints(dir);
  } catch (const Error& e) {
    warnings.push_back(e.what());
    return warnings;
  }
  // The file just written always stays; of the others, the newest keep_last - 1 stay too.
  int others_kept = 0;
  for (const auto& f : files) {
    if (f.step == keep) continue;
    if (others_kept < keep_last - 1) {
      ++others_kept;
      continue;
    }
    if (::unlink(f.path.c_str()) != 0)
      warnings.push_back("cannot delete old checkpoint '" + f.path + "': " + errno_text(errno));
  }
  return warnings;
}

SafetensorsHeader read_verified_header(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno("cannot open '" + path + "'", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno("cannot stat '" + path + "'", errno);
  if (!S_ISREG(st.st_mode)) throw Error("'" + path + "' is not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);

  char first[8];
  if (file_size < 8)
    throw Error("truncated safetensors file: " + std::to_string(file_size) +
                " bytes, fewer than the 8-byte header length");
  pread_all(fd.get(), first, 8, 0, path);
  const uint64_t n =
      read_header_length(std::string_view(first, 8), file_size);  // bounded: <= kMaxHeaderBytes
  std::string prefix(8 + n, '\0');
  std::memcpy(prefix.data(), first, 8);
  pread_all(fd.get(), prefix.data() + 8, n, 8, path);
  SafetensorsHeader header = parse_header(prefix, file_size);

  Xxh64 hash = begin_checksum(header.tensors, header.metadata);
  std::vector<char> buf(std::min<uint64_t>(kChunk, std::max<uint64_t>(header.data_size, 1)));
  for (uint64_t off = 0; off < header.data_size;) {
    std::size_t len =
        static_cast<std::size_t>(std::min<uint64_t>(buf.size(), header.data_size - off));
    pread_all(fd.get(), buf.data(), len, header.data_offset + off, path);
    hash.update(buf.data(), len);
    off += len;
  }
  verify_checksum(header, hash.digest());
  return header;
}

void check_tensors_match(const std::string& path, const SafetensorsHeader& header,
                         const std::vector<TensorBytes>& targets) {
  for (const auto& t : targets) {
    const SafetensorsEntry* e = header.find(t.name);
    if (!e) {
      std::string names;
      for (std::size_t i = 0; i < header.tensors.size() && i < 20; ++i)
        names += (i ? ", '" : "'") + header.tensors[i].name + "'";
      if (header.tensors.size() > 20) names += ", ...";
      throw InvalidArgumentError("checkpoint '" + path + "' has no tensor '" + t.name +
                                 "' (it holds " + std::to_string(header.tensors.size()) +
                                 " tensors: " + names +
                                 "); restore with the tensor names it was saved with");
    }
    if (e->dtype != t.dtype || e->shape != t.shape)
      throw InvalidArgumentError("checkpoint '" + path + "' holds tensor '" + t.name + "' as " +
                                 describe(*e) + " but the caller passed " + describe(t) +
                                 "; restore into tensors of the saved dtype and shape");
  }
}

void load_tensors(const std::string& path, const SafetensorsHeader& header,
                  const std::vector<TensorBytes>& targets) {
  check_tensors_match(path, header, targets);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno("cannot open '" + path + "'", errno);
  std::map<std::string_view, const TensorBytes*> by_name;
  for (const auto& t : targets) by_name.emplace(t.name, &t);

  // header.tensors is in data order: read the data section front to back, each requested tensor
  // straight into its memory, the rest through a scratch buffer, hashing everything.
  Xxh64 hash = begin_checksum(header.tensors, header.metadata);
  std::vector<char> scratch;
  for (const auto& e : header.tensors) {
    if (e.size() == 0) continue;
    auto it = by_name.find(e.name);
    if (it != by_name.end()) {
      pread_all(fd.get(), it->second->data, e.size(), header.data_offset + e.begin, path);
      hash.update(it->second->data, e.size());
      continue;
    }
    scratch.resize(std::min<uint64_t>(kChunk, e.size()));
    for (uint64_t off = 0; off < e.size();) {
      std::size_t len =
          static_cast<std::size_t>(std::min<uint64_t>(scratch.size(), e.size() - off));
      pread_all(fd.get(), scratch.data(), len, header.data_offset + e.begin + off, path);
      hash.update(scratch.data(), len);
      off += len;
    }
  }
  try {
    verify_checksum(header, hash.digest());
  } catch (const Error& err) {
    throw Error("checkpoint '" + path + "' changed while it was being read: " + err.what());
  }
}

}  // namespace hvd::training
