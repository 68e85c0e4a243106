#pragma once

// Running a launch plan: PATH lookup, the local-host test and the final execvp. The only part of
// hvdrun with side effects; launch_plan.h decides everything before it.

#include <optional>
#include <string>
#include <vector>

#include "cluster/hostfile.h"
#include "launcher/launch_plan.h"

namespace hvd::launcher {

// The path execvp would run for `name`: itself when it contains '/', else the first executable
// regular file named `name` in the directories of `path_var` (an empty entry means ".").
std::optional<std::string> find_executable(const std::string& name, const std::string& path_var);

// Whether every host is this machine (localhost, 127.x.y.z, ::1, or this machine's hostname).
bool all_hosts_local(const std::vector<cluster::HostSlots>& hosts);

// Sets plan.env in this process and replaces it with plan.argv by execvp (no shell). Returns only
// on failure, with the exit status hvdrun should use (127: not found, 126: not executable) after
// printing one line to stderr.
int exec_plan(const LaunchPlan& plan);

}  // namespace hvd::launcher
