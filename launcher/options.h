#pragma once

// hvdrun's command line (Boost.Program_options), grouped in --help like horovodrun's.
//
//   hvdrun [options] [--] PROGRAM [ARGS...]
//
// Everything from the first word that is not an option (or after "--") belongs to the program
// and is never interpreted by hvdrun, so `hvdrun -np 2 ./train --epochs 3` works. Options accept
// one or two dashes for long names (`-np 4`, `--np 4`, `--num-proc=4`). The tuning flags are
// generated from the configuration registry (common/config.h): every ConfigVar with a
// launcher_flag becomes a flag with its launcher_doc as help; boolean variables are flags without
// a value.
//
// Errors (unknown option, missing value) are hvd::InvalidArgumentError naming the option.

#include <string>
#include <vector>

#include "launcher/launch_plan.h"

namespace hvd::launcher {

struct CommandLine {
  LaunchOptions launch;
  bool help = false;
  bool version = false;
  bool check_build = false;
  bool dry_run = false;
  bool verbose = false;
  // Fault tolerance (mpirun launcher): exec.h SuperviseOptions, restart.h RestartPolicy.
  int stop_grace_seconds = 60;  // --stop-grace
  int restarts = 0;             // --restarts
  int min_np = 1;               // --min-np
};

CommandLine parse_command_line(const std::vector<std::string>& args);  // args without argv[0]

std::string help_text();

}  // namespace hvd::launcher
