#include "common/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
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

const std::vector<ConfigVar>& config_registry() {
  static const std::vector<ConfigVar> registry = {
      {"HVD_FUSION_THRESHOLD",
       ConfigType::kInt,
       "67108864",
       "Bytes of tensors fused into one collective (0 disables fusion).",
       {},
       0,
       kMaxInt,
       "fusion-threshold-mb",
       1048576,
       "Fusion buffer threshold in MiB."},
      {"HVD_CYCLE_TIME",
       ConfigType::kDouble,
       "1",
       "Milliseconds between negotiation cycles of the background thread.",
       {},
       0.01,
       10000,
       "cycle-time-ms",
       1,
       "Cycle time in milliseconds."},
      {"HVD_FUSION_WINDOW",
       ConfigType::kDouble,
       "50",
       "Microseconds the background thread waits, once a request arrives on an idle runtime, for "
       "no further request before it negotiates (a burst fuses into one response); at most one "
       "cycle time after the first request.",
       {},
       0,
       1e7,
       "",
       1,
       ""},
      {"HVD_WAIT_POLL_US",
       ConfigType::kInt,
       "-1",
       "Microseconds a thread about to sleep polls first: Handle::wait() for its operation, the "
       "background thread between cycles for a submission (no futex wake-up when the answer comes "
       "meanwhile). -1: 50 where the rank may count at least 2 cores as its own (its CPU mask "
       "divided among the node's ranks whose masks overlap it: a user and a background thread "
       "each), else 0; 0: never poll.",
       {},
       -1,
       100000,
       "",
       1,
       ""},
      {"HVD_COPY_THREADS",
       ConfigType::kInt,
       "-1",
       "Helper threads per rank that copy a large fused batch (256 KiB or more) into and out of "
       "the host fusion buffer beside the thread running it. -1: the cores the rank counts as "
       "its own (as for HVD_WAIT_POLL_US) beyond its own threads (2; a GPU rank 3), at most 3, so "
       "none where ranks share cores; 0: none.",
       {},
       -1,
       15,
       "",
       1,
       ""},
      {"HVD_SINGLE_RANK_INLINE",
       ConfigType::kBool,
       "1",
       "In a job of one rank, run a CPU tensor's collective on the calling thread at submission: "
       "nothing to negotiate, no hand-off to the background thread (0: every operation goes "
       "through the background thread, as with several ranks).",
       {},
       0,
       0,
       "",
       1,
       ""},
      {"HVD_CACHE_CAPACITY",
       ConfigType::kInt,
       "1024",
       "Negotiated responses kept for the bit-vector fast path (0 turns the cache off).",
       {},
       0,
       1 << 20,
       "cache-capacity",
       1,
       "Response cache capacity (0 disables)."},
      {"HVD_CACHED_LANES",
       ConfigType::kBool,
       "1",
       "Submit an allreduce whose response is cached (every step's tensors from the second step "
       "on) "
       "straight into a slot of its own, with no request and no queue entry to negotiate by name "
       "(0: every tensor takes the ordinary path; for comparisons).",
       {},
       0,
       0,
       "",
       1,
       ""},
      {"HVD_HIERARCHICAL_ALLREDUCE",
       ConfigType::kBool,
       "0",
       "Reduce-scatter in the node, all-reduce across nodes, all-gather in the node.",
       {},
       0,
       0,
       "hierarchical-allreduce",
       1,
       "Use hierarchical all-reduce (flag without value)."},
      {"HVD_GPU_OPERATIONS",
       ConfigType::kEnum,
       "NCCL",
       "Backend for GPU tensors: NCCL, or MPI through host memory.",
       {"NCCL", "MPI"},
       0,
       0,
       "gpu-operations",
       1,
       "Backend for GPU tensors: NCCL or MPI."},
      {"HVD_ENABLE_ASYNC_COMPLETION",
       ConfigType::kBool,
       "0",
       "GPU all-reduce and broadcast: Handle::wait() returns once the operation is queued on the "
       "GPU, and the output is valid in the order of the stream each tensor names (its TensorRef "
       "stream; null: the legacy default stream), which waits for hvd's work; the host does not "
       "wait for the GPU. 0: wait() returns once the GPU work is done (valid on any stream).",
       {},
       0,
       0,
       "",
       1,
       ""},
      {"HVD_COMPRESSION",
       ConfigType::kEnum,
       "none",
       "All-reduce wire compression of float32/float64 tensors: none, fp16 or bf16 (other dtypes "
       "unchanged; CUDA tensors on the NCCL path: fp16 only, float32 sum/average).",
       {"none", "fp16", "bf16"},
       0,
       0,
       "compression",
       1,
       "All-reduce wire compression of float32/float64 tensors: none, fp16 or bf16."},
      {"HVD_DETERMINISTIC",
       ConfigType::kBool,
       "0",
       "Reduce every floating-point sum, average and product element in rank order (0, 1, ...), "
       "whatever its place in the fusion buffer: the same job on the same ranks gives the same "
       "bits on every run, with fusion on (docs/determinism.md). Every rank must set it alike.",
       {},
       0,
       0,
       "deterministic",
       1,
       "Bitwise-reproducible reductions with fusion on (flag without value)."},
      {"HVD_TIMELINE",
       ConfigType::kString,
       "",
       "Path of a Chrome-trace JSON timeline written by rank 0 (empty: off).",
       {},
       0,
       0,
       "timeline-filename",
       1,
       "Write a Chrome-trace timeline to this path."},
      {"HVD_TIMELINE_MARK_CYCLES",
       ConfigType::kBool,
       "0",
       "Mark each background cycle in the timeline.",
       {},
       0,
       0,
       "timeline-mark-cycles",
       1,
       "Mark cycles in the timeline (flag without value)."},
      {"HVD_STALL_CHECK_TIME_SECONDS",
       ConfigType::kDouble,
       "60",
       "Seconds a tensor may wait for ranks that have not submitted it before rank 0 warns (and "
       "again every as many seconds).",
       {},
       0,
       1e9,
       "stall-check-warning-time-seconds",
       1,
       "Seconds before a stall warning."},
      {"HVD_STALL_SHUTDOWN_TIME_SECONDS",
       ConfigType::kDouble,
       "0",
       "Seconds after which stalled tensors fail and the job shuts down (0: never).",
       {},
       0,
       1e9,
       "stall-check-shutdown-time-seconds",
       1,
       "Seconds before a stall fails the job (0: never)."},
      {"HVD_STALL_CHECK_DISABLE",
       ConfigType::kBool,
       "0",
       "Turn the stall inspector off.",
       {},
       0,
       0,
       "",
       1,
       ""},
      {"HVD_STRAGGLER_THRESHOLD_MS",
       ConfigType::kDouble,
       "5",
       "Milliseconds by which a rank must arrive last at a release for hvd::straggler_report() "
       "to name it (below: noise).",
       {},
       0,
       1e9,
       "",
       1,
       ""},
      {"HVD_AUTOTUNE",
       ConfigType::kBool,
       "0",
       "Search the fusion threshold, cycle time and fusion window on the running job during its "
       "first steps, keep the fastest, and log each trial, why the winner won and the line of "
       "settings to pin (docs/tuning.md). Every rank must set it alike.",
       {},
       0,
       0,
       "autotune",
       1,
       "Tune the performance settings on the live job (flag without value)."},
      {"HVD_AUTOTUNE_LOG",
       ConfigType::kString,
       "",
       "Rank 0 writes each autotune trial here as a CSV row (empty: the log lines only).",
       {},
       0,
       0,
       "autotune-log",
       1,
       "CSV file of the autotune trials."},
      {"HVD_AUTOTUNE_WARMUP_STEPS",
       ConfigType::kInt,
       "10",
       "Steps the job runs at its starting settings before the autotune trials begin.",
       {},
       0,
       1000000,
       "",
       1,
       ""},
      {"HVD_AUTOTUNE_STEPS_PER_TRIAL",
       ConfigType::kInt,
       "10",
       "Steps timed per autotune trial (after one step for the settings to take effect); the "
       "trial's score is their median.",
       {},
       1,
       1000000,
       "",
       1,
       ""},
      {"HVD_LOG_LEVEL",
       ConfigType::kEnum,
       "warning",
       "Least severe log level printed.",
       {"trace", "debug", "info", "warning", "error"},
       0,
       0,
       "log-level",
       1,
       "Log level: trace, debug, info, warning or error."},
      {"HVD_START_TIMEOUT",
       ConfigType::kDouble,
       "30",
       "Seconds init() waits for every rank before failing.",
       {},
       1,
       1e6,
       "start-timeout",
       1,
       "Seconds to wait for all ranks at start."},
      {"HVD_PEER_TIMEOUT_SECONDS",
       ConfigType::kDouble,
       "30",
       "Seconds without a sign of life from a peer before it is declared lost.",
       {},
       1,
       1e6,
       "",
       1,
       ""},
      {"HVD_CONTROL_TOPOLOGY",
       ConfigType::kEnum,
       "auto",
       "Shape of the per-cycle bit-vector exchange: tree (a binomial tree, rank 0 handles "
       "2*ceil(log2 n) messages per cycle), star (every rank through rank 0, 2*(n-1), in two hops) "
       "or auto (star below 64 ranks, tree from 64); all name lost ranks the same way "
       "(docs/scaling.md).",
       {"auto", "tree", "star"},
       0,
       0,
       "",
       1,
       ""},
      {"HVD_ON_PEER_LOSS",
       ConfigType::kEnum,
       "exit",
       "When a lost peer leaves this rank blocked in MPI: log the error, call the program's "
       "hvd::set_peer_loss_handler if any, then exit (status 70), abort (core dump) or none "
       "(stay blocked until the launcher ends the job).",
       {"exit", "abort", "none"},
       0,
       0,
       "",
       1,
       ""},
      {"HVD_TERMINATE_HANDLER",
       ConfigType::kBool,
       "1",
       "An uncaught hvd::Error ends the process with its message and exit status 1 instead of "
       "abort().",
       {},
       0,
       0,
       "",
       1,
       ""},
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
  auto get_enum = [&](const char* n) {
    const ConfigVar& v = *find_config_var(n);
    auto [who, val] = raw(v);
    return parse_enum(who, val, v.choices);
  };
  auto get_string = [&](const char* n) { return raw(*find_config_var(n)).second; };

  Config c;
  c.fusion_threshold_bytes = get_int("HVD_FUSION_THRESHOLD");
  c.cycle_time_ms = get_double("HVD_CYCLE_TIME");
  c.fusion_window_us = get_double("HVD_FUSION_WINDOW");
  c.cache_capacity = get_int("HVD_CACHE_CAPACITY");
  c.single_rank_inline = get_bool("HVD_SINGLE_RANK_INLINE");
  c.cached_lanes = get_bool("HVD_CACHED_LANES");
  c.wait_poll_us = get_int("HVD_WAIT_POLL_US");
  c.copy_threads = get_int("HVD_COPY_THREADS");
  c.hierarchical_allreduce = get_bool("HVD_HIERARCHICAL_ALLREDUCE");
  c.gpu_operations = get_enum("HVD_GPU_OPERATIONS");
  c.compression = get_enum("HVD_COMPRESSION");
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
  c.log_level = get_enum("HVD_LOG_LEVEL");
  c.start_timeout_seconds = get_double("HVD_START_TIMEOUT");
  c.peer_timeout_seconds = get_double("HVD_PEER_TIMEOUT_SECONDS");
  c.on_peer_loss = get_enum("HVD_ON_PEER_LOSS");
  c.control_topology = get_enum("HVD_CONTROL_TOPOLOGY");
  c.terminate_handler = get_bool("HVD_TERMINATE_HANDLER");
  return c;
}

}  // namespace hvd
