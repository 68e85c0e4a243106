#pragma once

// Command-line options of the trainer_port trainers (both accept the same flags):
//   --steps N          SGD steps (default 300)
//   --global-batch N   samples per step, over all workers (default 96)
//   --lr X             learning rate (default 0.5)
//   --seed N           seed of the data, the initial weights and the shuffling (default 1)
//   --weights-out PATH write the final weights (one value per line) to PATH
// Flags take their value as the next argument or after '=' (--steps=100).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace trainer_port {

struct Options {
  int64_t steps = 300;
  int64_t global_batch = 96;
  float lr = 0.5f;
  uint64_t seed = 1;
  std::string weights_out;
  // Fixed shape of the synthetic problem.
  int64_t num_samples = 4096;
  int64_t num_features = 32;
};

inline const char* kUsage =
    "usage: %s [--steps N] [--global-batch N] [--lr X] [--seed N] [--weights-out PATH]\n";

namespace detail {
inline int64_t parse_int(const std::string& flag, const std::string& value, int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < min) {
    throw std::invalid_argument(flag + " needs an integer >= " + std::to_string(min) + ", got '" +
                                value + "'");
  }
  return v;
}
}  // namespace detail

// Parses argv; throws std::invalid_argument naming the flag and the value on bad input.
// --help prints the usage and exits 0.
inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::printf(kUsage, argv[0]);
      std::exit(0);
    }
    if (const auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw std::invalid_argument(flag + " needs a value (see --help)");
    }
    if (flag == "--steps") {
      o.steps = detail::parse_int(flag, value, 0);
    } else if (flag == "--global-batch") {
      o.global_batch = detail::parse_int(flag, value, 1);
    } else if (flag == "--seed") {
      o.seed = static_cast<uint64_t>(detail::parse_int(flag, value, 0));
    } else if (flag == "--lr") {
      char* end = nullptr;
      o.lr = std::strtof(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(o.lr > 0)) {
        throw std::invalid_argument("--lr needs a positive number, got '" + value + "'");
      }
    } else if (flag == "--weights-out") {
      o.weights_out = value;
    } else {
      throw std::invalid_argument("unknown flag '" + flag + "' (see --help)");
    }
  }
  if (o.global_batch > o.num_samples) {
    throw std::invalid_argument("--global-batch " + std::to_string(o.global_batch) +
                                " is larger than the data set (" + std::to_string(o.num_samples) +
                                " samples)");
  }
  return o;
}

// The samples each of `workers` workers takes from a global batch: global_batch / workers.
// The division must be exact, so that every worker's mean gradient weighs the same and their
// average is the mean gradient of the global batch.
inline int64_t local_batch_size(int64_t global_batch, int workers) {
  if (global_batch % workers != 0) {
    throw std::invalid_argument("--global-batch " + std::to_string(global_batch) +
                                " is not divisible by the " + std::to_string(workers) +
                                " workers; pick a multiple of " + std::to_string(workers));
  }
  return global_batch / workers;
}

}  // namespace trainer_port
