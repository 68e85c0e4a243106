#include "common/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "hvd/error.h"

namespace hvd {
namespace {

constexpr double kMaxInt = 9.0e18;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "|" : "") + v[i];
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

[[noreturn]] void bad_value(const std::string& what, const std::string& value,
                            const std::string& accepted) {
  throw InvalidArgumentError(what + "='" + value + "' is not valid: expected " + accepted + ".");
}

}  // namespace

const char* to_string(GpuOperations v) {
  switch (v) {
    case GpuOperations::kNccl:
      return "NCCL";
    case GpuOperations::kMpi:
      return "MPI";
  }
  return "?";
}

const char* to_string(PeerLossAction v) {
  switch (v) {
    case PeerLossAction::kExit:
      return "exit";
    case PeerLossAction::kAbort:
      return "abort";
    case PeerLossAction::kNone:
      return "none";
  }
  return "?";
}

const char* to_string(ControlTopologySetting v) {
  switch (v) {
    case ControlTopologySetting::kAuto:
      return "auto";
    case ControlTopologySetting::kTree:
      return "tree";
    case ControlTopologySetting::kStar:
      return "star";
  }
  return "?";
}

const std::vector<ConfigVar>& config_registry() {
  static const std::vector<ConfigVar> registry = {
      {.name = "HVD_FUSION_THRESHOLD",
       .type = ConfigType::kInt,
       .default_value = "67108864",
       .doc = "Bytes of tensors fused into one collective (0 disables fusion).",
       .max = kMaxInt,
       .launcher_flag = "fusion-threshold-mb",
       .launcher_scale = 1048576,
       .launcher_doc = "Fusion buffer threshold in MiB."},
      {.name = "HVD_CYCLE_TIME",
       .type = ConfigType::kDouble,
       .default_value = "1",
       .doc = "Milliseconds between negotiation cycles of the background thread.",
       .min = 0.01,
       .max = 10000,
       .launcher_flag = "cycle-time-ms",
       .launcher_doc = "Cycle time in milliseconds."},
      {.name = "HVD_FUSION_WINDOW",
       .type = ConfigType::kDouble,
       .default_value = "50",
       .doc = "Microseconds the background thread waits, once a request arrives on an idle "
              "runtime, for no further request before it negotiates (a burst fuses into one "
              "response); at most one cycle time after the first request.",
       .max = 1e7},
      {.name = "HVD_WAIT_POLL_US",
       .type = ConfigType::kInt,
       .default_value = "-1",
       .doc = "Microseconds a thread about to sleep polls first: Handle::wait() for its "
              "operation, the background thread between cycles for a submission (no futex "
              "wake-up when the answer comes meanwhile). -1: 50 where the rank may count at "
              "least 2 cores as its own (its CPU mask divided among the node's ranks whose "
              "masks overlap it: a user and a background thread each), else 0; 0: never "
              "poll.",
       .min = -1,
       .max = 100000},
      {.name = "HVD_COPY_THREADS",
       .type = ConfigType::kInt,
       .default_value = "-1",
       .doc = "Helper threads per rank that copy a large fused batch (256 KiB or more) into "
              "and out of the host fusion buffer beside the thread running it. -1: the cores "
              "the rank counts as its own (as for HVD_WAIT_POLL_US) beyond its own threads "
              "(2; a GPU rank 3), at most 3, so none where ranks share cores; 0: none.",
       .min = -1,
       .max = 15},
      {.name = "HVD_SINGLE_RANK_INLINE",
       .type = ConfigType::kBool,
       .default_value = "1",
       .doc = "In a job of one rank, run a CPU tensor's collective on the calling thread at "
              "submission: nothing to negotiate, no hand-off to the background thread (0: "
              "every operation goes through the background thread, as with several ranks)."},
      {.name = "HVD_SINGLE_RANK_INLINE_GPU",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "With HVD_SINGLE_RANK_INLINE, also launch a CUDA tensor's all-reduce or broadcast "
              "on NCCL from the calling thread in a job of one rank (its completion still comes "
              "from the GPU finalizer, or at once with HVD_ENABLE_ASYNC_COMPLETION). Off until "
              "it has run on a GPU (docs/gpu.md, \"The small all-reduce\")."},
      {.name = "HVD_CACHE_CAPACITY",
       .type = ConfigType::kInt,
       .default_value = "1024",
       .doc = "Negotiated responses kept for the bit-vector fast path (0 turns the cache "
              "off).",
       .max = 1 << 20,
       .launcher_flag = "cache-capacity",
       .launcher_doc = "Response cache capacity (0 disables)."},
      {.name = "HVD_CACHED_LANES",
       .type = ConfigType::kBool,
       .default_value = "1",
       .doc = "Submit an allreduce whose response is cached (every step's tensors from the "
              "second step on) straight into a slot of its own, with no request and no queue "
              "entry to negotiate by name (0: every tensor takes the ordinary path; for "
              "comparisons)."},
      {.name = "HVD_HIERARCHICAL_ALLREDUCE",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "Reduce-scatter in the node, all-reduce across nodes, all-gather in the node.",
       .launcher_flag = "hierarchical-allreduce",
       .launcher_doc = "Use hierarchical all-reduce (flag without value)."},
      {.name = "HVD_GPU_OPERATIONS",
       .type = ConfigType::kEnum,
       .default_value = "NCCL",
       .doc = "Backend for GPU tensors: NCCL, or MPI through host memory.",
       .choices = {"NCCL", "MPI"},
       .launcher_flag = "gpu-operations",
       .launcher_doc = "Backend for GPU tensors: NCCL or MPI."},
      {.name = "HVD_NCCL_SHARED_GPU",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "Where several ranks of a node share one GPU, use NCCL anyway (0: host-staged MPI "
              "there): each such rank sets NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30 and later) or "
              "else gives NCCL a host identity of its own (NCCL_HOSTID; NCCL's network transport "
              "between them, slow). Meant for running the NCCL path of several ranks on a one-GPU "
              "machine."},
      {.name = "HVD_ENABLE_ASYNC_COMPLETION",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "GPU all-reduce and broadcast: Handle::wait() returns once the operation is "
              "queued on the GPU, and the output is valid in the order of the stream each "
              "tensor names (its TensorRef stream; null: the legacy default stream), which "
              "waits for hvd's work; the host does not wait for the GPU. 0: wait() returns "
              "once the GPU work is done (valid on any stream)."},
      {.name = "HVD_COMPRESSION",
       .type = ConfigType::kEnum,
       .default_value = "none",
       .doc = "All-reduce wire compression of float32/float64 tensors: none, fp16 or bf16 "
              "(other dtypes unchanged; CUDA tensors on the NCCL path: fp16 only, float32 "
              "sum/average).",
       .choices = {"none", "fp16", "bf16"},
       .launcher_flag = "compression",
       .launcher_doc =
           "All-reduce wire compression of float32/float64 tensors: none, fp16 or bf16."},
      {.name = "HVD_DETERMINISTIC",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "Reduce every floating-point sum, average and product element in rank order "
              "(0, 1, ...), whatever its place in the fusion buffer: the same job on the "
              "same ranks gives the same bits on every run, with fusion on "
              "(docs/determinism.md). Every rank must set it alike.",
       .launcher_flag = "deterministic",
       .launcher_doc = "Bitwise-reproducible reductions with fusion on (flag without value)."},
      {.name = "HVD_TIMELINE",
       .type = ConfigType::kString,
       .default_value = "",
       .doc = "Path of a Chrome-trace JSON timeline written by rank 0 (empty: off).",
       .launcher_flag = "timeline-filename",
       .launcher_doc = "Write a Chrome-trace timeline to this path."},
      {.name = "HVD_TIMELINE_MARK_CYCLES",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "Mark each background cycle in the timeline.",
       .launcher_flag = "timeline-mark-cycles",
       .launcher_doc = "Mark cycles in the timeline (flag without value)."},
      {.name = "HVD_STALL_CHECK_TIME_SECONDS",
       .type = ConfigType::kDouble,
       .default_value = "60",
       .doc = "Seconds a tensor may wait for ranks that have not submitted it before rank 0 "
              "warns (and again every as many seconds).",
       .max = 1e9,
       .launcher_flag = "stall-check-warning-time-seconds",
       .launcher_doc = "Seconds before a stall warning."},
      {.name = "HVD_STALL_SHUTDOWN_TIME_SECONDS",
       .type = ConfigType::kDouble,
       .default_value = "0",
       .doc = "Seconds after which stalled tensors fail and the job shuts down (0: never).",
       .max = 1e9,
       .launcher_flag = "stall-check-shutdown-time-seconds",
       .launcher_doc = "Seconds before a stall fails the job (0: never)."},
      {.name = "HVD_STALL_CHECK_DISABLE",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "Turn the stall inspector off."},
      {.name = "HVD_STRAGGLER_THRESHOLD_MS",
       .type = ConfigType::kDouble,
       .default_value = "5",
       .doc = "Milliseconds by which a rank must arrive last at a release for "
              "hvd::straggler_report() to name it (below: noise).",
       .max = 1e9},
      {.name = "HVD_AUTOTUNE",
       .type = ConfigType::kBool,
       .default_value = "0",
       .doc = "Search the fusion threshold, cycle time and fusion window on the running job "
              "during its first steps, keep the fastest, and log each trial, why the winner won "
              "and the line of settings to pin (docs/tuning.md). Every rank must set it alike.",
       .launcher_flag = "autotune",
       .launcher_doc = "Tune the performance settings on the live job (flag without value)."},
      {.name = "HVD_AUTOTUNE_LOG",
       .type = ConfigType::kString,
       .default_value = "",
       .doc = "Rank 0 writes each autotune trial here as a CSV row (empty: the log lines only).",
       .launcher_flag = "autotune-log",
       .launcher_doc = "CSV file of the autotune trials."},
      {.name = "HVD_AUTOTUNE_WARMUP_STEPS",
       .type = ConfigType::kInt,
       .default_value = "10",
       .doc = "Steps the job runs at its starting settings before the autotune trials begin.",
       .max = 1000000},
      {.name = "HVD_AUTOTUNE_STEPS_PER_TRIAL",
       .type = ConfigType::kInt,
       .default_value = "10",
       .doc = "Steps an autotune trial times at least (after one step for the settings to take "
              "effect); the trial's score is their mean.",
       .min = 1,
       .max = 1000000},
      {.name = "HVD_AUTOTUNE_TRIAL_SECONDS",
       .type = ConfigType::kDouble,
       .default_value = "1",
       .doc = "Seconds an autotune trial times at least (jobs of short steps time more of them: "
              "one burst of other work weighs less).",
       .max = 3600},
      {.name = "HVD_LOG_LEVEL",
       .type = ConfigType::kEnum,
       .default_value = "warning",
       .doc = "Least severe log level printed.",
       .choices = {"trace", "debug", "info", "warning", "error"},
       .launcher_flag = "log-level",
       .launcher_doc = "Log level: trace, debug, info, warning or error."},
      {.name = "HVD_START_TIMEOUT",
       .type = ConfigType::kDouble,
       .default_value = "30",
       .doc = "Seconds init() waits for every rank before failing.",
       .min = 1,
       .max = 1e6,
       .launcher_flag = "start-timeout",
       .launcher_doc = "Seconds to wait for all ranks at start."},
      {.name = "HVD_PEER_TIMEOUT_SECONDS",
       .type = ConfigType::kDouble,
       .default_value = "30",
       .doc = "Seconds without a sign of life from a peer before it is declared lost.",
       .min = 1,
       .max = 1e6},
      {.name = "HVD_CONTROL_TOPOLOGY",
       .type = ConfigType::kEnum,
       .default_value = "auto",
       .doc = "Shape of the per-cycle bit-vector exchange: tree (a binomial tree, rank 0 "
              "handles 2*ceil(log2 n) messages per cycle), star (every rank through rank 0, "
              "2*(n-1), in two hops) or auto (star below 64 ranks, tree from 64); all name "
              "lost ranks the same way (docs/scaling.md).",
       .choices = {"auto", "tree", "star"}},
      {.name = "HVD_ON_PEER_LOSS",
       .type = ConfigType::kEnum,
       .default_value = "exit",
       .doc = "When a lost peer leaves this rank blocked in MPI: log the error, call the "
              "program's hvd::set_peer_loss_handler if any, then exit (status 70), abort "
              "(core dump) or none (stay blocked until the launcher ends the job).",
       .choices = {"exit", "abort", "none"}},
      {.name = "HVD_TERMINATE_HANDLER",
       .type = ConfigType::kBool,
       .default_value = "1",
       .doc = "An uncaught hvd::Error ends the process with its message and exit status 1 "
              "instead of abort()."},
      // Test hooks (hidden: no hvdrun flag, not in docs/configuration.md; tests/README.md,
      // "Test hooks"). runtime/test_hooks.h interprets them; a value for another rank, or one
      // that does not parse as RANK:..., does nothing.
      {.name = "HVD_TEST_PAUSE_BACKGROUND",
       .doc = "RANK:SECONDS:CYCLE: that rank's background thread sleeps once, before that "
              "cycle (tests/reliability/test_slow_rank.sh).",
       .hidden = true},
      {.name = "HVD_TEST_STOP_IN_OP",
       .doc = "RANK:N: that rank's process stops (SIGSTOP) right before its N-th data-plane "
              "batch (tests/reliability/test_lost_rank.sh).",
       .hidden = true},
      {.name = "HVD_TEST_FAKE_LOCAL_SIZE",
       .type = ConfigType::kInt,
       .default_value = "0",
       .doc = "Split the world into fake nodes of N consecutive ranks (0: the real nodes; "
              "tests/collectives/test_hierarchical.cc).",
       .max = 1 << 20,
       .hidden = true},
      {.name = "HVD_TEST_OP_DELAY_US",
       .type = ConfigType::kInt,
       .default_value = "0",
       .doc = "Every data-plane batch of every rank sleeps this many microseconds first: a fixed "
              "cost per operation, which makes the best fusion threshold known by construction "
              "(tests/tuning).",
       .max = 10000000,
       .hidden = true},
  };
  return registry;
}

