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
  EXPECT_EQ(c.gpu_operations, GpuOperations::kNccl);
  EXPECT_EQ(c.compression, Compression::kNone);
  EXPECT_EQ(c.log_level, LogLevel::kWarning);
  EXPECT_EQ(c.on_peer_loss, PeerLossAction::kExit);
  EXPECT_EQ(c.control_topology, ControlTopologySetting::kAuto);
  EXPECT_EQ(c.test_fake_local_size, 0);  // the test hooks are off
  EXPECT_EQ(c.test_pause_background, "");
  EXPECT_EQ(c.test_stop_in_op, "");
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
  EXPECT_EQ(c.gpu_operations, GpuOperations::kMpi);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
}

TEST(Config, EnumSettingsParseOnceIntoTheirEnums) {
  Config c = load_config(fake_env({{"HVD_COMPRESSION", "BF16"},
                                   {"HOROVOD_ON_PEER_LOSS", "abort"},
                                   {"HVD_CONTROL_TOPOLOGY", " Tree "},
                                   {"HVD_LOG_LEVEL", "error"}}));
  EXPECT_EQ(c.compression, Compression::kBf16);
  EXPECT_EQ(c.on_peer_loss, PeerLossAction::kAbort);
  EXPECT_EQ(c.control_topology, ControlTopologySetting::kTree);
  EXPECT_EQ(c.log_level, LogLevel::kError);
  EXPECT_EQ(load_config(fake_env({{"HVD_COMPRESSION", "fp16"}})).compression, Compression::kFp16);
  EXPECT_EQ(load_config(fake_env({{"HVD_ON_PEER_LOSS", "NONE"}})).on_peer_loss,
            PeerLossAction::kNone);
  // Each enum's name is the registry's spelling of its choice.
  for (auto v : {GpuOperations::kNccl, GpuOperations::kMpi})
    EXPECT_EQ(load_config(fake_env({{"HVD_GPU_OPERATIONS", to_string(v)}})).gpu_operations, v);
  for (auto v : {PeerLossAction::kExit, PeerLossAction::kAbort, PeerLossAction::kNone})
    EXPECT_EQ(load_config(fake_env({{"HVD_ON_PEER_LOSS", to_string(v)}})).on_peer_loss, v);
  for (auto v : {ControlTopologySetting::kAuto, ControlTopologySetting::kTree,
                 ControlTopologySetting::kStar})
    EXPECT_EQ(load_config(fake_env({{"HVD_CONTROL_TOPOLOGY", to_string(v)}})).control_topology, v);
  for (auto v : {Compression::kNone, Compression::kFp16, Compression::kBf16})
    EXPECT_EQ(load_config(fake_env({{"HVD_COMPRESSION", compression_name(v)}})).compression, v);
  for (auto v :
       {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError})
    EXPECT_EQ(load_config(fake_env({{"HVD_LOG_LEVEL", log_level_name(v)}})).log_level, v);
}

TEST(Config, TestHooksAreHiddenEntriesParsedLikeTheOthers) {
  for (const char* name :
       {"HVD_TEST_PAUSE_BACKGROUND", "HVD_TEST_STOP_IN_OP", "HVD_TEST_FAKE_LOCAL_SIZE"}) {
    const ConfigVar* v = find_config_var(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_TRUE(v->hidden) << name;
    EXPECT_STREQ(v->launcher_flag, "") << name;
  }
  for (const auto& v : config_registry())
    EXPECT_EQ(v.hidden, std::string(v.name).rfind("HVD_TEST_", 0) == 0) << v.name;
  Config c = load_config(fake_env({{"HVD_TEST_PAUSE_BACKGROUND", "1:7:50"},
                                   {"HOROVOD_TEST_STOP_IN_OP", "1:50"},
                                   {"HVD_TEST_FAKE_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(c.test_pause_background, "1:7:50");
  EXPECT_EQ(c.test_stop_in_op, "1:50");
  EXPECT_EQ(c.test_fake_local_size, 2);
  const std::string e = error_of({{"HVD_TEST_FAKE_LOCAL_SIZE", "two"}});
  EXPECT_NE(e.find("HVD_TEST_FAKE_LOCAL_SIZE='two' is not valid"), std::string::npos) << e;
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
