#pragma once

// Size checks shared by the layers: a buffer that does not match the layer's shape is a caller bug
// that would otherwise read or write out of bounds, so it is reported with both sizes.

#include <cstdint>
#include <string>

#include "hvd/error.h"

namespace train_cnn::model {

inline void check_buffer_size(const char* layer, const char* buffer, int64_t got, int64_t want) {
  if (got != want) {
    throw hvd::InvalidArgumentError(std::string(layer) + ": buffer '" + buffer + "' holds " +
                                    std::to_string(got) + " floats, the layer needs " +
                                    std::to_string(want) +
                                    " (batch x per-sample size); check the batch size and shapes.");
  }
}

inline void check_positive(const char* layer, const char* what, int64_t value) {
  if (value <= 0) {
    throw hvd::InvalidArgumentError(std::string(layer) + ": " + what + " must be > 0, got " +
                                    std::to_string(value) + ".");
  }
}

}  // namespace train_cnn::model