const ConfigVar* find_config_var(const std::string& name) {
  for (const auto& v : config_registry())
    if (name == v.name) return &v;
  return nullptr;
}

EnvLookup process_env_lookup() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

bool parse_bool(const std::string& what, const std::string& value) {
  std::string v = lower(trim(value));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  bad_value(what, value, "0 or 1 (or true/false, yes/no, on/off)");
}

int64_t parse_int(const std::string& what, const std::string& value, int64_t min, int64_t max) {
  std::string v = trim(value);
  std::ostringstream accepted;
  accepted << "an integer from " << min << " to " << max;
  if (v.empty()) bad_value(what, value, accepted.str());
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end != v.c_str() + v.size() || x < min || x > max)
    bad_value(what, value, accepted.str());
  return x;
}

double parse_double(const std::string& what, const std::string& value, double min, double max) {
  std::string v = trim(value);
  std::ostringstream accepted;
  accepted << "a number from " << min << " to " << max;
  if (v.empty()) bad_value(what, value, accepted.str());
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (errno != 0 || end != v.c_str() + v.size() || !std::isfinite(x) || x < min || x > max)
    bad_value(what, value, accepted.str());
  return x;
}

std::string parse_enum(const std::string& what, const std::string& value,
                       const std::vector<std::string>& choices) {
  std::string v = lower(trim(value));
  for (const auto& c : choices)
    if (lower(c) == v) return c;
  bad_value(what, value, "one of " + join(choices));
}

