#pragma once

// Running a launch plan: PATH lookup, the local-host test and the final execvp. The only part of
// hvdrun with side effects; launch_plan.h decides everything before it.

#include <optional>
#include <string>
#include <string_view>
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

// Runs plan.argv (mpirun) as a child instead and supervises it: the child's stdout is this
// process's, its stderr is copied through line for line while hvdrun watches it for Open MPI's
// notice that the job is being aborted. Open MPI's abort waits until every node's daemon confirms;
// when a node is gone (dead host, link down) that can take as long as TCP's retransmissions
// (many minutes), so `abort_grace_seconds` after the notice hvdrun ends mpirun itself and returns
// 1 with a message saying why. Signals sent to hvdrun are passed on. Returns mpirun's exit status
// (128 + signal when it was killed), or 127/126 when it cannot be run.
int supervise_plan(const LaunchPlan& plan, int abort_grace_seconds);

// Whether `text` holds one of Open MPI's notices that it is aborting the job (unit-tested).
bool is_abort_notice(std::string_view text);

}  // namespace hvd::launcher
