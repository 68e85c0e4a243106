// hvdrun: starts an hvd job. Parses the command line (options.cc), computes the launch plan
// (launch_plan.cc) and runs mpirun as a supervised child (exec.h: supervise_plan) or replaces
// itself with srun by execvp; the job's exit status is hvdrun's exit status. Exit codes of its own:
// 2 for a bad command line or launch request, 127 when mpirun/srun or the program cannot be found.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include "hvd/config.h"
#include "hvd/error.h"
#include "launcher/exec.h"
#include "launcher/launch_plan.h"
#include "launcher/options.h"
#include "launcher/restart.h"

extern char** environ;

namespace {

constexpr int kAbortGraceSeconds = 10;

using hvd::launcher::EnvVars;

EnvVars current_environment() {
  EnvVars vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return vars;
}

void print_check_build() {
  auto mark = [](bool on) { return on ? "[X]" : "[ ]"; };
  auto version = [](bool on, const char* v) {
    return on ? (*v ? std::string(v) : std::string("version unknown"))
              : std::string("not built in");
  };
  std::string mpi = HVD_MPI_LIBRARY_VERSION_STRING;
  if (auto nl = mpi.find('\n'); nl != std::string::npos) mpi.erase(nl);
  std::cout << "hvd v" << HVD_VERSION_STRING << ":\n\n"
            << "Available controllers:\n"
            << "    [X] MPI     " << (mpi.empty() ? "version unknown" : mpi) << "\n\n"
            << "Available tensor operations:\n"
            << "    [X] MPI     CPU tensors (and GPU tensors staged through host memory)\n"
            << "    " << mark(HVD_HAVE_NCCL) << " NCCL    "
            << version(HVD_HAVE_NCCL, HVD_NCCL_VERSION_STRING) << "\n\n"
            << "Available GPU libraries:\n"
            << "    " << mark(HVD_HAVE_CUDA) << " CUDA    "
            << version(HVD_HAVE_CUDA, HVD_CUDA_VERSION_STRING) << "\n"
            << "    " << mark(HVD_HAVE_CUDNN) << " cuDNN   "
            << version(HVD_HAVE_CUDNN, HVD_CUDNN_VERSION_STRING) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hvd::launcher;
  CommandLine cl;
  try {
    cl = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const hvd::Error& e) {
    std::cerr << "hvdrun: error: " << e.what() << "\n";
    return 2;
  }
  if (cl.help) {
    std::cout << help_text();
    return 0;
  }
  if (cl.version) {
    std::cout << "hvdrun (hvd) " << HVD_VERSION_STRING << "\n";
    return 0;
  }
  if (cl.check_build) {
    print_check_build();
    return 0;
  }

  LaunchPlan plan;
  LaunchEnvironment env{hvd::process_env_lookup(), current_environment(), ::geteuid() == 0};
  try {
    plan = build_launch_plan(cl.launch, env);
  } catch (const hvd::Error& e) {
    std::cerr << "hvdrun: error: " << e.what() << "\n";
    return 2;
  }
  if (cl.min_np > plan.num_proc) {
    std::cerr << "hvdrun: error: --min-np " << cl.min_np << " is more than the job's "
              << plan.num_proc << " ranks (-np): lower --min-np.\n";
    return 2;
  }
  if (cl.dry_run) {
    std::cout << format_command(plan) << "\n";
    return 0;
  }

  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  if (!find_executable(plan.argv[0], path)) {
    if (cl.launch.launcher == "srun")
      std::cerr << "hvdrun: error: cannot find 'srun' on PATH: run inside a SLURM allocation "
                   "with SLURM installed, or use --launcher mpirun.\n";
    else
      std::cerr << "hvdrun: error: cannot find '" << plan.argv[0]
                << "' on PATH: install Open MPI (mpirun) or set HVD_MPIRUN to its full path.\n";
    return 127;
  }
  // The program can only be checked here when it will run here; remote hosts may have it where
  // this machine does not.
  const std::string& program = plan.argv[plan.command_index];
  if (all_hosts_local(plan.hosts) && !find_executable(program, path)) {
    if (program.find('/') == std::string::npos)
      std::cerr << "hvdrun: error: program '" << program << "' not found on PATH: check its "
                << "name, or give its path (e.g. ./" << program << ").\n";
    else
      std::cerr << "hvdrun: error: program '" << program << "' not found or not executable: "
                << "check the path and its execute permission.\n";
    return 127;
  }
  if (!plan.create_directory.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(plan.create_directory, ec);
    if (ec || !std::filesystem::is_directory(plan.create_directory)) {
      std::cerr << "hvdrun: error: cannot create the --output-filename directory '"
                << plan.create_directory
                << "': " << (ec ? ec.message() : std::string("a file of that name exists"))
                << ".\n";
      return 2;
    }
  }
  if (cl.verbose) std::cerr << "hvdrun: " << format_command(plan) << "\n";
  // mpirun runs as a supervised child (exec.h supervise_job: a job that lost a node is ended 10 s
  // after mpirun starts aborting it, SIGTERM becomes SIGUSR1 first; restart.h: --restarts); srun
  // replaces hvdrun, as SLURM handles lost nodes and signals itself.
  if (cl.launch.launcher == "mpirun") {
    SuperviseOptions supervise;
    supervise.abort_grace_seconds = kAbortGraceSeconds;
    supervise.stop_grace_seconds = cl.stop_grace_seconds;
    return run_supervised(cl.launch, env, plan, supervise, {cl.restarts, cl.min_np}, cl.verbose);
  }
  if (cl.restarts > 0)
    std::cerr << "hvdrun: note: --restarts applies to --launcher mpirun; under srun a lost node "
                 "ends the job step, and the batch script's requeue (cluster/slurm/) restarts "
                 "the job, which resumes from its checkpoint.\n";
  return exec_plan(plan);
}
