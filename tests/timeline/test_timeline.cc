// The timeline's writer thread (runtime/timeline.h): it must not wake per event. Woken at every
// event, it took a core from the threads the timeline records, 2 to 4 times per tensor, and on
// rank 0 of 2 ranks on 2 cores it split bursts of 20 submissions that belong in one response
// (test_burst_fusion.k20.np2 failed in about one run in ten). Also: every event reaches the file,
// whether the writer wrote it on its period, on the queue's threshold, or at close().
#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "runtime/timeline.h"
#include "tests/support/thread_stats.h"

namespace hvd {
namespace {

using hvdtest::thread_ids;

// Times the thread was switched out (it slept, or lost its core): voluntary + nonvoluntary.
long switches(pid_t tid) { return hvdtest::context_switches(tid, /*voluntary_only=*/false); }

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string(name) + "." + std::to_string(::getpid()) + ".json"))
      .string();
}

TEST(Timeline, TheWriterDoesNotWakeForEachEvent) {
  const std::string path = temp_path("test_timeline_wake");
  const std::set<pid_t> before = thread_ids();
  {
    Timeline timeline(path, /*mark_cycles=*/false);
    pid_t writer = 0;
    for (pid_t t : thread_ids())
      if (!before.count(t)) writer = t;
    ASSERT_NE(writer, 0) << "the timeline started no thread";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the writer is waiting now
    const long at_start = switches(writer);
    // 200 operations, one every 200 us (a lone small all-reduce's pace): ~50 ms in all, less than
    // one write period.
    for (int i = 0; i < 200; ++i) {
      const std::string tensor = "grad." + std::to_string(i % 10);
      timeline.begin(tensor, "NEGOTIATE");
      timeline.end(tensor, "NEGOTIATE");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const long woken = switches(writer) - at_start;
    // A writer woken per event: about 200 to 400 switches here. The period allows one or two.
    EXPECT_LT(woken, 20) << "the timeline's writer thread was switched in and out " << woken
                         << " times for 400 events in ~50 ms";
    timeline.close();
  }
  const std::string text = read_all(path);
  EXPECT_EQ(count(text, "\"ph\":\"B\""), 200);
  EXPECT_EQ(count(text, "\"ph\":\"E\""), 200);
  EXPECT_EQ(count(text, "\"thread_name\""), 10);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n") << "not a closed JSON array";
  std::filesystem::remove(path);
}

TEST(Timeline, EveryEventReachesTheFilePastTheQueuesThreshold) {
  const std::string path = temp_path("test_timeline_many");
  constexpr int kEvents = 20000;  // several times the threshold that wakes the writer early
  {
    Timeline timeline(path, /*mark_cycles=*/true);
    for (int i = 0; i < kEvents; ++i) {
      timeline.begin("t" + std::to_string(i % 7), "OP", "{\"i\":" + std::to_string(i) + "}");
      timeline.end("t" + std::to_string(i % 7), "OP");
      if (i % 1000 == 0) timeline.mark_cycle();
    }
  }  // the destructor closes it
  const std::string text = read_all(path);
  EXPECT_EQ(count(text, "\"ph\":\"B\""), kEvents);
  EXPECT_EQ(count(text, "\"ph\":\"E\""), kEvents);
  EXPECT_EQ(count(text, "\"CYCLE\""), kEvents / 1000);
  EXPECT_NE(text.find("{\"i\":" + std::to_string(kEvents - 1) + "}"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hvd
