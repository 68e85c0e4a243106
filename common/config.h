#pragma once

// The configuration registry: every HVD_* variable is declared once, in config.cc, with its type,
// default, accepted values and one line of documentation. The runtime reads it at init(); the
// launcher (hvdrun) builds its tuning flags and --help from the same table. Each variable may also
// be spelled HOROVOD_* so existing job scripts keep working.
//
// Thread safety: the registry is immutable; load_config() is a pure function of its lookup.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/compression.h"
#include "common/logging.h"

namespace hvd {

enum class ConfigType { kBool, kInt, kDouble, kString, kEnum };

// One entry of the registry, written with designated initializers (config.cc); the fields left out
// keep these defaults.
struct ConfigVar {
  const char* name = "";  // "HVD_FUSION_THRESHOLD"
  ConfigType type = ConfigType::kString;
  const char* default_value = "";         // as the variable would be spelled: "67108864"
  const char* doc = "";                   // one line
  std::vector<std::string> choices = {};  // kEnum: the accepted values (case-insensitive)
  double min = 0;                         // kInt / kDouble: inclusive bounds
  double max = 0;
  // hvdrun's flag for this variable ("fusion-threshold-mb"), empty for none, and the factor
  // that turns the flag's value into the variable's (1048576 for MiB -> bytes).
  const char* launcher_flag = "";
  double launcher_scale = 1;
  const char* launcher_doc = "";
  // A test hook (HVD_TEST_*): parsed and validated like the others, but no setting of the
  // product: hvdrun has no flag for it and docs/configuration.md need not list it
  // (scripts/check-docs); tests/README.md describes the hooks.
  bool hidden = false;
};

// Every variable, in documentation order.
const std::vector<ConfigVar>& config_registry();
// The entry for a name (HVD_ spelling), or nullptr.
const ConfigVar* find_config_var(const std::string& name);

// The settings with a fixed set of values, parsed once by load_config(). HVD_COMPRESSION is
// common/compression.h's Compression and HVD_LOG_LEVEL common/logging.h's LogLevel.
enum class GpuOperations { kNccl, kMpi };  // HVD_GPU_OPERATIONS: NCCL | MPI
// HVD_ON_PEER_LOSS: exit | abort | none (comm/watchdog.h says what each does).
enum class PeerLossAction { kExit, kAbort, kNone };
// HVD_CONTROL_TOPOLOGY: auto | tree | star (comm/mpi_control_channel.h resolves auto by the size).
enum class ControlTopologySetting { kAuto, kTree, kStar };

// The registry's spelling of each value ("NCCL", "exit", "auto"; compression_name() and
// log_level_name() for the other two).
const char* to_string(GpuOperations v);
const char* to_string(PeerLossAction v);
const char* to_string(ControlTopologySetting v);

// Typed, validated configuration.
struct Config {
  int64_t fusion_threshold_bytes = 64 << 20;
  double cycle_time_ms = 1.0;
  double fusion_window_us = 50;         // runtime/runtime.cc: Runtime::loop
  bool single_rank_inline = true;       // runtime/runtime.cc: Runtime::enqueue_one
  bool single_rank_inline_gpu = false;  // the same for CUDA all-reduces and broadcasts on NCCL
  int64_t wait_poll_us = -1;            // -1: auto (runtime/runtime.cc: wait_poll_us)
  int64_t copy_threads = -1;            // -1: auto (ops/copy_workers.h: copy_helpers)
  int64_t cache_capacity = 1024;
  bool cached_lanes = true;  // HVD_CACHED_LANES (runtime/lanes.h)
  bool hierarchical_allreduce = false;
  GpuOperations gpu_operations = GpuOperations::kNccl;
  bool nccl_shared_gpu = false;  // HVD_NCCL_SHARED_GPU (runtime/wiring.cc: build_operations)
  Compression compression = Compression::kNone;  // ops/mpi/allreduce.cc
  bool deterministic = false;                    // HVD_DETERMINISTIC (ops/mpi/allreduce.cc)
  bool async_completion = false;  // HVD_ENABLE_ASYNC_COMPLETION (runtime/executor.cc)
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  double stall_check_time_seconds = 60;
  double stall_shutdown_time_seconds = 0;
  bool stall_check_disable = false;
  double straggler_threshold_ms = 5;  // HVD_STRAGGLER_THRESHOLD_MS (runtime/straggler.h)
  bool autotune = false;              // HVD_AUTOTUNE (runtime/autotune.h)
  std::string autotune_log;
  int64_t autotune_warmup_steps = 10;
  int64_t autotune_steps_per_trial = 10;
  double autotune_trial_seconds = 1;
  LogLevel log_level = LogLevel::kWarning;
  double start_timeout_seconds = 30;
  double peer_timeout_seconds = 30;
  PeerLossAction on_peer_loss = PeerLossAction::kExit;  // comm/watchdog.h
  ControlTopologySetting control_topology = ControlTopologySetting::kAuto;
  bool terminate_handler = true;  // runtime/terminate_handler.h
  // The test hooks (hidden entries; runtime/test_hooks.h interprets them).
  std::string test_pause_background;  // HVD_TEST_PAUSE_BACKGROUND=RANK:SECONDS:CYCLE
  std::string test_stop_in_op;        // HVD_TEST_STOP_IN_OP=RANK:N
  int64_t test_fake_local_size = 0;   // HVD_TEST_FAKE_LOCAL_SIZE=N
  int64_t test_op_delay_us = 0;       // HVD_TEST_OP_DELAY_US=N
};

// Looks a variable up by its exact name; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env_lookup();

// Reads every registered variable (HVD_* first, then HOROVOD_*), validates it and returns the
// configuration. Throws InvalidArgumentError naming the variable, the value and what is accepted.
Config load_config(const EnvLookup& env);

// Value parsers, exposed for tests and the fuzzers. Each throws InvalidArgumentError with a
// message that names `what` (usually the variable) and the accepted values.
bool parse_bool(const std::string& what, const std::string& value);
int64_t parse_int(const std::string& what, const std::string& value, int64_t min, int64_t max);
double parse_double(const std::string& what, const std::string& value, double min, double max);
std::string parse_enum(const std::string& what, const std::string& value,
                       const std::vector<std::string>& choices);

}  // namespace hvd
