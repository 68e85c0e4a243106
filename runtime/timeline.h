#pragma once

// The timeline (HVD_TIMELINE=path): a Chrome trace (JSON array format, loads in Perfetto and
// chrome://tracing) written by rank 0, one row per tensor. Each tensor's row shows NEGOTIATE (from
// submission until every rank has it), QUEUE (until its batch starts), then the backend op
// (MPI_ALLREDUCE, ...) with, for fused batches, MEMCPY_IN_FUSION_BUFFER and
// MEMCPY_OUT_FUSION_BUFFER nested inside; tensors fused together show the same op span with the
// same `fused` argument. HVD_TIMELINE_MARK_CYCLES adds an instant event per background cycle.
//
// Off the hot path: callers format an event and push it on a queue; a writer thread does the
// file I/O, every kWritePeriod or once kWakeAt events wait (not woken per event: that took a core
// from the threads being recorded). The file is a valid JSON array once close() ran (shutdown, or
// the runtime's destructor when the job ends by error); a process killed outright loses at most
// the last kWritePeriod of events.
//
// Thread safety: every method may be called from any thread.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace hvd {

class Timeline {
 public:
  // Opens `path` for writing (throws InvalidArgumentError naming HVD_TIMELINE when it cannot).
  Timeline(const std::string& path, bool mark_cycles);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  void begin(const std::string& tensor, const std::string& activity,
             const std::string& args_json = "");
  void end(const std::string& tensor, const std::string& activity);
  void mark_cycle();
  // An instant event on the process's first row (scope "p": drawn across every row), with
  // `args_json` (an object) as its arguments: the straggler of a release (runtime/straggler.h).
  void instant(const std::string& name, const std::string& args_json);
  // Flushes, terminates the JSON array and closes the file. Idempotent.
  void close();

 private:
  static constexpr size_t kWakeAt = 4096;  // events waiting that wake the writer early
  static constexpr std::chrono::milliseconds kWritePeriod{100};

  void push(std::string event);
  void wake_writer_locked();              // under mu_, after an event was queued
  int row_of(const std::string& tensor);  // under mu_
  int64_t now_us() const;
  void writer();

  FILE* file_ = nullptr;
  bool mark_cycles_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::unordered_map<std::string, int> rows_;
  bool closing_ = false;
  bool first_ = true;
  std::thread thread_;
};

}  // namespace hvd
