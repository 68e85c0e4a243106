#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hvd/error.h"
#include "model/init.h"

namespace train_cnn::data {
namespace {

// A class's object, in coordinates relative to the image (0..1).
struct Shape {
  double cy, cx;      // centre
  double ry, rx;      // radii
  double brightness;  // at the centre
  double gy, gx;      // linear shading across the ellipse: brightness x (1 + gy*dy + gx*dx)
};

}  // namespace

Dataset make_synthetic(int64_t count, uint64_t sample_seed, const SyntheticOptions& o) {
  if (count < 0 || o.rows <= 0 || o.cols <= 0 || o.num_classes <= 0 || !(o.noise >= 0.0f) ||
      !(o.jitter >= 0.0f)) {
    throw hvd::InvalidArgumentError(
        "make_synthetic: count must be >= 0, rows, cols and num_classes > 0 and noise and jitter "
        ">= 0; got count " +
        std::to_string(count) + ", " + std::to_string(o.rows) + "x" + std::to_string(o.cols) +
        ", " + std::to_string(o.num_classes) + " classes, noise " + std::to_string(o.noise) +
        ", jitter " + std::to_string(o.jitter) + ".");
  }
  Dataset set;
  set.count = count;
  set.channels = 1;
  set.rows = o.rows;
  set.cols = o.cols;
  set.num_classes = o.num_classes;
  const int64_t size = set.image_size();

  // Brightness 0.3-0.54 at the centre, shaded +-40 %: the mean pixel of a set is ~0.1, below
  // Fashion-MNIST's 0.29; brighter objects (0.5-0.9) made 8 replicas at the capped rate 0.4
  // diverge even sooner.
  model::InitRng pattern_rng(o.pattern_seed);
  std::vector<Shape> shapes(static_cast<size_t>(o.num_classes));
  for (Shape& s : shapes) {
    s.cy = 0.5 + 0.15 * (pattern_rng.uniform01() - 0.5);
    s.cx = 0.5 + 0.15 * (pattern_rng.uniform01() - 0.5);
    s.ry = 0.2 + 0.2 * pattern_rng.uniform01();
    s.rx = 0.2 + 0.2 * pattern_rng.uniform01();
    s.brightness = 0.3 * (1 + 0.8 * pattern_rng.uniform01());
    const double angle = 6.283185307179586 * pattern_rng.uniform01();
    s.gy = 0.4 * std::sin(angle);
    s.gx = 0.4 * std::cos(angle);
  }

  model::InitRng rng(sample_seed);
  set.images.resize(static_cast<size_t>(count * size));
  set.labels.resize(static_cast<size_t>(count));
  const double j = o.jitter;
  for (int64_t i = 0; i < count; ++i) {
    const auto label =
        std::min<int32_t>(static_cast<int32_t>(rng.uniform01() * o.num_classes), o.num_classes - 1);
    set.labels[i] = label;
    const Shape& s = shapes[static_cast<size_t>(label)];
    // Draws in a fixed order whatever the options, so that a set is a function of its seeds.
    const double cy = s.cy + 0.5 * j * rng.normal(), cx = s.cx + 0.5 * j * rng.normal();
    const double ry = s.ry * (1 + j * rng.normal()), rx = s.rx * (1 + j * rng.normal());
    const double brightness = s.brightness * (1 + j * rng.normal());
    float* img = set.images.data() + i * size;
    for (int y = 0; y < o.rows; ++y) {
      for (int x = 0; x < o.cols; ++x) {
        const double dy = ((y + 0.5) / o.rows - cy) / ry, dx = ((x + 0.5) / o.cols - cx) / rx;
        float v = 0.0f;
        if (dy * dy + dx * dx <= 1.0) {
          const double shade = brightness * (1 + s.gy * dy + s.gx * dx);
          v = std::clamp(static_cast<float>(shade + o.noise * rng.normal()), 0.0f, 1.0f);
        }
        img[y * o.cols + x] = v;
      }
    }
  }
  return set;
}

}  // namespace train_cnn::data
