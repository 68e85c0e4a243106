// Activation recomputation of the train_cnn model (ModelOptions::recompute, model/recompute.h):
// gradients, losses and logits bitwise those of a model that keeps every activation (every block
// choice, several batch sizes, random initialisations, a few SGD steps, batch sizes changing
// between steps), the on_grad_ready protocol unchanged, and the graph's own activation accounting
// (model/activation_ledger.h): the peak held during a step and the bytes allocated, against
// values computed here from the layer shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "hvd/error.h"
#include "model/activation_ledger.h"
#include "model/init.h"
#include "model/model.h"
#include "model/recompute.h"
#include "model/sgd_momentum.h"

namespace cm = train_cnn::model;

namespace {

// A small network of the same structure: 8x8 input, 3x3 kernels, few channels.
cm::ModelOptions small_options() {
  cm::ModelOptions o;
  o.height = 8;
  o.width = 8;
  o.conv1_channels = 3;
  o.conv2_channels = 4;
  o.kernel = 3;
  o.hidden = 9;
  o.num_classes = 5;
  return o;
}

std::vector<float> random_images(int64_t n, uint64_t seed) {
  cm::InitRng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform01());
  return v;
}

std::vector<int32_t> random_labels(int n, int classes, uint64_t seed) {
  cm::InitRng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.uniform01() * classes) % classes;
  return v;
}

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<cm::RecomputeBlocks> every_choice() {
  std::vector<cm::RecomputeBlocks> out;
  for (int mask = 1; mask < 8; ++mask)
    out.push_back({.conv1 = (mask & 1) != 0, .conv2 = (mask & 2) != 0, .fc = (mask & 4) != 0});
  return out;
}

cm::ModelOptions with(cm::ModelOptions o, cm::RecomputeBlocks r) {
  o.recompute = r;
  return o;
}

// Per-image floats of each activation, from the shapes (not from the graph).
struct Shapes {
  int64_t input, a1, p1, a2, p2, h, logits;
  explicit Shapes(const cm::ModelOptions& o)
      : input(int64_t{o.in_channels} * o.height * o.width),
        a1(int64_t{o.conv1_channels} * o.height * o.width),
        p1(int64_t{o.conv1_channels} * (o.height / 2) * (o.width / 2)),
        a2(int64_t{o.conv2_channels} * (o.height / 2) * (o.width / 2)),
        p2(int64_t{o.conv2_channels} * (o.height / 4) * (o.width / 4)),
        h(o.hidden),
        logits(o.num_classes) {}
  int64_t all() const { return input + a1 + p1 + a2 + p2 + h + logits; }
};

