#pragma once

// Shared pieces of the GPU benchmarks (tests/gpu/bench): flag parsing in the manner of
// allreduce_bench (sizes with K/M/G suffixes, comma lists), the no-device skip (exit 77, as the gpu
// tests), a device header line, CUDA error checks and a small CSV writer that scripts/gpu-check
// reads. Header-only; CUDA runtime only.

#include <cuda_runtime_api.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpubench {

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

inline void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(rc) + ": " +
                             cudaGetErrorString(rc));
}

// "64M" -> 67108864 (K, M, G: powers of 1024), within [lo, hi].
inline int64_t parse_size(const std::string& flag, const std::string& text, int64_t lo,
                          int64_t hi) {
  std::string digits = text;
  int shift = 0;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      default:
        break;
    }
    if (shift) digits.pop_back();
  }
  char* end = nullptr;
  errno = 0;
  const long long v = digits.empty() ? -1 : std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || errno != 0 || v < 0 || v > (hi >> shift) ||
      (v << shift) < lo)
    throw UsageError(flag + " needs a size in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "] (K/M/G suffixes allowed), got '" + text + "'");
  return static_cast<int64_t>(v) << shift;
}

// "1,10,100" -> {1, 10, 100}.
inline std::vector<int64_t> parse_list(const std::string& flag, const std::string& text, int64_t lo,
                                       int64_t hi) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(parse_size(flag, text.substr(start, comma - start), lo, hi));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// argv walker: --flag VALUE or --flag=VALUE.
class Args {
 public:
  Args(int argc, char** argv, const char* program) : argc_(argc), argv_(argv), program_(program) {}
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    value_.clear();
    has_value_ = false;
    if (const auto eq = flag_.find('='); flag_.rfind("--", 0) == 0 && eq != std::string::npos) {
      value_ = flag_.substr(eq + 1);
      flag_ = flag_.substr(0, eq);
      has_value_ = true;
    }
    return true;
  }
  bool is(const char* a, const char* b = nullptr) const { return flag_ == a || (b && flag_ == b); }
  const std::string& flag() const { return flag_; }
  const std::string& value() {
    if (!has_value_) {
      if (i_ + 1 >= argc_) throw UsageError(flag_ + " needs a value");
      value_ = argv_[++i_];
      has_value_ = true;
    }
    return value_;
  }
  [[noreturn]] void unknown() const {
    throw UsageError("unknown flag '" + flag_ + "' (see the comment at the top of " + program_ +
                     "'s source)");
  }

 private:
  int argc_;
  char** argv_;
  const char* program_;
  int i_ = 0;
  std::string flag_, value_;
  bool has_value_ = false;
};

// 77 (ctest's skip code, as the gpu tests) with a message when no CUDA device is visible; else 0.
inline int skip_without_device(const char* program) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess || n == 0) {
    std::printf("SKIPPED: %s: no CUDA device visible (%s)\n", program,
                rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount returned 0");
    std::fflush(stdout);
    return 77;
  }
  return 0;
}

// Prints, e.g.:
//   # <title>
//   # device 0: NVIDIA H100 80GB HBM3, 132 SMs, 79.1 GiB; CUDA runtime 13000, driver 13000
inline void print_device_header(const char* title, int device = 0) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::printf("# %s\n# device %d: %s, %d SMs, %.1f GiB, cc %d.%d; CUDA runtime %d, driver %d\n",
              title, device, p.name, p.multiProcessorCount,
              static_cast<double>(p.totalGlobalMem) / (1u << 30), p.major, p.minor, rt, drv);
  std::fflush(stdout);
}

inline std::string fmt(double v, const char* f = "%.4f") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A CSV file with a header line; no file when the path is empty.
class Csv {
 public:
  Csv(const std::string& path, const std::string& header) {
    if (path.empty()) return;
    out_.open(path, std::ios::trunc);
    if (!out_) throw UsageError("--csv: cannot write '" + path + "'");
    out_ << header << '\n';
  }
  void row(std::initializer_list<std::string> cells) {
    if (!out_.is_open()) return;
    bool first = true;
    for (const auto& c : cells) {
      out_ << (first ? "" : ",") << c;
      first = false;
    }
    out_ << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

}  // namespace gpubench
