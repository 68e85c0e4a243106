#include "data/synthetic.h"

#include <algorithm>
#include <string>

#include "hvd/error.h"
#include "model/init.h"

namespace train_cnn::data {

Dataset make_synthetic(int64_t count, uint64_t sample_seed, const SyntheticOptions& o) {
  if (count < 0 || o.rows <= 0 || o.cols <= 0 || o.num_classes <= 0 || !(o.noise >= 0.0f)) {
    throw hvd::InvalidArgumentError(
        "make_synthetic: count must be >= 0, rows, cols and num_classes > 0 and noise >= 0; got "
        "count " +
        std::to_string(count) + ", " + std::to_string(o.rows) + "x" + std::to_string(o.cols) +
        ", " + std::to_string(o.num_classes) + " classes, noise " + std::to_string(o.noise) + ".");
  }
  Dataset set;
  set.count = count;
  set.channels = 1;
  set.rows = o.rows;
  set.cols = o.cols;
  set.num_classes = o.num_classes;
  const int64_t size = set.image_size();

  model::InitRng pattern_rng(o.pattern_seed);
  std::vector<float> prototypes(static_cast<size_t>(o.num_classes * size));
  for (float& p : prototypes) p = static_cast<float>(pattern_rng.uniform01());

  model::InitRng rng(sample_seed);
  set.images.resize(static_cast<size_t>(count * size));
  set.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto label =
        std::min<int32_t>(static_cast<int32_t>(rng.uniform01() * o.num_classes), o.num_classes - 1);
    set.labels[i] = label;
    const float* proto = prototypes.data() + label * size;
    float* img = set.images.data() + i * size;
    for (int64_t j = 0; j < size; ++j) {
      const float v = proto[j] + o.noise * static_cast<float>(rng.normal());
      img[j] = std::clamp(v, 0.0f, 1.0f);
    }
  }
  return set;
}

}  // namespace train_cnn::data
