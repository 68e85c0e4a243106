#include "progress.h"

#include <unistd.h>

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

void Progress::step(const StepStats& s) {
  if (!enabled_) return;
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
    std::printf("\repoch %d/%d [%s] %lld/%lld loss %.4f acc %.4f %.0f img/s wait %.1f%%\033[K",
                s.epoch + 1, s.epochs, bar.c_str(), static_cast<long long>(s.step_in_epoch),
                static_cast<long long>(s.steps_in_epoch), s.epoch_loss, s.epoch_accuracy,
                s.images_per_s, 100.0 * s.wait_share);
    std::fflush(stdout);
    bar_open_ = true;
    return;
  }
  if (!terminal_ && (s.step_in_epoch % log_every_ == 0) && !last_of_epoch) {
    std::printf(
        "epoch %d/%d step %lld/%lld (total %lld): loss %.4f acc %.4f lr %.5g %.1f img/s "
        "wait %.1f%%\n",
        s.epoch + 1, s.epochs, static_cast<long long>(s.step_in_epoch),
        static_cast<long long>(s.steps_in_epoch), static_cast<long long>(s.global_step),
        s.epoch_loss, s.epoch_accuracy, s.lr, s.images_per_s, 100.0 * s.wait_share);
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
