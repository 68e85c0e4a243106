#pragma once

// The metrics file for plotting: one CSV, a header and two kinds of rows.
//   kind,epoch,step,loss,accuracy,images_per_s,lr,wait_share,test_loss,test_accuracy,slow_rank,
//     lateness_ms
//   step,1,1,2.3026,0.1094,1630.2,0.05,0.031,,,-1,0.412    one per optimizer step (its values)
//   epoch,1,937,0.4521,0.8390,1702.5,0.05,0.029,0.3610,0.8725,,   one per epoch (epoch means)
// epoch is 1-based, step is the global optimizer step (1 after the first). images_per_s counts
// the images of all replicas; wait_share is the share of step time spent waiting for the gradient
// all-reduces. test_* are empty when the epoch was not evaluated. slow_rank and lateness_ms are
// the step's hvd::straggler_report(): the rank named (-1: none beyond HVD_STRAGGLER_THRESHOLD_MS)
// and the step's largest lateness in milliseconds (whoever was last); empty on epoch rows.
//
// Written by rank 0 only. A resumed run appends to an existing file (without a second header), so
// the file of an interrupted and resumed job covers every step once; a fresh run truncates it.
// Step rows are buffered and flushed at each epoch end. Not thread-safe.

#include <cstdio>
#include <string>

#include "progress.h"

namespace train_cnn {

class MetricsCsv {
 public:
  MetricsCsv() = default;  // writes nothing
  // Opens path (append: keep existing rows). Throws hvd::InvalidArgumentError naming the path and
  // the system's reason when it cannot be opened.
  MetricsCsv(const std::string& path, bool append);
  ~MetricsCsv();
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;
  MetricsCsv(MetricsCsv&& other) noexcept;
  MetricsCsv& operator=(MetricsCsv&& other) noexcept;

  bool active() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // this_step_images_per_s and this_step_wait_share: the values of this step alone.
  void step(const StepStats& s, double this_step_images_per_s, double this_step_wait_share);
  void epoch(const EpochStats& e);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace train_cnn
