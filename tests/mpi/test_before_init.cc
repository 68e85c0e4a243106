// The lifecycle seen from outside: every call before init() and after shutdown() throws an
// hvd::Error that says so; init() is idempotent; shutdown() is safe to call twice. This binary
// holds only this test, so that nothing has called init() before it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "tests/mpi/test_collectives_util.h"

namespace hvdtest {
namespace {

// fn must throw hvd::Error whose message says why: it mentions init (before init()) or
// shutdown (after shutdown()).
void expect_not_initialized(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << " did not throw";
  } catch (const hvd::Error& e) {
    EXPECT_TRUE(contains_ci(e.what(), "init") || contains_ci(e.what(), "shutdown"))
        << what << ": the message should say hvd is not running: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw a non-hvd exception: " << e.what();
  }
}

void expect_all_calls_refused(const std::string& when) {
  EXPECT_FALSE(hvd::initialized()) << when;
  expect_not_initialized([] { (void)hvd::rank(); }, "rank() " + when);
  expect_not_initialized([] { (void)hvd::size(); }, "size() " + when);
  expect_not_initialized([] { (void)hvd::local_rank(); }, "local_rank() " + when);
  expect_not_initialized([] { (void)hvd::local_size(); }, "local_size() " + when);
  expect_not_initialized([] { (void)hvd::cross_rank(); }, "cross_rank() " + when);
  expect_not_initialized([] { (void)hvd::cross_size(); }, "cross_size() " + when);
  std::vector<float> v(3, 1.0f);
  expect_not_initialized([&] { (void)hvd::allreduce_async(std::span<float>(v), "lifecycle.ar"); },
                         "allreduce_async() " + when);
}

TEST(Lifecycle, CallsBeforeInitAndAfterShutdownThrow) {
  expect_all_calls_refused("before init()");

  {
    Watchdog w("hvd::init()");
    hvd::init();
    hvd::init();  // idempotent
  }
  ASSERT_TRUE(hvd::initialized());
  const int rank = hvd::rank(), size = hvd::size();
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, size);
  EXPECT_GE(hvd::local_rank(), 0);
  EXPECT_LT(hvd::local_rank(), hvd::local_size());
  EXPECT_GE(hvd::cross_rank(), 0);
  EXPECT_LT(hvd::cross_rank(), hvd::cross_size());
  EXPECT_LE(hvd::local_size() * hvd::cross_size(), size * size);
  // One machine here: every rank on one node.
  EXPECT_EQ(hvd::local_size(), size);
  EXPECT_EQ(hvd::local_rank(), rank);
  EXPECT_EQ(hvd::cross_size(), 1);
  EXPECT_TRUE(hvd::is_homogeneous());

  std::vector<int32_t> v = {rank};
  {
    Watchdog w("allreduce before shutdown");
    hvd::allreduce(v, "lifecycle.sum", ReduceOp::kSum);
  }
  EXPECT_EQ(v[0], size * (size - 1) / 2);

  {
    Watchdog w("hvd::shutdown()");
    hvd::shutdown();
    hvd::shutdown();  // safe twice
  }
  expect_all_calls_refused("after shutdown()");
}

}  // namespace
}  // namespace hvdtest
