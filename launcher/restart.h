#pragma once

// hvdrun --restarts N --min-np M: when a job ends because it lost a rank or a node, find the lost
// hosts, drop them and start the same command on the hosts left (mpirun launcher only).
//
// The sequence (run_supervised):
//  1. the job ends with a loss (is_job_loss): hvd's peer-loss exit 70, or mpirun reporting a rank
//     killed by SIGKILL or a lost daemon, or hvdrun ending an abort that hung on an unreachable
//     node; and hvdrun was not asked to stop (no SIGTERM/SIGINT/... during the job);
//  2. every host of the plan that is not this machine is probed through the agent mpirun starts
//     its daemons with (probe_command: the --mca plm_rsh_agent of --mpi-args or
//     OMPI_MCA_plm_rsh_agent, srun inside a SLURM allocation, else ssh), all at once, each with a
//     time limit; a host whose probe fails or times out "does not answer";
//  3. plan_restart drops the hosts that do not answer; when every host answers (the processes
//     died, the host lives), it drops the hosts of the lost ranks instead (rank -> host from the
//     plan's placement, ranks filling the hosts in order as --map-by slot does, or the node
//     mpirun named);
//  4. -np becomes the smaller of -np and the slots left; below --min-np, or when no host could be
//     blamed, hvdrun stops with the job's status and a line saying why;
//  5. one line says what was dropped, why, and the new world, and the same command runs again
//     (an hvd trainer with --checkpoint-dir resumes from its newest checkpoint by itself); with
//     --output-filename DIR, restart k logs under DIR/restart.k, keeping the lost attempt's logs.
// plan_restart and probe_command are pure and unit-tested (tests/launcher/test_launcher_plan.cc).

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cluster/hostfile.h"
#include "common/config.h"
#include "hvd/stop.h"
#include "launcher/exec.h"
#include "launcher/job_loss.h"
#include "launcher/launch_plan.h"

namespace hvd::launcher {

// hvd's peer-loss exit status (comm/watchdog.h kPeerLossExitCode): the survivors of a lost rank.
inline constexpr int kExitPeerLoss = 70;
// How long a host has to answer the probe.
inline constexpr int kProbeTimeoutSeconds = 10;

struct RestartPolicy {
  int restarts = 0;  // --restarts
  int min_np = 1;    // --min-np
};

// Whether the job ended because it lost a rank or a node (step 1 above).
bool is_job_loss(const JobOutcome& outcome);

// The host of `rank` when ranks fill the hosts in order (--map-by slot); nullopt beyond the slots.
std::optional<std::string> host_of_rank(const std::vector<cluster::HostSlots>& hosts, int rank);

// Whether two host names are the same machine: equal ignoring case, or equal short names
// ("node2" and "node2.cluster").
bool same_host(const std::string& a, const std::string& b);

struct RestartRequest {
  std::vector<cluster::HostSlots> hosts;  // the job's hosts
  int num_proc = 0;                       // the job's -np
  JobLoss loss;
  std::set<std::string> silent_hosts;  // hosts that did not answer the probe
  int min_np = 1;
  int attempt = 1;  // this restart's number, 1-based
  int restarts = 1;
};

struct RestartDecision {
  bool ok = false;
  std::vector<cluster::HostSlots> hosts;  // the new world (ok)
  int num_proc = 0;                       // (ok)
  std::vector<std::string> dropped;
  // One line without "hvdrun: " and newline: "restart 1/1: dropped host node2 (ranks 2, 3 lost,
  // host does not answer); relaunching 2 ranks on node1:2", or why there is no restart.
  std::string message;
};

RestartDecision plan_restart(const RestartRequest& request);

// The probe of `host`: a command that exits 0 when the host answers (argv, no shell).
// `slurm_allocation`: the hosts came from SLURM (mpirun starts its daemons with srun there).
std::vector<std::string> probe_command(const LaunchOptions& options, bool slurm_allocation,
                                       const EnvLookup& env, const std::string& host,
                                       int timeout_seconds);

// Runs `command(host)` for every host that is not this machine, all at once, and returns the
// hosts whose command did not exit 0 within `timeout_seconds` (their probes are killed).
std::set<std::string> silent_hosts(
    const std::vector<cluster::HostSlots>& hosts,
    const std::function<std::vector<std::string>(const std::string&)>& command,
    int timeout_seconds);

// Supervises `plan` (supervise_job) and, under `policy`, restarts it on the hosts left after a
// loss. Returns the last job's exit status.
int run_supervised(const LaunchOptions& options, const LaunchEnvironment& env, LaunchPlan plan,
                   const SuperviseOptions& supervise, const RestartPolicy& policy, bool verbose);

}  // namespace hvd::launcher
