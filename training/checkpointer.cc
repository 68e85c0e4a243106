// Checkpointer: the collective protocol around the rank-0 file I/O of checkpoint_io.h.
//
// Why it cannot hang: every rank runs the same fixed sequence of collectives whatever happens on
// rank 0, and rank 0 reports the outcome of its I/O in that sequence instead of throwing out of it.
//   save:    rank 0 writes, fsyncs, renames, prunes       | broadcast status {code, 0, len}
//                                                          | broadcast message (when len > 0)
//   save_async: rank 0 checks and copies the tensors,      | the same broadcasts
//            then starts its writer thread (the write
//            below, on its own; no collective in it)
//   wait:    rank 0 joins its writer thread                 | the same broadcasts
//   restore: allreduce-max {bad rank + 1, sig, -sig}: every rank's tensors are valid and all ranks
//            passed the same names/dtypes/shapes (sig = hash of them; max(sig) == -max(-sig) iff
//            all equal), checked before anything that could hang on a mismatch
//            rank 0 lists, verifies, loads                 | broadcast status {code, step, len}
//                                                          | broadcast payload: metadata or message
//                                                          | broadcast of each tensor (when found)
// A status other than kOk is thrown on every rank as the same exception type with the same text.
// Every collective call of a Checkpointer starts, on rank 0, by joining the writer thread of the
// last save_async(): a failed write becomes that call's status (and the call does nothing else),
// so the failure reaches every rank in the broadcasts the call makes anyway.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <thread>
#include <utility>

#include "hvd/checkpoint.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "hvd/hvd.h"
#include "training/checkpoint_io.h"
#include "training/device.h"
#include "training/safetensors.h"

namespace hvd {

namespace {

using training::TensorBytes;

enum StatusCode : int64_t { kOk = 0, kNone = 1, kError = 2, kInvalidArgument = 3 };

struct Status {
  int64_t code = kOk;
  int64_t step = 0;
  std::string payload;  // the error message, or the encoded metadata of a restored checkpoint
};

const char* const kReservedKeys[] = {"step", "format", training::kChecksumKey,
                                     training::kChecksumAlgorithmKey};

// Broadcasts rank 0's status; returns it on every rank.
Status broadcast_status(const Status& mine, const std::string& op) {
  std::vector<int64_t> head = {mine.code, mine.step, static_cast<int64_t>(mine.payload.size())};
  broadcast(head, 0, "hvd.checkpoint." + op + ".status");
  Status out{head[0], head[1], {}};
  if (head[2] > 0) {
    std::vector<uint8_t> bytes(mine.payload.begin(), mine.payload.end());
    bytes.resize(static_cast<std::size_t>(head[2]));
    broadcast(bytes, 0, "hvd.checkpoint." + op + ".payload");
    out.payload.assign(bytes.begin(), bytes.end());
  }
  return out;
}

[[noreturn]] void throw_status(const Status& s) {
  if (s.code == kInvalidArgument) throw InvalidArgumentError(s.payload);
  throw Error(s.payload);
}

// Runs f() on rank 0, turning its exceptions into a status whose message starts with `what`.
template <class F>
Status run_on_root(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const InvalidArgumentError& e) {
    return {kInvalidArgument, 0, what + " failed on rank 0: " + e.what()};
  } catch (const std::exception& e) {
    return {kError, 0, what + " failed on rank 0: " + e.what()};
  }
}

// Rank 0's host copies of CUDA tensors for the file I/O: one pinned buffer per tensor, so that
// the copies are DMA on each tensor's stream.
struct Staging {
  struct Staged {
    TensorRef tensor;
    training::PinnedBuffer memory;
    void* host = nullptr;  // memory's bytes, tensor.size_bytes() of them
  };
  struct HostCopy {
    std::unique_ptr<unsigned char[]> bytes;
    std::size_t capacity = 0;
  };
  // Kept across reset() (a Checkpointer's save_async calls reuse them): allocating and faulting in
  // the memory again cost more than the copy itself (256 MiB: docs/benchmarks.md, "Checkpoints").
  std::vector<Staged> staged;  // the first `used` are this call's
  std::size_t used = 0;
  // save_async: CPU tensors are copied too (the caller may change them once the call returns).
  bool copy_cpu = false;
  std::vector<HostCopy> cpu_copies;
  std::size_t cpu_used = 0;