// One step of kept against recomputed on two models with the same parameters: loss bits, logits,
// every gradient, and the order and values of the on_grad_ready calls.
void expect_same_step(cm::Model& kept, cm::Model& recomputed, int batch, uint64_t seed,
                      const std::string& what) {
  SCOPED_TRACE(what + ", batch " + std::to_string(batch) + ", seed " + std::to_string(seed));
  const std::vector<float> images = random_images(batch * kept.input_size(), seed);
  const std::vector<int32_t> labels = random_labels(batch, kept.num_classes(), seed + 1);
  std::vector<cm::LossResult> loss;
  std::vector<std::vector<size_t>> order(2);
  std::vector<std::vector<std::vector<float>>> at_ready(2);
  cm::Model* models[2] = {&kept, &recomputed};
  for (int k = 0; k < 2; ++k) {
    cm::Model& m = *models[k];
    m.zero_gradients();
    loss.push_back(m.forward(images, labels, batch));
    at_ready[k].resize(m.parameters().size());
    m.backward([&, k](size_t i) {
      order[k].push_back(i);
      const auto& g = models[k]->parameters()[i].gradient;
      at_ready[k][i].assign(g.begin(), g.end());
    });
  }
  EXPECT_EQ(std::memcmp(&loss[0].loss, &loss[1].loss, sizeof(double)), 0)
      << loss[0].loss << " vs " << loss[1].loss;
  EXPECT_EQ(loss[0].correct, loss[1].correct);
  EXPECT_TRUE(bitwise_equal(kept.logits(), recomputed.logits()));
  EXPECT_EQ(order[0], (std::vector<size_t>{7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(order[1], order[0]);
  for (size_t i = 0; i < kept.parameters().size(); ++i) {
    EXPECT_TRUE(bitwise_equal(kept.parameters()[i].gradient, recomputed.parameters()[i].gradient))
        << kept.parameters()[i].name;
    EXPECT_TRUE(bitwise_equal(at_ready[0][i], at_ready[1][i]))
        << kept.parameters()[i].name << " at its on_grad_ready";
  }
}

TEST(CnnRecompute, EveryBlockChoiceGivesBitwiseTheGradientsOfKeptActivations) {
  uint64_t seed = 100;
  for (const cm::RecomputeBlocks& r : every_choice()) {
    for (int batch : {1, 2, 7, 16}) {
      cm::Model kept(small_options()), recomputed(with(small_options(), r));
      kept.initialize(seed);
      recomputed.initialize(seed);
      expect_same_step(kept, recomputed, batch, seed + 1, "recompute " + cm::describe(r));
      seed += 3;
    }
  }
}

TEST(CnnRecompute, TheRealModelGivesBitwiseTheSameGradients) {
  const cm::ModelOptions o;  // 28x28, 32 and 64 channels, hidden 512
  for (const cm::RecomputeBlocks& r :
       {cm::RecomputeBlocks::all(), cm::RecomputeBlocks{.conv1 = true}}) {
    for (int batch : {1, 5}) {
      cm::Model kept(o), recomputed(with(o, r));
      kept.initialize(7 + batch);
      recomputed.initialize(7 + batch);
      expect_same_step(kept, recomputed, batch, 20 + batch, "recompute " + cm::describe(r));
    }
  }
}

TEST(CnnRecompute, SgdStepsWithChangingBatchSizesStayBitwiseEqual) {
  // The buffers grow between steps (3, then 9, then 4 within the capacity of 9): the scratch and
  // the kept buffers must not leak values from one step into the next.
  for (const cm::RecomputeBlocks& r : every_choice()) {
    cm::Model kept(small_options()), recomputed(with(small_options(), r));
    kept.initialize(31);
    recomputed.initialize(31);
    cm::SgdMomentum opt_kept(kept.num_parameters(), {.momentum = 0.9f, .weight_decay = 5e-4f});
    cm::SgdMomentum opt_rec(recomputed.num_parameters(), {.momentum = 0.9f, .weight_decay = 5e-4f});
    uint64_t seed = 40;
    for (int batch : {3, 9, 4, 9, 1}) {
      expect_same_step(kept, recomputed, batch, seed, "recompute " + cm::describe(r));
      opt_kept.step(kept.flat_parameters(), kept.flat_gradients(), 0.05f);
      opt_rec.step(recomputed.flat_parameters(), recomputed.flat_gradients(), 0.05f);
      seed += 2;
    }
    EXPECT_TRUE(bitwise_equal(kept.flat_parameters(), recomputed.flat_parameters()))
        << "recompute " << cm::describe(r);
  }
}

TEST(CnnRecompute, EmulatedBf16AndFp16WithALossScaleStayBitwiseEqual) {
  // --precision rounds the conv and dense outputs (model/precision.h): the recomputed forward
  // rounds them again, to the same bits.
  for (cm::Precision p : {cm::Precision::kBf16, cm::Precision::kFp16}) {
    cm::ModelOptions o = small_options();
    o.precision = p;
    cm::Model kept(o), recomputed(with(o, cm::RecomputeBlocks::all()));
    kept.initialize(61);
    recomputed.initialize(61);
    kept.set_loss_scale(1024.0f);
    recomputed.set_loss_scale(1024.0f);
    expect_same_step(kept, recomputed, 6, 62, std::string("precision ") + cm::precision_name(p));
  }
}

TEST(CnnRecompute, EvaluateAndEmptyBatchesWork) {
  cm::Model kept(small_options()), recomputed(with(small_options(), cm::RecomputeBlocks::all()));
  kept.initialize(5);
  recomputed.initialize(5);
  const int count = 23;
  const std::vector<float> images = random_images(count * kept.input_size(), 6);
  const std::vector<int32_t> labels = random_labels(count, kept.num_classes(), 7);
  const cm::Evaluation a = kept.evaluate(images, labels, count, 8);
  const cm::Evaluation b = recomputed.evaluate(images, labels, count, 8);
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0);
  EXPECT_EQ(a.accuracy, b.accuracy);
  recomputed.zero_gradients();
  EXPECT_EQ(recomputed.forward({}, {}, 0).loss, 0.0);
  recomputed.backward();
  for (float g : recomputed.flat_gradients()) EXPECT_EQ(g, 0.0f);
  EXPECT_EQ(recomputed.activation_memory().peak_bytes, 0);
}

// Peak and allocated activation bytes of one step, for batch images.
cm::ActivationMemory step_memory(const cm::ModelOptions& o, int batch) {
  cm::Model m(o);
  m.initialize(1);
  const std::vector<float> images = random_images(batch * m.input_size(), 2);
  const std::vector<int32_t> labels = random_labels(batch, m.num_classes(), 3);
  m.zero_gradients();
  m.forward(images, labels, batch);
  m.backward();
  return m.activation_memory();
}

TEST(CnnRecompute, PeakActivationBytesFallAsTheLedgerCountsThem) {
  const cm::ModelOptions o;  // the real model: a1 (conv1's output) is the largest activation
  const Shapes s(o);
  constexpr int64_t kFloat = sizeof(float);
  for (int batch : {1, 4, 64}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const int64_t n = batch * kFloat;
    const cm::ActivationMemory none = step_memory(o, batch);
    // Kept: everything is held at the end of the forward pass.
    EXPECT_EQ(none.peak_bytes, n * s.all());
    EXPECT_EQ(none.reserved_bytes, n * s.all());
    EXPECT_EQ(none.held_bytes, n * s.logits);  // after backward only the step's logits

    // All recomputed: the most is held while conv1's block runs (its input, a1, p1) plus the
    // logits during the backward pass; the inner activations share a1's place, the largest.
    const cm::ActivationMemory all = step_memory(with(o, cm::RecomputeBlocks::all()), batch);
    EXPECT_EQ(all.peak_bytes, n * (s.input + s.a1 + s.p1 + s.logits));
    EXPECT_EQ(all.reserved_bytes, n * (s.input + s.p1 + s.p2 + s.logits + s.a1));
    EXPECT_EQ(all.held_bytes, n * s.logits);
    EXPECT_LT(all.peak_bytes, none.peak_bytes * 7 / 10);  // 0.665 of it with these shapes

    // conv1 alone frees the same peak (a2, p2 and h together are smaller than a1) and the same
    // allocation: a2 and h, kept, take a1's place (a2 + h < a1).
    const cm::ActivationMemory conv1 = step_memory(with(o, {.conv1 = true}), batch);
    EXPECT_EQ(conv1.peak_bytes, all.peak_bytes);
    ASSERT_LT(s.a2 + s.h, s.a1);
    EXPECT_EQ(conv1.reserved_bytes, all.reserved_bytes);

    // conv2 alone: while conv2's block re-runs, a1 is still held; only h is never held with it.
    const cm::ActivationMemory conv2 = step_memory(with(o, {.conv2 = true}), batch);
    EXPECT_EQ(conv2.peak_bytes, n * (s.all() - s.h));

    // fc alone: recomputed last, when everything before it is still held: no saving.
    const cm::ActivationMemory fc = step_memory(with(o, {.fc = true}), batch);
    EXPECT_EQ(fc.peak_bytes, none.peak_bytes);
  }
}

TEST(CnnRecompute, InnerActivationsShareOneStackOfPlaces) {
  // A kept inner activation takes the place above the kept ones before it; a recomputed one only
  // borrows the top: the buffer is the highest top reached.
  cm::ModelOptions o = small_options();
  o.hidden = 100;  // a1 = 3 x 8 x 8 = 192, a2 = 4 x 4 x 4 = 64, h = 100
  const Shapes s(o);
  ASSERT_EQ(s.a1, 192);
  ASSERT_EQ(s.a2, 64);
  const int batch = 3;
  const int64_t n = batch * int64_t{sizeof(float)};
  const int64_t outer = s.input + s.p1 + s.p2 + s.logits;
  auto reserved = [&](cm::RecomputeBlocks r) {
    return step_memory(with(o, r), batch).reserved_bytes;
  };
  EXPECT_EQ(reserved({}), n * (outer + s.a1 + s.a2 + s.h));            // separate
  EXPECT_EQ(reserved({.fc = true}), n * (outer + s.a1 + s.a2 + s.h));  // h on top
  EXPECT_EQ(reserved({.conv2 = true}), n * (outer + s.a1 + s.h));      // a2, h above a1
  EXPECT_EQ(reserved({.conv2 = true, .fc = true}), n * (outer + s.a1 + s.h));
  EXPECT_EQ(reserved({.conv1 = true}), n * (outer + s.a1));  // a2 + h = 164 in a1's 192
  EXPECT_EQ(reserved(cm::RecomputeBlocks::all()), n * (outer + s.a1));
  o.hidden = 200;  // now a2 + h = 264 > a1
  const Shapes t(o);
  EXPECT_EQ(step_memory(with(o, {.conv1 = true}), batch).reserved_bytes,
            n * (outer + t.a2 + t.h));  // a2 and h above a1's place
}

TEST(ActivationLedger, CountsHeldBytesAndThePeakOfTheStep) {
  cm::ActivationLedger l;
  l.begin_step();
  l.hold(0, 100);
  l.hold(1, 50);
  EXPECT_EQ(l.held_bytes(), 150);
  l.drop(0);
  l.hold(2, 30);
  EXPECT_EQ(l.held_bytes(), 80);
  EXPECT_EQ(l.peak_bytes(), 150);
  l.hold(1, 200);  // replaces slot 1's 50
  EXPECT_EQ(l.held_bytes(), 230);
  EXPECT_EQ(l.peak_bytes(), 230);
  l.drop(5);  // held nothing
  EXPECT_EQ(l.held_bytes(), 230);
  l.begin_step();
  EXPECT_EQ(l.held_bytes(), 0);
  EXPECT_EQ(l.peak_bytes(), 0);
  EXPECT_THROW(l.hold(cm::ActivationLedger::kSlots, 1), hvd::InvalidArgumentError);
  EXPECT_THROW(l.drop(-1), hvd::InvalidArgumentError);
}

TEST(RecomputeBlocks, ParsesWhatDescribeWritesAndNamesBadValues) {
  for (const cm::RecomputeBlocks& r : every_choice())
    EXPECT_EQ(cm::parse_recompute_blocks(cm::describe(r), "--recompute"), r) << cm::describe(r);
  EXPECT_EQ(cm::describe({}), "none");
  EXPECT_EQ(cm::parse_recompute_blocks("none", "--recompute"), cm::RecomputeBlocks{});
  EXPECT_EQ(cm::describe(cm::RecomputeBlocks::all()), "all");
  EXPECT_EQ(cm::describe({.conv1 = true, .fc = true}), "conv1,fc");
  EXPECT_EQ(cm::parse_recompute_blocks("fc,conv1", "--recompute"),
            (cm::RecomputeBlocks{.conv1 = true, .fc = true}));
  for (const std::string bad : {"", "conv3", "conv1,", ",fc", "conv1,,fc", "conv1,conv1",
                                "all,conv1", " conv1", "CONV1", "yes"}) {
    try {
      cm::parse_recompute_blocks(bad, "--recompute");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const hvd::InvalidArgumentError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--recompute is '" + bad + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("none, all, or a comma-separated list"), std::string::npos) << m;
    }
  }
}

}  // namespace
