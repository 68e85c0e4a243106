#pragma once

// hvdrun's launch plan: what to execute, computed from the parsed options and the caller's
// environment without running anything (so that it is unit-testable and --dry-run shows exactly
// what would run).
//
// Decisions (docs/launcher.md explains each):
//  - Hosts: -H, else --hostfile, else the SLURM allocation (SLURM_JOB_ID set), else localhost with
//    -np slots. -H and --hostfile together are an error. -np defaults to the total slots when hosts
//    are given or come from SLURM; -np above the total slots is an error unless --oversubscribe.
//  - mpirun gets `-np N -H h:s,... --bind-to none --map-by slot` (the last two unless --mpi-args
//    chooses a binding / mapping itself): every rank busy-polls its progress engine, and Open MPI
//    binds the first rank of each node to core 0, so ranks sharing a machine would take turns on
//    one core.
//  - Tuning flags (registry entries with a launcher_flag) become `-x HVD_NAME=VALUE`; every
//    NCCL_*, HVD_* and HOROVOD_* variable of the caller is forwarded with `-x NAME` (a flag wins
//    over the caller's variable of the same meaning). With srun they are set in srun's own
//    environment instead, which srun propagates.
//  - --output-filename DIR: mpirun gets `--output-filename DIR` (DIR/1/rank.N/stdout and stderr,
//    the output still copied to hvdrun's own); srun gets `--output=DIR/rank.%t.stdout
//    --error=DIR/rank.%t.stderr` and hvdrun creates DIR first.
//  - As root (and only then) OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set
//    in mpirun's environment.
//
// Errors: hvd::InvalidArgumentError naming the flag, the value and the fix.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cluster/hostfile.h"
#include "common/config.h"

namespace hvd::launcher {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// What the user asked for on the command line (options.cc fills it).
struct LaunchOptions {
  std::optional<std::string> num_proc;  // -np, validated by the plan
  std::string hosts;                    // -H a:2,b:4
  std::string hostfile;                 // --hostfile PATH
  std::string launcher = "mpirun";      // mpirun | srun
  std::string mpi_args;                 // --mpi-args "...", split like a shell would
  std::string network_interface;        // --network-interface IF
  std::string output_filename;          // --output-filename DIR: one log per rank under DIR
  bool oversubscribe = false;
  // Tuning flags as given: registry variable name ("HVD_CYCLE_TIME") -> flag value ("1" for a
  // bool flag). Validated and scaled by the plan.
  EnvVars tuning;
  std::vector<std::string> command;  // the program and its arguments
};

// The caller's world, passed in so that tests can fake it.
struct LaunchEnvironment {
  EnvLookup lookup;      // single variables: HVD_MPIRUN, SLURM_*
  EnvVars variables;     // the whole environment, for forwarding NCCL_*/HVD_*/HOROVOD_*
  bool is_root = false;  // geteuid() == 0
};

struct LaunchPlan {
  std::vector<std::string> argv;          // argv[0] is the launcher binary (searched on PATH)
  EnvVars env;                            // set in the launcher's own environment before exec
  std::vector<cluster::HostSlots> hosts;  // where ranks go
  std::string hosts_from;                 // "-H", "--hostfile", "SLURM allocation", "localhost"
  int num_proc = 0;
  size_t command_index = 0;  // argv[command_index] is the user's program
  // A directory hvdrun creates before it starts the launcher (srun with --output-filename: SLURM
  // does not create the directories of --output; mpirun creates its own). "" for none.
  std::string create_directory;
};

LaunchPlan build_launch_plan(const LaunchOptions& options, const LaunchEnvironment& env);

// The tuning variables a plan exports: flag values validated with the registry's parsers and
// scaled to the variable's unit (--fusion-threshold-mb 32 -> HVD_FUSION_THRESHOLD=33554432).
EnvVars tuning_variables(const EnvVars& tuning);

// One shell line that does what the plan does: `NAME=VALUE ... mpirun ...`, every word quoted
// only when it needs to be.
std::string format_command(const LaunchPlan& plan);

// POSIX shell quoting: safe words unchanged, anything else in single quotes.
std::string shell_quote(const std::string& word);

// Splits --mpi-args like a shell without expansions: blanks separate words; '...' is literal;
// "..." allows \" \\ \$ \` escapes; a backslash outside quotes escapes the next character.
// An unterminated quote is an InvalidArgumentError.
std::vector<std::string> split_args(const std::string& text);

}  // namespace hvd::launcher