  // Forgets the tensors of the last call; keeps the memory.
  void reset() {
    for (std::size_t i = 0; i < used; ++i) staged[i].tensor = TensorRef();
    used = cpu_used = 0;
  }
  // A copy of the CPU tensor `t` made now, for the file I/O.
  void* copy_now(const TensorRef& t) {
    const std::size_t n = t.size_bytes();
    if (n == 0) return t.data();  // (nothing to copy; the pointer only passes the validation)
    if (cpu_used == cpu_copies.size()) cpu_copies.emplace_back();
    HostCopy& c = cpu_copies[cpu_used++];
    if (c.capacity < n) {
      c.bytes = std::make_unique_for_overwrite<unsigned char[]>(n);
      c.capacity = n;
    }
    std::memcpy(c.bytes.get(), t.data(), n);
    return c.bytes.get();
  }
  // The host copy of `t` (pinned), for the file I/O.
  void* add(const TensorRef& t) {
    if (used == staged.size()) staged.emplace_back();
    Staged& s = staged[used++];
    s.tensor = t;
    s.host = s.memory.get(t.size_bytes());
    return s.host;
  }
  // Tensor -> host copy (queued on each tensor's stream), then one wait per stream.
  void download() {
    for (std::size_t i = 0; i < used; ++i)
      training::copy(training::place_of(staged[i].tensor), staged[i].tensor.data(), staged[i].host,
                     staged[i].tensor.size_bytes());
    synchronize();
  }
  // Host copy -> tensor, the same way.
  void upload() {
    for (std::size_t i = 0; i < used; ++i)
      training::copy(training::place_of(staged[i].tensor), staged[i].host, staged[i].tensor.data(),
                     staged[i].tensor.size_bytes());
    synchronize();
  }

 private:
  void synchronize() {
    std::vector<std::pair<int, void*>> done;
    for (std::size_t i = 0; i < used; ++i) {
      const training::Place at = training::place_of(staged[i].tensor);
      const std::pair<int, void*> key{at.device.index, at.stream};
      if (std::find(done.begin(), done.end(), key) != done.end()) continue;
      training::synchronize(at);
      done.push_back(key);
    }
  }
};

// The tensors as the file I/O sees them. A CUDA tensor is read and written through a pinned host
// copy in `staging` (rank 0); without staging its device pointer only passes the validation. With
// staging->copy_cpu, a CPU tensor is copied once it passed the validation.
std::vector<TensorBytes> to_bytes(const std::vector<NamedTensor>& tensors, const std::string& what,
                                  Staging* staging = nullptr) {
  std::vector<TensorBytes> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors)
    training::require_device(t.tensor, what + ": tensor '" + t.name + "'");
  for (const auto& t : tensors) {
    const bool stage = staging != nullptr && t.tensor.device().kind != Device::kCPU;
    out.push_back({t.name, t.tensor.dtype(), t.tensor.shape(),
                   stage ? staging->add(t.tensor) : t.tensor.data()});
  }
  training::plan_layout(out);  // validates names, shapes and data pointers
  if (staging != nullptr && staging->copy_cpu)
    for (std::size_t i = 0; i < out.size(); ++i)
      if (tensors[i].tensor.device().kind == Device::kCPU)
        out[i].data = staging->copy_now(tensors[i].tensor);
  return out;
}

// The metadata map as bytes: for each entry, key length, key, value length, value (lengths as
// 8-byte little-endian).
std::string encode_metadata(const std::map<std::string, std::string>& m) {
  std::string out;
  auto put = [&out](const std::string& s) {
    uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    out += s;
  };
  for (const auto& [k, v] : m) {
    put(k);
    put(v);
  }
  return out;
}

