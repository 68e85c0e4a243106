// libFuzzer target: load_config (common/config.h) with a fuzzed environment: any registered
// variable, in its HVD_ or HOROVOD_ spelling (both at once included), or an unknown name, set to
// fuzzed text.
//
// Properties checked:
//  - a rejection is hvd::Error whose message names an HVD_ or HOROVOD_ variable;
//  - an accepted configuration holds every number inside its registry bounds and every enum at
//    one of its choices;
//  - with an empty environment, the result is the registry's defaults (and does not throw).

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/config.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const hvd::ConfigVar& var(const char* name) {
  const hvd::ConfigVar* v = hvd::find_config_var(name);
  if (v == nullptr) hvd::fuzz::fail(__FILE__, __LINE__, std::string("not registered: ") + name);
  return *v;
}

void check_range(const char* name, double x) {
  const auto& v = var(name);
  HVD_FUZZ_CHECK(x >= v.min && x <= v.max, std::string(name) + "=" + std::to_string(x));
}

void check_choice(const char* name, const std::string& x) {
  const auto& v = var(name);
  HVD_FUZZ_CHECK(std::find(v.choices.begin(), v.choices.end(), x) != v.choices.end(),
                 std::string(name) + "=" + x);
}

void check_config(const hvd::Config& c) {
  check_range("HVD_FUSION_THRESHOLD", static_cast<double>(c.fusion_threshold_bytes));
  check_range("HVD_CYCLE_TIME", c.cycle_time_ms);
  check_range("HVD_CACHE_CAPACITY", static_cast<double>(c.cache_capacity));
  check_choice("HVD_GPU_OPERATIONS", hvd::to_string(c.gpu_operations));
  check_choice("HVD_COMPRESSION", hvd::compression_name(c.compression));
  check_range("HVD_STALL_CHECK_TIME_SECONDS", c.stall_check_time_seconds);
  check_range("HVD_STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_time_seconds);
  check_choice("HVD_LOG_LEVEL", hvd::log_level_name(c.log_level));
  check_choice("HVD_ON_PEER_LOSS", hvd::to_string(c.on_peer_loss));
  check_choice("HVD_CONTROL_TOPOLOGY", hvd::to_string(c.control_topology));
  check_range("HVD_START_TIMEOUT", c.start_timeout_seconds);
  check_range("HVD_PEER_TIMEOUT_SECONDS", c.peer_timeout_seconds);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const hvd::Config defaults = [] {
    hvd::Config c = hvd::load_config([](const std::string&) { return std::nullopt; });
    check_config(c);
    return c;
  }();
  (void)defaults;

  FuzzedDataProvider in(data, size);
  const auto& registry = hvd::config_registry();
  std::map<std::string, std::string> env;
  while (in.remaining_bytes() > 0 && env.size() < 64) {
    std::size_t i = in.ConsumeIntegralInRange<std::size_t>(0, registry.size());
    std::string name;
    if (i == registry.size()) {
      name = in.ConsumeRandomLengthString(24);
    } else {
      name = registry[i].name;
      if (in.ConsumeBool()) name = "HOROVOD_" + name.substr(4);
    }
    env[name] = in.ConsumeRandomLengthString(40);
  }
  hvd::fuzz::guarded([&] {
    try {
      hvd::Config c = hvd::load_config([&](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      });
      check_config(c);
    } catch (const hvd::Error& e) {
      std::string m = e.what();
      HVD_FUZZ_CHECK(m.find("HVD_") != std::string::npos || m.find("HOROVOD_") != std::string::npos,
                     "message names no variable: " + m);
      throw;
    }
  });
  return 0;
}
