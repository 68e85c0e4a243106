// Spare names and shapes (runtime/spares.h): a name or shape given back is the buffer the next
// take on that thread fills (no malloc), the value taken is exactly the one asked for whatever the
// buffer held before, buffers given beyond a thread's stash reach other threads through the pool,
// short strings (no heap buffer) and oversized buffers are not kept, the pool stays within its
// bound, and a thread giving while others take (the background thread and the user threads) stays
// correct. Each case runs on threads of its own, so that no stash is left from another case.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/spares.h"

namespace hvd::detail {
namespace {

template <class F>
void on_new_thread(F&& f) {
  std::thread t(std::forward<F>(f));
  t.join();
}

std::string long_name(int i) { return "model.layer" + std::to_string(i) + ".conv.weight.grad"; }

TEST(Spares, TakeAssignsTheValue) {
  on_new_thread([] {
    std::string name;
    std::vector<int64_t> shape;
    Spares::take_name(long_name(7), &name);
    Spares::take_shape({3, 4, 5}, &shape);
    EXPECT_EQ(name, long_name(7));
    EXPECT_EQ(shape, (std::vector<int64_t>{3, 4, 5}));
    Spares::take_name("w", &name);  // into a buffer that held a longer name
    Spares::take_shape({}, &shape);
    EXPECT_EQ(name, "w");
    EXPECT_TRUE(shape.empty());
  });
}

TEST(Spares, AGivenBufferIsTheNextTakenOnTheSameThread) {
  on_new_thread([] {
    std::vector<std::string> names(3);
    std::vector<std::vector<int64_t>> shapes(3);
    std::vector<const char*> name_buffers;
    std::vector<const int64_t*> shape_buffers;
    for (int i = 0; i < 3; ++i) {
      names[i] = long_name(1000 + i);
      shapes[i] = {i + 1, 16};
      name_buffers.push_back(names[i].data());
      shape_buffers.push_back(shapes[i].data());
    }
    Spares::give(&names, &shapes);
    for (int i = 2; i >= 0; --i) {  // last given, first taken
      std::string n;
      std::vector<int64_t> s;
      Spares::take_name(long_name(i), &n);
      Spares::take_shape({7, 8}, &s);
      EXPECT_EQ(n.data(), name_buffers[i]) << i;
      EXPECT_EQ(s.data(), shape_buffers[i]) << i;
      // The previous value is gone: exactly what was asked for.
      EXPECT_EQ(n, long_name(i));
      EXPECT_EQ(s, (std::vector<int64_t>{7, 8}));
    }
  });
}

TEST(Spares, ShortAndOversizedBuffersAreNotKept) {
  on_new_thread([] {
    const std::size_t pooled = Spares::pooled_names();
    // Fill this thread's stash first, so that what follows reaches the pool.
    std::vector<std::string> fill(2 * Spares::kRefill);
    for (auto& n : fill) n = long_name(1);
    Spares::give(&fill, nullptr);
    std::vector<std::string> names = {"w", std::string(Spares::kMaxNameBytes + 1, 'x'),
                                      long_name(2)};
    Spares::give(&names, nullptr);
    EXPECT_EQ(Spares::pooled_names(), pooled + 1);  // only the ordinary long name
    EXPECT_EQ(names[0], "w");                       // not kept: left as it was
    std::vector<std::vector<int64_t>> shapes(2 * Spares::kRefill, std::vector<int64_t>{1, 2});
    Spares::give(nullptr, &shapes);
    const std::size_t pooled_shapes = Spares::pooled_shapes();
    std::vector<std::vector<int64_t>> more = {{}, std::vector<int64_t>(Spares::kMaxDims + 1, 1)};
    Spares::give(nullptr, &more);
    EXPECT_EQ(Spares::pooled_shapes(), pooled_shapes);
  });
}

TEST(Spares, BuffersGivenOnOneThreadAreTakenOnAnother) {
  std::set<const char*> given;
  on_new_thread([&] {
    // Past this thread's own stash: the rest goes to the pool.
    std::vector<std::string> names(2 * Spares::kRefill + 100);
    for (std::size_t i = 0; i < names.size(); ++i) names[i] = long_name(static_cast<int>(i));
    for (std::size_t i = 2 * Spares::kRefill; i < names.size(); ++i) given.insert(names[i].data());
    Spares::give(&names, nullptr);
  });
  on_new_thread([&] {
    std::string n;
    Spares::take_name(long_name(5), &n);
    EXPECT_EQ(n, long_name(5));
    EXPECT_EQ(given.count(n.data()), 1u) << "a buffer from the pool, not a new one";
  });
}

TEST(Spares, ThePoolStaysWithinItsBound) {
  on_new_thread([] {
    for (int round = 0; round < 3; ++round) {
      std::vector<std::string> names(Spares::kMax);
      for (auto& n : names) n = long_name(round);
      Spares::give(&names, nullptr);
      EXPECT_LE(Spares::pooled_names(), Spares::kMax);
    }
    EXPECT_EQ(Spares::pooled_names(), Spares::kMax);
  });
}

// A destructor that submits while its thread exits (a thread_local's, or a static object's at the
// end of the program) runs after the thread's stash is freed: take and give still work, through
// the shared pool.
struct SubmitsAtExit {
  std::string* result = nullptr;
  ~SubmitsAtExit() {
    std::vector<std::string> names = {long_name(40)};
    Spares::give(&names, nullptr);
    std::string n;
    Spares::take_name(long_name(41), &n);
    if (result) *result = n;
  }
};

TEST(Spares, AThreadStillTakesAndGivesWhileItExits) {
  std::string result;
  std::thread([&] {
    thread_local SubmitsAtExit late;  // made before the stash: destroyed after it
    late.result = &result;
    std::vector<std::string> names = {long_name(42)};
    Spares::give(&names, nullptr);  // the stash is made here
    std::string n;
    Spares::take_name(long_name(43), &n);
    EXPECT_EQ(n, long_name(43));
  }).join();
  EXPECT_EQ(result, long_name(41));
}

// The background thread gives batches while user threads take: every value stays the one asked
// for (run under ThreadSanitizer by scripts/test --sanitize).
TEST(Spares, GiveAndTakeAcrossThreads) {
  constexpr int kSteps = 50, kTensors = 300;
  std::vector<std::thread> users;
  for (int u = 0; u < 2; ++u) {
    users.emplace_back([u] {
      std::vector<std::string> names(kTensors);
      std::vector<std::vector<int64_t>> shapes(kTensors);
      for (int step = 0; step < kSteps; ++step) {
        for (int i = 0; i < kTensors; ++i) {
          Spares::take_name(long_name(u * kTensors + i), &names[i]);
          Spares::take_shape({u, i, step}, &shapes[i]);
        }
        for (int i = 0; i < kTensors; ++i) {
          ASSERT_EQ(names[i], long_name(u * kTensors + i));
          ASSERT_EQ(shapes[i], (std::vector<int64_t>{u, i, step}));
        }
        // Handed over as the background thread would: given from a third thread.
        std::thread([&] { Spares::give(&names, &shapes); }).join();
      }
    });
  }
  for (auto& t : users) t.join();
}

}  // namespace
}  // namespace hvd::detail