std::map<std::string, std::string> decode_metadata(const std::string& bytes) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  auto get = [&](std::string& s) {
    uint64_t n;
    if (bytes.size() - pos < 8)
      throw InternalError("Checkpointer: malformed metadata broadcast from rank 0");
    std::memcpy(&n, bytes.data() + pos, 8);
    pos += 8;
    if (bytes.size() - pos < n)
      throw InternalError("Checkpointer: malformed metadata broadcast from rank 0");
    s.assign(bytes.data() + pos, n);
    pos += n;
  };
  while (pos < bytes.size()) {
    std::string k, v;
    get(k);
    get(v);
    out.emplace(std::move(k), std::move(v));
  }
  return out;
}

// A 62-bit hash of the tensor list (sorted by name), so that max(sig) and max(-sig) never overflow.
int64_t signature(const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> lines;
  for (const auto& t : tensors) {
    std::string l = t.name + '\0' + std::to_string(static_cast<int>(t.tensor.dtype())) + '\0';
    for (int64_t d : t.tensor.shape()) l += std::to_string(d) + ',';
    lines.push_back(std::move(l) + '\n');
  }
  std::sort(lines.begin(), lines.end());
  training::Xxh64 h;
  for (const auto& l : lines) h.update(l.data(), l.size());
  return static_cast<int64_t>(h.digest() & ((uint64_t{1} << 62) - 1));
}

void warn(const std::string& text) { std::fprintf(stderr, "hvd: warning: %s\n", text.c_str()); }

// Rank 0, save() and save_async(): the arguments that the tensors' validation does not check.
void check_save_arguments(int64_t step, const std::map<std::string, std::string>& metadata) {
  if (step < 0) throw InvalidArgumentError("the step is negative; pass a step >= 0");
  for (const char* key : kReservedKeys)
    if (metadata.count(key))
      throw InvalidArgumentError(std::string("metadata key '") + key +
                                 "' is reserved (hvd writes step, format, checksum, "
                                 "checksum_algorithm); rename it");
}

// Rank 0: writes checkpoint `step` from `bytes`, then prunes (the end of save and save_async).
void write_and_prune(const std::string& dir, int keep_last, int64_t step,
                     const std::vector<TensorBytes>& bytes,
                     std::map<std::string, std::string> metadata, const std::string& what) {
  metadata["step"] = std::to_string(step);
  metadata["format"] = "hvd";
  training::write_checkpoint_file(dir, step, bytes, std::move(metadata));
  for (const auto& w : training::prune_checkpoints(dir, keep_last, step)) warn(what + ": " + w);
}

}  // namespace

// Rank 0's write of a save_async(): the step's copy and the thread that writes it. Kept after the
// write (running false) for its memory, which the next save_async reuses.
struct Checkpointer::Write {
  std::string what;  // "Checkpointer::save_async(step N) to 'dir'"
  Staging staging;   // the tensors' copies: CPU ones, and CUDA ones in pinned memory
  std::vector<TensorBytes> bytes;
  bool running = false;  // a thread writes; finish() joins it
  Status outcome;        // the thread's, read after the join
  std::thread thread;

  void start(const std::string& dir, int keep_last, int64_t step,
             std::map<std::string, std::string> metadata) {
    outcome = {};
    thread = std::thread([this, dir, keep_last, step, md = std::move(metadata)]() mutable {
      outcome = run_on_root(what, [&]() -> Status {
        write_and_prune(dir, keep_last, step, bytes, std::move(md), what);
        return {};
      });
    });
    running = true;
  }
  // The write's outcome (kOk when none ran since the last finish()).
  Status finish() {
    if (!running) return {};
    thread.join();
    running = false;
    bytes.clear();
    staging.reset();
    return std::exchange(outcome, Status{});
  }
};

