#include "metrics_csv.h"

#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <utility>

#include "hvd/error.h"

namespace train_cnn {

MetricsCsv::MetricsCsv(const std::string& path, bool append) : path_(path) {
  struct stat st {};
  const bool has_rows = append && ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_)
    throw hvd::InvalidArgumentError(
        "cannot open the metrics file '" + path + "' for writing: " + std::strerror(errno) +
        ". Pass --metrics-csv with a writable path, or --metrics-csv none.");
  if (!has_rows)
    std::fprintf(file_,
                 "kind,epoch,step,loss,accuracy,images_per_s,lr,wait_share,test_loss,test_accuracy,"
                 "slow_rank,lateness_ms\n");
  std::fflush(file_);
}

MetricsCsv::~MetricsCsv() {
  if (file_) std::fclose(file_);
}

MetricsCsv::MetricsCsv(MetricsCsv&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

MetricsCsv& MetricsCsv::operator=(MetricsCsv&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MetricsCsv::step(const StepStats& s, double this_step_images_per_s,
                      double this_step_wait_share) {
  if (!file_) return;
  std::fprintf(file_, "step,%d,%lld,%.9g,%.6g,%.6g,%.9g,%.6g,,,%d,%.3f\n", s.epoch + 1,
               static_cast<long long>(s.global_step), s.loss, s.accuracy, this_step_images_per_s,
               s.lr, this_step_wait_share, s.slow_rank, s.lateness_ms);
}

void MetricsCsv::epoch(const EpochStats& e) {
  if (!file_) return;
  std::fprintf(file_, "epoch,%d,%lld,%.9g,%.6g,%.6g,%.9g,%.6g,", e.epoch + 1,
               static_cast<long long>(e.global_step), e.train_loss, e.train_accuracy,
               e.images_per_s, e.lr, e.wait_share);
  if (e.evaluated)
    std::fprintf(file_, "%.9g,%.6g,,\n", e.test_loss, e.test_accuracy);
  else
    std::fprintf(file_, ",,,\n");
  std::fflush(file_);
}

}  // namespace train_cnn
