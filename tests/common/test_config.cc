// The configuration registry: defaults, HOROVOD_* aliases, validation messages.
#include <gtest/gtest.h>

#include <map>

#include "hvd/error.h"
#include "common/config.h"
#include "tests/support/test_util.h"

namespace hvd {
namespace {

using hvdtest::fake_env;

std::string error_of(std::map<std::string, std::string> vars) {
  try {
    load_config(fake_env(std::move(vars)));
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsMatchTheDesign) {
  Config c = load_config(fake_env({}));
  EXPECT_EQ(c.fusion_threshold_bytes, 64 << 20);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 1.0);
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_FALSE(c.hierarchical_allreduce);
  EXPECT_EQ(c.gpu_operations, "NCCL");
  EXPECT_EQ(c.log_level, "warning");
  EXPECT_DOUBLE_EQ(c.stall_check_time_seconds, 60);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_time_seconds, 0);
  EXPECT_FALSE(c.async_completion);  // wait() waits for the GPU unless asked otherwise
}

TEST(Config, AsyncCompletionInEitherSpelling) {
  // Horovod's HOROVOD_ENABLE_ASYNC_COMPLETION keeps its meaning here.
  EXPECT_TRUE(load_config(fake_env({{"HOROVOD_ENABLE_ASYNC_COMPLETION", "1"}})).async_completion);
  EXPECT_TRUE(load_config(fake_env({{"HVD_ENABLE_ASYNC_COMPLETION", "true"}})).async_completion);
  EXPECT_FALSE(load_config(fake_env({{"HVD_ENABLE_ASYNC_COMPLETION", "0"}})).async_completion);
  const std::string e = error_of({{"HVD_ENABLE_ASYNC_COMPLETION", "yes please"}});
  EXPECT_NE(e.find("HVD_ENABLE_ASYNC_COMPLETION"), std::string::npos) << e;
}

TEST(Config, ReadsHvdAndHorovodSpellings) {
  Config c = load_config(fake_env({{"HVD_FUSION_THRESHOLD", "1024"},
                                   {"HOROVOD_CYCLE_TIME", "2.5"},
                                   {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                                   {"HVD_GPU_OPERATIONS", "mpi"},
                                   {"HVD_LOG_LEVEL", "DEBUG"}}));
  EXPECT_EQ(c.fusion_threshold_bytes, 1024);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 2.5);
  EXPECT_TRUE(c.hierarchical_allreduce);
  EXPECT_EQ(c.gpu_operations, "MPI");
  EXPECT_EQ(c.log_level, "debug");
}

TEST(Config, BadValuesNameTheVariableTheValueAndWhatIsAccepted) {
  std::string e = error_of({{"HVD_FUSION_THRESHOLD", "64MB"}});
  EXPECT_NE(e.find("HVD_FUSION_THRESHOLD"), std::string::npos) << e;
  EXPECT_NE(e.find("'64MB'"), std::string::npos) << e;
  EXPECT_NE(e.find("integer"), std::string::npos) << e;
  e = error_of({{"HOROVOD_CYCLE_TIME", "-1"}});
  EXPECT_NE(e.find("HOROVOD_CYCLE_TIME"), std::string::npos) << e;
  e = error_of({{"HVD_GPU_OPERATIONS", "gloo"}});
  EXPECT_NE(e.find("NCCL|MPI"), std::string::npos) << e;
  e = error_of({{"HVD_HIERARCHICAL_ALLREDUCE", "maybe"}});
  EXPECT_NE(e.find("0 or 1"), std::string::npos) << e;
  e = error_of({{"HVD_CACHE_CAPACITY", "12abc"}});
  EXPECT_NE(e.find("HVD_CACHE_CAPACITY"), std::string::npos) << e;
  e = error_of({{"HVD_CYCLE_TIME", "nan"}});
  EXPECT_NE(e.find("HVD_CYCLE_TIME"), std::string::npos) << e;
  e = error_of({{"HVD_LOG_LEVEL", "verbose"}});
  EXPECT_NE(e.find("trace|debug|info|warning|error"), std::string::npos) << e;
}

TEST(Config, DisagreeingSpellingsAreAnError) {
  std::string e = error_of({{"HVD_CYCLE_TIME", "1"}, {"HOROVOD_CYCLE_TIME", "5"}});
  EXPECT_NE(e.find("disagree"), std::string::npos) << e;
  EXPECT_EQ(error_of({{"HVD_CYCLE_TIME", "5"}, {"HOROVOD_CYCLE_TIME", "5"}}), "");
}

TEST(Config, EveryRegisteredVariableHasDocAndParsesItsDefault) {
  for (const auto& v : config_registry()) {
    EXPECT_EQ(std::string(v.name).rfind("HVD_", 0), 0u) << v.name;
    EXPECT_GT(std::string(v.doc).size(), 10u) << v.name;
  }
  EXPECT_NO_THROW(load_config(fake_env({})));
}

TEST(Config, ParsersRejectTrailingGarbageAndOutOfRange) {
  EXPECT_EQ(parse_int("X", " 42 ", 0, 100), 42);
  EXPECT_THROW(parse_int("X", "42x", 0, 100), InvalidArgumentError);
  EXPECT_THROW(parse_int("X", "101", 0, 100), InvalidArgumentError);
  EXPECT_THROW(parse_int("X", "99999999999999999999999", 0, 100), InvalidArgumentError);
  EXPECT_THROW(parse_double("X", "inf", 0, 1e9), InvalidArgumentError);
  EXPECT_TRUE(parse_bool("X", "Yes"));
  EXPECT_FALSE(parse_bool("X", "off"));
  EXPECT_EQ(parse_enum("X", "nccl", {"NCCL", "MPI"}), "NCCL");
}

}  // namespace
}  // namespace hvd