namespace {

// Rank 0: joins the pending write, if any; its failure as the status of the call `now` ("" for
// wait(), whose outcome it is), which then does nothing else.
template <class W>
Status finish_write(std::unique_ptr<W>& pending, const std::string& now) {
  if (!pending) return {};
  Status s = pending->finish();
  if (s.code != kOk && !now.empty())
    s.payload += "; " + now +
                 " did nothing (the checkpoints already in the directory are intact): fix the "
                 "cause and call it again";
  return s;
}

// Not collective (a destructor, a move): the failure goes to stderr.
template <class W>
void finish_write_quietly(std::unique_ptr<W>& pending) {
  const Status s = finish_write(pending, "");
  if (s.code != kOk)
    warn(s.payload +
         " (seen when the Checkpointer was destroyed or replaced; Checkpointer::wait() throws it "
         "on every rank)");
}

// save() and save_async() on every rank: rank 0 joins the pending write, then runs `body` (unless
// that write failed); its status is broadcast and thrown on every rank.
template <class W, class F>
void save_collectively(std::unique_ptr<W>& pending, const std::string& what, F&& body) {
  Status mine;
  if (rank() == 0) mine = finish_write(pending, what);
  if (rank() == 0 && mine.code == kOk) mine = run_on_root(what, body);
  Status s = broadcast_status(mine, "save");
  if (s.code != kOk) throw_status(s);
}

}  // namespace

