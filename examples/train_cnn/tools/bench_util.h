#pragma once

// What the in-process benchmarks of examples/train_cnn/tools share: the load average printed with
// each table, the median of per-round figures, process CPU time, and whole-number flag values.

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

namespace train_cnn::tools {

// "1-min 5-min 15-min" from /proc/loadavg ("" where unreadable).
inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The process's CPU time in seconds (steadier than wall time on a shared machine).
inline double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// `v` as a whole number from 1 to 100000, or -1.
inline long positive_or_minus_one(const std::string& v) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  return v.empty() || *end != '\0' || x < 1 || x > 100000 ? -1 : x;
}

}  // namespace train_cnn::tools
