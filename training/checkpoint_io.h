#pragma once

// Checkpoint files on disk, one process's view: naming, crash-safe writing, listing, pruning,
// reading with verification. No MPI and no runtime: Checkpointer (checkpointer.cc) calls these on
// rank 0 and turns their results into collectives.
//
// Crash safety: a checkpoint is written to a hidden temporary file in the same directory, fsync'd,
// renamed over its final name and the directory fsync'd. A reader therefore sees either no
// ckpt-<step>.safetensors or a complete one; a process killed mid-write leaves only a temporary
// file, which the next write_checkpoint_file in that directory removes. Files torn by other means
// (a disk that lies about fsync, a copy cut short) fail the checksum and are skipped by readers.
//
// Not thread-safe across calls on the same directory; one writer per directory.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "training/safetensors.h"

namespace hvd::training {

// "ckpt-000000000042.safetensors": the step zero padded to 12 digits (more digits when larger).
std::string checkpoint_file_name(int64_t step);
// The step of a checkpoint file name, or nullopt for any other name (temporary files included).
std::optional<int64_t> parse_checkpoint_file_name(std::string_view name);

struct CheckpointFile {
  int64_t step = 0;
  std::string path;
};

// The checkpoints in dir, newest (highest step) first. A missing directory has none; any other
// failure to read it throws hvd::Error.
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

// Writes tensors and metadata as dir/checkpoint_file_name(step), crash-safe (see above), creating
// dir and its parents if needed. metadata gets "checksum" and "checksum_algorithm" added. Throws
// hvd::InvalidArgumentError for bad tensors and hvd::Error naming the path, the call and errno's
// text for a file system failure; a failed write leaves no temporary file behind when it can.
// Returns the path written.
std::string write_checkpoint_file(const std::string& dir, int64_t step,
                                  const std::vector<TensorBytes>& tensors,
                                  std::map<std::string, std::string> metadata);

// Deletes the oldest checkpoints so that keep_last remain (keep_last <= 0 keeps all), never the
// one of step `keep`, and temporary files left by killed writers. Failures to delete are returned
// as warnings, not thrown: the checkpoint just written is safe either way.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep_last, int64_t keep);

// Opens path, parses and validates its header, and checks the checksum over the whole file by
// streaming it (memory: the header plus a fixed buffer). Throws hvd::Error naming the reason.
SafetensorsHeader read_verified_header(const std::string& path);

// Copies the tensors named in `targets` from path (already verified into `header`) into their
// memory, re-hashing the whole file as it goes so that what lands in memory is exactly what was
// verified. Every target must be in the header with the same dtype and shape (check_tensors_match).
// Throws hvd::Error on a read failure or if the file changed since it was verified.
void load_tensors(const std::string& path, const SafetensorsHeader& header,
                  const std::vector<TensorBytes>& targets);

// Throws hvd::InvalidArgumentError when a target is missing from the header or has another dtype or
// shape there; tensors in the file that no target names are allowed.
void check_tensors_match(const std::string& path, const SafetensorsHeader& header,
                         const std::vector<TensorBytes>& targets);

}  // namespace hvd::training
