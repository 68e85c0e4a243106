#include "runtime/timeline.h"

#include <pthread.h>

#include <cerrno>
#include <cstring>

#include "common/json_string.h"
#include "hvd/error.h"

namespace hvd {

Timeline::Timeline(const std::string& path, bool mark_cycles)
    : mark_cycles_(mark_cycles), start_(std::chrono::steady_clock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr)
    throw InvalidArgumentError("HVD_TIMELINE='" + path + "': cannot open it for writing (" +
                               std::strerror(errno) + "). Point it at a writable file path.");
  std::fputs("[\n", file_);
  push("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"hvd rank 0\"}}");
  thread_ = std::thread([this] { writer(); });
  pthread_setname_np(thread_.native_handle(), "hvd-timeline");
}

Timeline::~Timeline() { close(); }

int64_t Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_)
      .count();
}

int Timeline::row_of(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  queue_.push_back("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" +
                   std::to_string(row) + ",\"args\":{\"name\":" + json_string(tensor) + "}}");
  return row;
}

void Timeline::push(std::string event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) return;
  queue_.push_back(std::move(event));
  wake_writer_locked();
}

void Timeline::begin(const std::string& tensor, const std::string& activity,
                     const std::string& args_json) {
  const int64_t ts = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) return;
  int row = row_of(tensor);
  queue_.push_back("{\"name\":" + json_string(activity) + ",\"ph\":\"B\",\"ts\":" +
                   std::to_string(ts) + ",\"pid\":0,\"tid\":" + std::to_string(row) +
                   (args_json.empty() ? "" : ",\"args\":" + args_json) + "}");
  wake_writer_locked();
}

void Timeline::end(const std::string& tensor, const std::string& activity) {
  const int64_t ts = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) return;
  int row = row_of(tensor);
  queue_.push_back("{\"name\":" + json_string(activity) + ",\"ph\":\"E\",\"ts\":" +
                   std::to_string(ts) + ",\"pid\":0,\"tid\":" + std::to_string(row) + "}");
  wake_writer_locked();
}

void Timeline::mark_cycle() {
  if (!mark_cycles_) return;
  push("{\"name\":\"CYCLE\",\"ph\":\"i\",\"s\":\"p\",\"ts\":" + std::to_string(now_us()) +
       ",\"pid\":0,\"tid\":0}");
}

void Timeline::instant(const std::string& name, const std::string& args_json) {
  push("{\"name\":" + json_string(name) + ",\"ph\":\"i\",\"s\":\"p\",\"ts\":" +
       std::to_string(now_us()) + ",\"pid\":0,\"tid\":0,\"args\":" + args_json + "}");
}

// Not at every event: a writer woken per event (2 to 4 events per tensor) took a core from the
// threads the timeline records. On rank 0 of 2 ranks on 2 cores, a submitter that lost its core
// for longer than the fusion window split its burst of 20 all-reduces into several responses: up
// to 27 % of 200 bursts in one run (test_burst_fusion.k20.np2 failed about one run in ten). The
// writer now wakes every kWritePeriod, or early once kWakeAt events wait (docs/benchmarks.md).
void Timeline::wake_writer_locked() {
  if (queue_.size() == kWakeAt) cv_.notify_one();
}

void Timeline::writer() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait_for(lock, kWritePeriod, [&] { return closing_ || queue_.size() >= kWakeAt; });
    if (queue_.empty() && !closing_) continue;
    std::deque<std::string> batch;
    batch.swap(queue_);
    bool stop = closing_;
    lock.unlock();
    for (const auto& e : batch) {
      if (!first_) std::fputs(",\n", file_);
      first_ = false;
      std::fputs(e.c_str(), file_);
    }
    std::fflush(file_);
    lock.lock();
    if (stop && queue_.empty()) break;
  }
}

void Timeline::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (file_ == nullptr) return;
    closing_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

}  // namespace hvd
