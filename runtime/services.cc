#include "runtime/services.h"

namespace hvd {

SharedServices::SharedServices(const Config& config)
    : config_(config),
      test_hooks_(test_hooks_from_config(config_)),
      wake_(std::make_shared<detail::WakeSignal>()) {}

void SharedServices::stop_watchdog() {
  if (watchdog_) watchdog_->stop();
}

void SharedServices::stop_gpu_work() {
  copy_workers_.reset();  // joins the copy helpers (no op runs any more)
  if (gpu_backend_) gpu_backend_->shutdown();
}

void SharedServices::close_timeline() {
  if (timeline_) timeline_->close();
}

void SharedServices::free_communicators() {
  if (watchdog_) watchdog_->free_communicator();
  gpu_backend_.reset();
}

}  // namespace hvd
