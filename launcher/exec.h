#pragma once

// Running a launch plan: PATH lookup, the local-host test and the final execvp. The only part of
// hvdrun with side effects; launch_plan.h decides everything before it.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/hostfile.h"
#include "launcher/job_loss.h"
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

// How supervise_job watches mpirun.
struct SuperviseOptions {
  // After Open MPI's notice that it is aborting the job: how long before hvdrun ends mpirun.
  int abort_grace_seconds = 10;
  // After the first SIGTERM to hvdrun (turned into SIGUSR1 to mpirun, which forwards it to every
  // rank: hvd trainers then stop at an agreed step, save and exit 75): how long before SIGTERM
  // follows. 0: SIGTERM is forwarded at once, as it is.
  int stop_grace_seconds = 60;
};

// How a supervised job ended.
struct JobOutcome {
  int exit_code = 0;            // mpirun's status (128 + signal when killed), or 1/126/127 below
  bool abort_ended = false;     // hvdrun ended mpirun's abort after abort_grace_seconds
  bool stop_requested = false;  // SIGINT/SIGTERM/SIGHUP/SIGQUIT reached hvdrun during the job
  JobLoss loss;                 // what the job's stderr said about lost ranks and nodes
};

// Runs plan.argv (mpirun) as a child instead of exec'ing it, and supervises it:
//  - the child's stdout is this process's; its stderr is copied through as it comes, while
//    hvdrun reads it line by line for lost ranks and nodes (job_loss.h) and for Open MPI's notice
//    that the job is being aborted. Open MPI's abort waits until every node's daemon confirms;
//    when a node is gone (dead host, link down) that can take as long as TCP's retransmissions
//    (many minutes), so `abort_grace_seconds` after the notice hvdrun ends mpirun and its local
//    children itself, with a message saying why, and the status is 1;
//  - signals sent to hvdrun with kill() are passed on, except SIGTERM: the first one becomes
//    SIGUSR1 (one line on stderr says so) and SIGTERM follows `stop_grace_seconds` later if the
//    job has not ended by then, or at once on a second SIGTERM. (Open MPI answers a SIGTERM by
//    killing the ranks within seconds, too soon for them to save a checkpoint.) A terminal's
//    Ctrl-C has already reached mpirun, which is in hvdrun's process group, and is not sent
//    twice (mpirun takes a second SIGINT as "terminate forcibly").
// The signal handlers only count signals (lock-free atomics); the loop that polls the child acts
// on them. Returns 127/126 (with one line on stderr) when mpirun cannot be run.
JobOutcome supervise_job(const LaunchPlan& plan, const SuperviseOptions& options);

// supervise_job with the default stop grace; returns the exit status only.
int supervise_plan(const LaunchPlan& plan, int abort_grace_seconds);

// How many SIGINT/SIGTERM/SIGHUP/SIGQUIT have reached hvdrun since supervision began (0 before):
// a restart is not started after one.
unsigned stop_signals_received();

// Whether `text` holds one of Open MPI's notices that it is aborting the job (unit-tested).
bool is_abort_notice(std::string_view text);

}  // namespace hvd::launcher
