#pragma once

// Helpers shared by the unit tests (no MPI).

#include <map>
#include <optional>
#include <string>

#include "common/config.h"
#include "hvd/error.h"

namespace hvdtest {

// The message of the InvalidArgumentError that `f()` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hvd::InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

// An environment of exactly `vars`, for load_config() and the cluster resolvers.
inline hvd::EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace hvdtest
