#pragma once

// The shared state behind hvd::Handle. The background thread completes it (complete_one() once per
// tensor of the operation, or fail()); user threads wait on it. All members are guarded by mu.

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "hvd/tensor.h"

namespace hvd::detail {

enum class ErrorKind { kNone, kInvalidArgument, kCommunication, kInternal, kGeneric };

struct HandleState {
  explicit HandleState(int pending_tensors) : pending(pending_tensors) {}

  // One tensor of the operation finished (successfully).
  void complete_one();
  // The operation failed: every waiter throws this message. The first failure wins.
  void fail(ErrorKind kind, const std::string& message);
  void set_join_result(int rank);

  std::mutex mu;
  std::condition_variable cv;
  int pending;
  bool done = false;
  ErrorKind error_kind = ErrorKind::kNone;
  std::string error;
  Tensor output;                         // allgather / alltoall / reducescatter result
  std::vector<int64_t> received_splits;  // alltoall
  int join_result = -1;
};

// Maps an exception caught on the background thread to (kind, message).
std::pair<ErrorKind, std::string> classify(const std::exception& e);
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace hvd::detail
