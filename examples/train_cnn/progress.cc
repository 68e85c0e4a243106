#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace train_cnn {

bool stdout_is_terminal() {
  if (::isatty(STDOUT_FILENO) != 1) return false;
  if (std::getenv("OMPI_COMM_WORLD_RANK") == nullptr) return true;
  const std::string fd = "/proc/" + std::to_string(::getppid()) + "/fd/1";
  char target[256];
  const ssize_t n = ::readlink(fd.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  const std::string t(target, static_cast<size_t>(n));
  return t.rfind("/dev/pts/", 0) == 0 || t.rfind("/dev/tty", 0) == 0;
}

Progress::Progress(bool enabled, bool terminal, int log_every, bool log_steps)
    : enabled_(enabled), terminal_(terminal), log_every_(log_every), log_steps_(log_steps) {}

Progress::~Progress() {
  if (enabled_) end_bar();
}

void Progress::end_bar() {
  if (!bar_open_) return;
  std::fputc('\n', stdout);
  std::fflush(stdout);
  bar_open_ = false;
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  end_bar();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

// Counts the step's named rank; the text for the line (the bar: this step's; a plain line: the
// steps since the last one, whose counts it then clears).
std::string Progress::straggler_text(const StepStats& s) {
  char buf[96];
  if (terminal_ && !log_steps_) {
    if (s.slow_rank < 0) return "last -";
    std::snprintf(buf, sizeof buf, "last r%d +%.1fms", s.slow_rank, s.lateness_ms);
    return buf;
  }
  int best = -1;
  for (size_t r = 0; r < named_since_line_.size(); ++r)
    if (named_since_line_[r] > 0 && (best < 0 || named_since_line_[r] > named_since_line_[best]))
      best = static_cast<int>(r);
  std::string out = "last -";
  if (best >= 0) {
    std::snprintf(buf, sizeof buf, "last r%d in %lld/%lld steps, up to +%.1fms", best,
                  static_cast<long long>(named_since_line_[best]),
                  static_cast<long long>(steps_since_line_), worst_ms_since_line_[best]);
    out = buf;
  }
  steps_since_line_ = 0;
  std::fill(named_since_line_.begin(), named_since_line_.end(), 0);
  std::fill(worst_ms_since_line_.begin(), worst_ms_since_line_.end(), 0.0);
  return out;
}

void Progress::step(const StepStats& s) {
  if (!enabled_) return;
  ++steps_since_line_;
  if (s.slow_rank >= 0) {
    const auto r = static_cast<size_t>(s.slow_rank);
    if (named_since_line_.size() <= r) {
      named_since_line_.resize(r + 1, 0);
      worst_ms_since_line_.resize(r + 1, 0.0);
    }
    ++named_since_line_[r];
    worst_ms_since_line_[r] = std::max(worst_ms_since_line_[r], s.lateness_ms);
  }
  if (log_steps_) {
    // One parseable line per step: the tests compare these across runs.
    end_bar();
    std::printf("step %lld loss %.9g accuracy %.6f lr %.9g\n",
                static_cast<long long>(s.global_step), s.loss, s.accuracy, s.lr);
    std::fflush(stdout);
  }
  const bool last_of_epoch = s.step_in_epoch == s.steps_in_epoch;
  if (terminal_ && !log_steps_) {
    const auto now = std::chrono::steady_clock::now();
    if (!last_of_epoch && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = s.steps_in_epoch > 0
                           ? static_cast<int>(kWidth * s.step_in_epoch / s.steps_in_epoch)
                           : kWidth;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    // \033[K clears what a longer previous line left behind.
    std::printf("\repoch %d/%d [%s] %lld/%lld loss %.4f acc %.4f %.0f img/s wait %.1f%% %s\033[K",
                s.epoch + 1, s.epochs, bar.c_str(), static_cast<long long>(s.step_in_epoch),
                static_cast<long long>(s.steps_in_epoch), s.epoch_loss, s.epoch_accuracy,
                s.images_per_s, 100.0 * s.wait_share, straggler_text(s).c_str());
    std::fflush(stdout);
    bar_open_ = true;
    return;
  }
  if (!terminal_ && (s.step_in_epoch % log_every_ == 0) && !last_of_epoch) {
    std::printf(
        "epoch %d/%d step %lld/%lld (total %lld): loss %.4f acc %.4f lr %.5g %.1f img/s "
        "wait %.1f%% %s\n",
        s.epoch + 1, s.epochs, static_cast<long long>(s.step_in_epoch),
        static_cast<long long>(s.steps_in_epoch), static_cast<long long>(s.global_step),
        s.epoch_loss, s.epoch_accuracy, s.lr, s.images_per_s, 100.0 * s.wait_share,
        straggler_text(s).c_str());
    std::fflush(stdout);
  }
}

void Progress::epoch_end(const EpochStats& e) {
  if (!enabled_) return;
  end_bar();
  char buf[512];
  if (e.evaluated)
    std::snprintf(buf, sizeof buf,
                  "epoch %d/%d done (step %lld): train loss %.4f acc %.4f | test loss %.4f "
                  "accuracy %.4f | lr %.5g, %.1f img/s, wait %.1f%%, %.1f s",
                  e.epoch + 1, e.epochs, static_cast<long long>(e.global_step), e.train_loss,
                  e.train_accuracy, e.test_loss, e.test_accuracy, e.lr, e.images_per_s,
                  100.0 * e.wait_share, e.seconds);
  else
    std::snprintf(buf, sizeof buf,
                  "epoch %d/%d done (step %lld): train loss %.4f acc %.4f | lr %.5g, %.1f img/s, "
                  "wait %.1f%%, %.1f s",
                  e.epoch + 1, e.epochs, static_cast<long long>(e.global_step), e.train_loss,
                  e.train_accuracy, e.lr, e.images_per_s, 100.0 * e.wait_share, e.seconds);
  std::printf("%s\n", buf);
  std::fflush(stdout);
}

}  // namespace train_cnn