Config load_config(const EnvLookup& env) {
  // Raw values, HVD_* first; HOROVOD_* accepted as an alias. Both set and different is an error.
  auto raw = [&](const ConfigVar& var) -> std::pair<std::string, std::string> {
    std::string name = var.name;
    std::string alias = "HOROVOD_" + name.substr(4);
    auto a = env(name);
    auto b = env(alias);
    if (a && b && trim(*a) != trim(*b))
      throw InvalidArgumentError(name + "='" + *a + "' and " + alias + "='" + *b +
                                 "' disagree: unset one of them.");
    if (a) return {name, *a};
    if (b) return {alias, *b};
    return {name, var.default_value};
  };
  auto get_int = [&](const char* n) {
    const ConfigVar& v = *find_config_var(n);
    auto [who, val] = raw(v);
    return parse_int(who, val, static_cast<int64_t>(v.min), static_cast<int64_t>(v.max));
  };
  auto get_double = [&](const char* n) {
    const ConfigVar& v = *find_config_var(n);
    auto [who, val] = raw(v);
    return parse_double(who, val, v.min, v.max);
  };
  auto get_bool = [&](const char* n) {
    auto [who, val] = raw(*find_config_var(n));
    return parse_bool(who, val);
  };
  // An enum setting: its value among the registry's choices, then the enum value in the same
  // place of `values` (listed in the order of the choices).
  auto get_enum = [&]<class E>(const char* n, std::initializer_list<E> values) {
    const ConfigVar& v = *find_config_var(n);
    if (v.choices.size() != values.size())
      throw InternalError(std::string(n) + ": the registry lists " +
                          std::to_string(v.choices.size()) + " choices, the code " +
                          std::to_string(values.size()) + ": please report this bug.");
    auto [who, val] = raw(v);
    const std::string choice = parse_enum(who, val, v.choices);
    size_t i = 0;
    while (v.choices[i] != choice) ++i;
    return values.begin()[i];
  };
  auto get_string = [&](const char* n) { return raw(*find_config_var(n)).second; };

  Config c;
  c.fusion_threshold_bytes = get_int("HVD_FUSION_THRESHOLD");
  c.cycle_time_ms = get_double("HVD_CYCLE_TIME");
  c.fusion_window_us = get_double("HVD_FUSION_WINDOW");
  c.cache_capacity = get_int("HVD_CACHE_CAPACITY");
  c.single_rank_inline = get_bool("HVD_SINGLE_RANK_INLINE");
  c.single_rank_inline_gpu = get_bool("HVD_SINGLE_RANK_INLINE_GPU");
  c.cached_lanes = get_bool("HVD_CACHED_LANES");
  c.wait_poll_us = get_int("HVD_WAIT_POLL_US");
  c.copy_threads = get_int("HVD_COPY_THREADS");
  c.hierarchical_allreduce = get_bool("HVD_HIERARCHICAL_ALLREDUCE");
  c.gpu_operations = get_enum("HVD_GPU_OPERATIONS", {GpuOperations::kNccl, GpuOperations::kMpi});
  c.nccl_shared_gpu = get_bool("HVD_NCCL_SHARED_GPU");
  c.compression =
      get_enum("HVD_COMPRESSION", {Compression::kNone, Compression::kFp16, Compression::kBf16});
  c.deterministic = get_bool("HVD_DETERMINISTIC");
  c.async_completion = get_bool("HVD_ENABLE_ASYNC_COMPLETION");
  c.timeline_path = get_string("HVD_TIMELINE");
  c.timeline_mark_cycles = get_bool("HVD_TIMELINE_MARK_CYCLES");
  c.stall_check_time_seconds = get_double("HVD_STALL_CHECK_TIME_SECONDS");
  c.stall_shutdown_time_seconds = get_double("HVD_STALL_SHUTDOWN_TIME_SECONDS");
  c.stall_check_disable = get_bool("HVD_STALL_CHECK_DISABLE");
  c.straggler_threshold_ms = get_double("HVD_STRAGGLER_THRESHOLD_MS");
  c.autotune = get_bool("HVD_AUTOTUNE");
  c.autotune_log = get_string("HVD_AUTOTUNE_LOG");
  c.autotune_warmup_steps = get_int("HVD_AUTOTUNE_WARMUP_STEPS");
  c.autotune_steps_per_trial = get_int("HVD_AUTOTUNE_STEPS_PER_TRIAL");
  c.autotune_trial_seconds = get_double("HVD_AUTOTUNE_TRIAL_SECONDS");
  c.log_level = get_enum("HVD_LOG_LEVEL", {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo,
                                           LogLevel::kWarning, LogLevel::kError});
  c.start_timeout_seconds = get_double("HVD_START_TIMEOUT");
  c.peer_timeout_seconds = get_double("HVD_PEER_TIMEOUT_SECONDS");
  c.on_peer_loss = get_enum("HVD_ON_PEER_LOSS",
                            {PeerLossAction::kExit, PeerLossAction::kAbort, PeerLossAction::kNone});
  c.control_topology = get_enum("HVD_CONTROL_TOPOLOGY",
                                {ControlTopologySetting::kAuto, ControlTopologySetting::kTree,
                                 ControlTopologySetting::kStar});
  c.terminate_handler = get_bool("HVD_TERMINATE_HANDLER");
  c.test_pause_background = get_string("HVD_TEST_PAUSE_BACKGROUND");
  c.test_stop_in_op = get_string("HVD_TEST_STOP_IN_OP");
  c.test_fake_local_size = get_int("HVD_TEST_FAKE_LOCAL_SIZE");
  c.test_op_delay_us = get_int("HVD_TEST_OP_DELAY_US");
  return c;
}

}  // namespace hvd
