#pragma once

// This process's threads as /proc/self/task shows them, for the tests that count how often a
// thread of hvd's slept or lost its core (tests/timeline/test_timeline.cc: the timeline's writer;
// tests/runtime/test_lane_window.cc: the background thread during a burst). Linux only.
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace hvdtest {

inline std::set<pid_t> thread_ids() {
  std::set<pid_t> ids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    ids.insert(static_cast<pid_t>(std::stol(e.path().filename().string())));
  return ids;
}

// The thread whose name (/proc/self/task/<tid>/comm) is `name`; 0 when there is none.
inline pid_t thread_named(const std::string& name) {
  for (pid_t tid : thread_ids()) {
    std::ifstream comm("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::string n;
    if (std::getline(comm, n) && n == name) return tid;
  }
  return 0;
}

// Times the thread was switched out: it slept (voluntary), or also lost its core (`voluntary_only`
// false). 0 for a thread that is gone.
inline long context_switches(pid_t tid, bool voluntary_only) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/status");
  long total = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    long n = 0;
    if (fields >> key >> n && (key == "voluntary_ctxt_switches:" ||
                               (!voluntary_only && key == "nonvoluntary_ctxt_switches:")))
      total += n;
  }
  return total;
}

}  // namespace hvdtest