Checkpointer::Checkpointer(std::string dir, int keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {
  if (dir_.empty())
    throw InvalidArgumentError(
        "Checkpointer: the directory is empty; pass the directory to write to");
  if (keep_last_ < 0)
    throw InvalidArgumentError("Checkpointer: keep_last is " + std::to_string(keep_last_) +
                               "; pass a positive count of checkpoints to keep, or 0 to keep all");
}

Checkpointer::~Checkpointer() { finish_write_quietly(pending_); }

Checkpointer::Checkpointer(Checkpointer&&) noexcept = default;

Checkpointer& Checkpointer::operator=(Checkpointer&& o) noexcept {
  if (this == &o) return *this;
  finish_write_quietly(pending_);
  dir_ = std::move(o.dir_);
  keep_last_ = o.keep_last_;
  last_metadata_ = std::move(o.last_metadata_);
  pending_ = std::move(o.pending_);
  return *this;
}

std::string Checkpointer::path_for(int64_t step) const {
  return (dir_.back() == '/' ? dir_ : dir_ + "/") + training::checkpoint_file_name(step);
}

void Checkpointer::save(int64_t step, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  const std::string what =
      "Checkpointer::save(step " + std::to_string(step) + ") to '" + dir_ + "'";
  save_collectively(pending_, what, [&]() -> Status {
    check_save_arguments(step, metadata);
    Staging staging;
    auto bytes = to_bytes(tensors, "save", &staging);
    staging.download();  // CUDA tensors: copied now, so the write needs no device
    write_and_prune(dir_, keep_last_, step, bytes, metadata, what);
    return {};
  });
}

void Checkpointer::save_async(int64_t step, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const std::string what =
      "Checkpointer::save_async(step " + std::to_string(step) + ") to '" + dir_ + "'";
  save_collectively(pending_, what, [&]() -> Status {
    check_save_arguments(step, metadata);
    if (!pending_) pending_ = std::make_unique<Write>();
    Write& w = *pending_;  // finished: its memory is reused
    w.what = what;
    w.staging.copy_cpu = true;
    w.staging.reset();  // (a call whose arguments failed may have staged some)
    w.bytes = to_bytes(tensors, "save_async", &w.staging);
    w.staging.download();  // CUDA tensors: copied now; the writer needs no device
    w.start(dir_, keep_last_, step, metadata);
    return {};
  });
}

void Checkpointer::wait() {
  Status mine;
  if (rank() == 0) mine = finish_write(pending_, "");
  Status s = broadcast_status(mine, "wait");
  if (s.code != kOk) throw_status(s);
}

namespace {

// A checkpoint file's verified header, whose metadata says it is hvd's and of the file name's step;
// throws Error otherwise.
training::SafetensorsHeader read_hvd_header(const training::CheckpointFile& file) {
  training::SafetensorsHeader header = training::read_verified_header(file.path);
  auto step = header.metadata.find("step");
  auto format = header.metadata.find("format");
  if (format == header.metadata.end() || format->second != "hvd")
    throw Error("__metadata__ has no \"format\": \"hvd\"");
  if (step == header.metadata.end() || step->second != std::to_string(file.step))
    throw Error(
        "__metadata__ step " +
        (step == header.metadata.end() ? std::string("is missing") : "'" + step->second + "'") +
        " does not match the file name's step " + std::to_string(file.step));
  return header;
}

// Rank 0's values of `tensors` to every rank (tensors without elements are skipped); waits for
// all of them and rethrows the first failure.
void broadcast_from_root(const std::vector<NamedTensor>& tensors) {
  std::vector<Handle> handles;
  for (const auto& t : tensors) {
    const auto& shape = t.tensor.shape();
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) continue;
    handles.push_back(broadcast_async(t.tensor, 0, "hvd.checkpoint.restore/" + t.name));
  }
  std::exception_ptr first;
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

std::optional<int64_t> Checkpointer::restore_latest(const std::vector<NamedTensor>& tensors) {
  const std::string what = "Checkpointer::restore_latest from '" + dir_ + "'";
  const int me = rank();

  // 1. Every rank's tensors are valid and all ranks agree on them.
  std::string local_error;
  std::vector<TensorBytes> targets;
  Staging staging;  // rank 0 reads CUDA tensors' values into host copies, then uploads them
  try {
    targets = to_bytes(tensors, "restore_latest", me == 0 ? &staging : nullptr);
  } catch (const Error& e) {
    local_error = e.what();
  }
  const int64_t sig = signature(tensors);
  std::vector<int64_t> check = {local_error.empty() ? 0 : me + 1, sig, -sig};
  allreduce(check, "hvd.checkpoint.restore.check", ReduceOp::kMax);
  if (!local_error.empty())
    throw InvalidArgumentError(what + " on rank " + std::to_string(me) + ": " + local_error);
  if (check[0] != 0)
    throw InvalidArgumentError(what + ": rank " + std::to_string(check[0] - 1) +
                               " passed invalid tensors (its own error says which)");
  if (check[1] != -check[2])
    throw InvalidArgumentError(
        what +
        ": ranks passed different tensor lists (names, dtypes or shapes differ); "
        "pass the same tensors on every rank");

  // 2. Rank 0 finds the newest good checkpoint and loads it (after a pending write).
  Status mine;
  if (me == 0) mine = finish_write(pending_, what);
  if (me == 0 && mine.code == kOk) {
    mine = run_on_root(what, [&]() -> Status {
      for (const auto& file : training::list_checkpoints(dir_)) {
        training::SafetensorsHeader header;
        try {
          header = read_hvd_header(file);
        } catch (const Error& e) {
          warn(what + ": skipping '" + file.path + "': " + e.what() +
               "; trying an older checkpoint");
          continue;
        }
        training::load_tensors(file.path, header,
                               targets);  // a mismatch throws InvalidArgumentError
        staging.upload();
        return {kOk, file.step, encode_metadata(header.metadata)};
      }
      return {kNone, 0, {}};
    });
  }
  Status s = broadcast_status(mine, "restore");
  if (s.code == kNone) {
    last_metadata_.clear();
    return std::nullopt;
  }
  if (s.code != kOk) throw_status(s);

  // 3. Everyone gets rank 0's tensors.
  broadcast_from_root(tensors);
  last_metadata_ = decode_metadata(s.payload);
  return s.step;
}

}  // namespace hvd
