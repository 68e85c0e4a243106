#pragma once

#include <stdexcept>
#include <string>

namespace hvd {

// Every failure hvd reports reaches the caller as an hvd::Error (or a subclass). what() is a full
// sentence: the operation, the tensor, the ranks and values involved, and how to fix it, e.g.
// "allreduce of 'fc1.weight' failed: rank 2 sent shape [128,64], rank 0 sent [128,32]. ..."
// docs/errors.md lists every message and its remedy.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The caller passed something that cannot work: a bad argument, mismatched tensors across ranks,
// a bad HVD_* value, a call before init() or after shutdown().
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// A foreign library (MPI, NCCL, CUDA) failed, or a peer rank was lost.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

// A bug in hvd itself: please report it with the message.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace hvd
