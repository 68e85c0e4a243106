#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvd/tensor.h"

namespace hvd {

// A tensor with the name it is saved under: in CPU memory, or on a CUDA device (Checkpointer copies
// it through pinned host memory on its TensorRef stream, and waits for that copy).
struct NamedTensor {
  std::string name;
  TensorRef tensor;
};

// Rank-0 checkpointing in safetensors files that PyTorch/safetensors tools open.
//
// save() and restore_latest() are collective: every rank calls them, in the same order, from one
// thread (like any hvd collective), with the same tensor names, dtypes and shapes. Rank 0 does all
// file I/O; the other ranks only take part in broadcasts, so a failure on rank 0 (a full disk, a
// directory that cannot be created) reaches every rank as the same hvd::Error instead of a hang.
//
// Files: <dir>/ckpt-<step, 12 digits>.safetensors, written crash-safe (temporary file, fsync,
// rename, fsync of the directory). __metadata__ holds the caller's metadata plus "step", "format"
// ("hvd"), "checksum" and "checksum_algorithm"; the checksum covers the tensor table, the metadata
// and the data, so a torn or corrupted file is detected. docs/checkpointing.md has the details.
//
// save_async() takes the step's copy and returns; rank 0 writes the file on a thread of its own
// while training goes on, and the next collective call of the same Checkpointer (save, save_async,
// wait, restore_latest) first waits for that write and throws its failure on every rank.
//
// Not thread-safe: one thread per Checkpointer, and one Checkpointer writing a directory at a time.
class Checkpointer {
 public:
  // keep_last: how many checkpoints save() leaves in dir (the newest ones; 0 keeps all). Throws
  // hvd::InvalidArgumentError for an empty dir or a negative keep_last. Not collective.
  explicit Checkpointer(std::string dir, int keep_last = 3);
  // Waits for a write that save_async() started (rank 0). Not collective, so it cannot report a
  // failure to the other ranks: it prints it on stderr. Call wait() first to have it thrown.
  ~Checkpointer();
  Checkpointer(Checkpointer&&) noexcept;
  Checkpointer& operator=(Checkpointer&&) noexcept;  // waits for this one's write first

  // Collective. Rank 0 writes its own `tensors` as checkpoint `step` (>= 0; saving a step again
  // replaces that file), then deletes checkpoints beyond keep_last (never the one just written) and
  // stale temporary files. Every rank returns once the file is durable on disk, or throws the same
  // hvd::Error (hvd::InvalidArgumentError for a bad argument on rank 0: duplicate or empty names,
  // a tensor on a device this process cannot reach, a metadata key reserved above). Other ranks'
  // tensors are not read. A CUDA tensor is copied to pinned host memory first (after the work
  // queued on its stream); the file is written from that copy.
  void save(int64_t step, const std::vector<NamedTensor>& tensors,
            const std::map<std::string, std::string>& metadata = {});

  // Collective. save() without waiting for the file: every rank returns once rank 0 has checked
  // the arguments (the same errors as save(), thrown at once on every rank) and copied its
  // `tensors` (CPU tensors into memory of its own, CUDA tensors into pinned host memory after the
  // work queued on their streams), so the caller may change them at once. A thread of rank 0 then
  // writes, fsyncs, renames and prunes as save() does; the files already there are never at risk.
  // One write at a time: when the previous one still runs, this call waits for it first. A write's
  // failure is thrown on every rank by the next save, save_async, wait or restore_latest of this
  // Checkpointer, naming its step; that call then does nothing else. Rank 0 keeps the copy's
  // memory (the tensors' bytes) for the next save_async until the Checkpointer is destroyed.
  void save_async(int64_t step, const std::vector<NamedTensor>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

  // Collective. Returns once the last save_async()'s file is durable on disk, or throws its
  // failure on every rank (as save() would have); returns at once when no write is pending.
  void wait();

  // Collective. Waits for a pending save_async() write first (its failure is thrown instead).
  // Rank 0 tries the checkpoints in dir newest first, skipping (with a warning on
  // stderr naming the file and the reason) any that cannot be read, is malformed or fails its
  // checksum; from the newest good one it fills every rank's `tensors` in place (rank 0 reads,
  // then broadcasts) and returns its step on every rank. Returns std::nullopt on every rank, with
  // the tensors untouched, when dir holds no good checkpoint. Throws hvd::InvalidArgumentError on
  // every rank when the newest good checkpoint lacks a tensor or holds it with another dtype or
  // shape (extra tensors in the file are ignored), or when ranks pass different tensor lists.
  std::optional<int64_t> restore_latest(const std::vector<NamedTensor>& tensors);

  // The __metadata__ of the checkpoint the last successful restore_latest() loaded (identical on
  // every rank); empty before one, or after one that found none.
  const std::map<std::string, std::string>& last_metadata() const { return last_metadata_; }

  const std::string& dir() const { return dir_; }
  int keep_last() const { return keep_last_; }
  // The path save(step) writes: <dir>/ckpt-<step, zero padded to 12 digits>.safetensors.
  std::string path_for(int64_t step) const;

 private:
  struct Write;  // rank 0's save_async() write in progress (training/checkpointer.cc)
  std::string dir_;
  int keep_last_;
  std::map<std::string, std::string> last_metadata_;
  std::unique_ptr<Write> pending_;
};

}  // namespace hvd
