// hvdrun's command line, and the real hvdrun binary: --dry-run output, --help, --check-build,
// a program's exit status passing through a real mpirun, and missing-program / missing-mpirun
// errors.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hvd/error.h"
#include "tests/support/test_util.h"
#include "launcher/options.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the hvdrun binary under test"
#endif

namespace hvd::launcher {
namespace {

using Args = std::vector<std::string>;

using hvdtest::error_of;

TEST(CommandLine, ProgramArgumentsAreNotParsed) {
  CommandLine cl = parse_command_line({"-np", "4", "./train", "--epochs", "3", "-H", "x"});
  EXPECT_EQ(cl.launch.num_proc, "4");
  EXPECT_EQ(cl.launch.command, (Args{"./train", "--epochs", "3", "-H", "x"}));
  EXPECT_TRUE(cl.launch.hosts.empty());
}

TEST(CommandLine, DoubleDashEndsOptions) {
  CommandLine cl = parse_command_line({"--np=2", "--", "-weird", "--dry-run"});
  EXPECT_EQ(cl.launch.num_proc, "2");
  EXPECT_EQ(cl.launch.command, (Args{"-weird", "--dry-run"}));
  EXPECT_FALSE(cl.dry_run);
}

TEST(CommandLine, HostsFlagsAndSpellings) {
  CommandLine cl =
      parse_command_line({"-H", "a:2,b:2", "--dry-run", "--oversubscribe", "--mpi-args", "-x FOO=1",
                          "--network-interface=eth0", "--launcher", "srun", "prog"});
  EXPECT_EQ(cl.launch.hosts, "a:2,b:2");
  EXPECT_TRUE(cl.dry_run);
  EXPECT_TRUE(cl.launch.oversubscribe);
  EXPECT_EQ(cl.launch.mpi_args, "-x FOO=1");
  EXPECT_EQ(cl.launch.network_interface, "eth0");
  EXPECT_EQ(cl.launch.launcher, "srun");
  EXPECT_EQ(cl.launch.command, (Args{"prog"}));
  EXPECT_EQ(parse_command_line({"-Hx:3", "p"}).launch.hosts, "x:3");
  EXPECT_EQ(parse_command_line({"--hosts", "y", "p"}).launch.hosts, "y");
  EXPECT_EQ(parse_command_line({"--num-proc", "3", "p"}).launch.num_proc, "3");
  EXPECT_EQ(parse_command_line({"--hostfile", "h.txt", "p"}).launch.hostfile, "h.txt");
  EXPECT_EQ(parse_command_line({"p"}).launch.launcher, "mpirun");
}

TEST(CommandLine, TuningFlagsComeFromTheRegistry) {
  CommandLine cl = parse_command_line({"--fusion-threshold-mb",
                                       "32",
                                       "--cycle-time-ms",
                                       "2",
                                       "--cache-capacity",
                                       "0",
                                       "--hierarchical-allreduce",
                                       "--timeline-filename",
                                       "/tmp/t.json",
                                       "--stall-check-warning-time-seconds",
                                       "10",
                                       "--stall-check-shutdown-time-seconds",
                                       "20",
                                       "--log-level",
                                       "debug",
                                       "--gpu-operations",
                                       "MPI",
                                       "--start-timeout",
                                       "60",
                                       "p"});
  EXPECT_EQ(cl.launch.tuning, (EnvVars{{"HVD_FUSION_THRESHOLD", "32"},
                                       {"HVD_CYCLE_TIME", "2"},
                                       {"HVD_CACHE_CAPACITY", "0"},
                                       {"HVD_HIERARCHICAL_ALLREDUCE", "1"},
                                       {"HVD_GPU_OPERATIONS", "MPI"},
                                       {"HVD_TIMELINE", "/tmp/t.json"},
                                       {"HVD_STALL_CHECK_TIME_SECONDS", "10"},
                                       {"HVD_STALL_SHUTDOWN_TIME_SECONDS", "20"},
                                       {"HVD_LOG_LEVEL", "debug"},
                                       {"HVD_START_TIMEOUT", "60"}}));
  // A bool flag left out is not exported at all.
  EXPECT_TRUE(parse_command_line({"p"}).launch.tuning.empty());
}

TEST(CommandLine, OutputFilename) {
  EXPECT_EQ(parse_command_line({"--output-filename", "logs", "p"}).launch.output_filename, "logs");
  EXPECT_EQ(parse_command_line({"-output-filename=l2", "p"}).launch.output_filename, "l2");
  EXPECT_EQ(parse_command_line({"p", "--output-filename", "x"}).launch.output_filename, "");
  EXPECT_EQ(error_of([] {
              parse_command_line({"--output-filename", "", "p"});
            }),
            "--output-filename needs a directory, e.g. --output-filename logs.");
}

TEST(CommandLine, ErrorsNameTheOption) {
  EXPECT_NE(error_of([] {
              parse_command_line({"--no-such-flag", "p"});
            }).find("no-such-flag"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_command_line({"-np"}); }).find("np"), std::string::npos);
  EXPECT_NE(error_of([] {
              parse_command_line({"-np", "1", "--num-proc", "2", "p"});
            }).find("more than once"),
            std::string::npos);
}

TEST(CommandLine, FaultToleranceFlags) {
  CommandLine cl = parse_command_line({"p"});
  EXPECT_EQ(cl.stop_grace_seconds, 60);
  EXPECT_EQ(cl.restarts, 0);
  EXPECT_EQ(cl.min_np, 1);
  cl = parse_command_line(
      {"--stop-grace", "5", "--restarts=2", "--min-np", "3", "-np", "4", "p", "--restarts", "9"});
  EXPECT_EQ(cl.stop_grace_seconds, 5);
  EXPECT_EQ(cl.restarts, 2);
  EXPECT_EQ(cl.min_np, 3);
  EXPECT_EQ(cl.launch.command, (Args{"p", "--restarts", "9"}));
  EXPECT_EQ(parse_command_line({"--stop-grace", "0", "p"}).stop_grace_seconds, 0);
  EXPECT_NE(error_of([] {
              parse_command_line({"--restarts", "-1", "p"});
            }).find("--restarts"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_command_line({"--min-np", "0", "p"});
            }).find("--min-np"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_command_line({"--stop-grace", "x", "p"});
            }).find("--stop-grace"),
            std::string::npos);
}

TEST(CommandLine, HelpIsGroupedAndListsEveryTuningFlag) {
  // Descriptions wrap: compare with runs of blanks collapsed to one space.
  std::string help;
  for (char c : help_text()) {
    bool blank = c == ' ' || c == '\n';
    if (!(blank && !help.empty() && help.back() == ' ')) help += blank ? ' ' : c;
  }
  for (const char* s : {"Usage: hvdrun",
                        "General arguments",
                        "Host arguments",
                        "Tuneable parameter arguments",
                        "Timeline arguments",
                        "Stall check arguments",
                        "Logging arguments",
                        "Launcher and MPI arguments",
                        "-np, --num-proc N",
                        "-H, --hosts HOST:SLOTS",
                        "--hostfile",
                        "--mpi-args",
                        "--dry-run",
                        "--check-build",
                        "--network-interface",
                        "--oversubscribe",
                        "--launcher",
                        "--output-filename DIR",
                        "One log per rank under DIR",
                        "Fault tolerance arguments",
                        "--stop-grace SECONDS",
                        "--restarts N",
                        "--min-np M",
                        "becomes a SIGUSR1 to mpirun",
                        "Default: 60."})
    EXPECT_NE(help.find(s), std::string::npos) << s;
  for (const ConfigVar& v : config_registry()) {
    if (*v.launcher_flag == '\0') continue;
    EXPECT_NE(help.find(std::string("--") + v.launcher_flag), std::string::npos) << v.name;
    EXPECT_NE(help.find(std::string("Sets ") + v.name), std::string::npos) << v.name;
  }
  EXPECT_NE(help.find("Default: 64."), std::string::npos);  // fusion threshold in MiB
}

// ---- the real binary ----------------------------------------------------------------------

struct RunResult {
  int status = -1;
  std::string output;  // stdout and stderr together
};

// Runs hvdrun with `args` (no shell) and extra environment `env` (NAME=VALUE, "-NAME" unsets).
// In a forked child: output to the pipe `fds`, `env` applied ("-NAME" unsets NAME), then hvdrun.
[[noreturn]] void exec_hvdrun(const int fds[2], const Args& args, const Args& env) {
  ::dup2(fds[1], 1);
  ::dup2(fds[1], 2);
  ::close(fds[0]);
  ::close(fds[1]);
  for (const auto& kv : env) {
    if (kv[0] == '-')
      ::unsetenv(kv.c_str() + 1);
    else
      ::putenv(const_cast<char*>(kv.c_str()));
  }
  std::vector<char*> argv{const_cast<char*>(HVDRUN_PATH)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(HVDRUN_PATH, argv.data());
  ::_exit(255);
}

RunResult run_hvdrun(const Args& args, const Args& env = {}) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    exec_hvdrun(fds, args, env);
  }
  ::close(fds[1]);
  RunResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    r.output.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Without a SLURM allocation, forwarded variables or a custom mpirun leaking in from the test
// runner's environment.
const Args kCleanEnv = {"-SLURM_JOB_ID", "-HVD_MPIRUN", "-NCCL_DEBUG", "-HVD_LOG_LEVEL"};

TEST(HvdrunBinary, DryRunPrintsTheExactCommandOnOneLine) {
  Args env = kCleanEnv;
  env.push_back("NCCL_TEST_FORWARD=1");
  RunResult r = run_hvdrun({"--dry-run", "-np", "2", "-H", "localhost:2", "--fusion-threshold-mb",
                            "8", "--hierarchical-allreduce", "--mpi-args", "--report-bindings",
                            "--", "/bin/sh", "-c", "exit 3"},
                           env);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_FALSE(r.output.empty());
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  std::string expected_tail =
      "mpirun -np 2 -H localhost:2 --bind-to none --map-by slot "
      "-x HVD_FUSION_THRESHOLD=8388608 -x HVD_HIERARCHICAL_ALLREDUCE=1 ";
  EXPECT_NE(r.output.find(expected_tail), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-x NCCL_TEST_FORWARD "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--report-bindings /bin/sh -c 'exit 3'\n"), std::string::npos)
      << r.output;
  if (::geteuid() == 0)
    EXPECT_EQ(r.output.rfind("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun", 0),
              0u)
        << r.output;
  else
    EXPECT_EQ(r.output.rfind("mpirun", 0), 0u) << r.output;
}

TEST(HvdrunBinary, DryRunErrorsExitNonZeroWithOneLine) {
  RunResult r = run_hvdrun({"--dry-run", "-np", "5", "-H", "a:2,b:2", "prog"}, kCleanEnv);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("-np 5 is more than the 4 slots"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  r = run_hvdrun({"--dry-run", "-np", "1", "--cycle-time-ms", "x", "prog"}, kCleanEnv);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--cycle-time-ms='x'"), std::string::npos) << r.output;
}

// The examples: refused before anything starts, in one line, naming the host, the
// character and where it came from.
TEST(HvdrunBinary, BadHostNamesAreRefusedAtOnce) {
  RunResult r = run_hvdrun({"--dry-run", "-np", "2", "-H", "node1;id:2", "./a.out"}, kCleanEnv);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.rfind("hvdrun: error: invalid -H host spec 'node1;id:2': host name "
                           "'node1;id' has ';' at character 6",
                           0),
            0u)
      << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;

  const std::string path = ::testing::TempDir() + "hvd_cli_bad_hostfile.txt";
  std::ofstream(path) << "node1`id` slots=2\n";
  r = run_hvdrun({"--dry-run", "--hostfile", path, "./a.out"}, kCleanEnv);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.rfind("hvdrun: error: hostfile " + path +
                               " line 1: host name 'node1`id`' has '`' at character 6",
                           0),
            0u)
      << r.output;
  std::remove(path.c_str());

  r = run_hvdrun({"--dry-run", "./a.out"}, {"SLURM_JOB_ID=3", "SLURM_JOB_NODELIST=n1,n$2",
                                            "SLURM_TASKS_PER_NODE=1(x2)", "-HVD_MPIRUN"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.rfind("hvdrun: error: SLURM_JOB_NODELIST: invalid SLURM hostlist 'n1,n$2' at "
                           "position 3: host name 'n$2' has '$' at character 2",
                           0),
            0u)
      << r.output;
}

// --output-filename through a real mpirun: one folder per rank with its stdout and stderr, the
// output still shown by hvdrun.
TEST(HvdrunBinary, OutputFilenameWritesOneLogPerRank) {
  char tmpl[] = "/tmp/hvd-test-output.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string logs = dir + "/logs";
  RunResult r = run_hvdrun(
      {"-np", "2", "-H", "localhost:2", "--oversubscribe", "--output-filename", logs, "--",
       "/bin/sh", "-c", "echo out $OMPI_COMM_WORLD_RANK; echo err $OMPI_COMM_WORLD_RANK >&2"},
      kCleanEnv);
  EXPECT_EQ(r.status, 0) << r.output;
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  for (int rank : {0, 1}) {
    const std::string base = logs + "/1/rank." + std::to_string(rank) + "/";
    EXPECT_EQ(read(base + "stdout"), "out " + std::to_string(rank) + "\n") << base << r.output;
    EXPECT_EQ(read(base + "stderr"), "err " + std::to_string(rank) + "\n") << base << r.output;
    EXPECT_NE(r.output.find("out " + std::to_string(rank)), std::string::npos) << r.output;
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(HvdrunBinary, VersionHelpAndCheckBuild) {
  RunResult r = run_hvdrun({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("hvdrun (hvd) "), std::string::npos) << r.output;
  r = run_hvdrun({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("Tuneable parameter arguments"), std::string::npos);
  r = run_hvdrun({"--check-build"});
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"Available controllers", "[X] MPI", "NCCL", "CUDA", "cuDNN"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
}

TEST(HvdrunBinary, ProgramExitStatusPassesThroughMpirun) {
  RunResult r = run_hvdrun(
      {"-np", "2", "-H", "localhost:2", "--oversubscribe", "--", "/bin/sh", "-c", "exit 3"},
      kCleanEnv);
  EXPECT_EQ(r.status, 3) << r.output;
  r = run_hvdrun({"-np", "2", "-H", "localhost:2", "--oversubscribe", "true"}, kCleanEnv);
  EXPECT_EQ(r.status, 0) << r.output;
  r = run_hvdrun({"-np", "1", "false"}, kCleanEnv);
  EXPECT_EQ(r.status, 1) << r.output;
}

TEST(HvdrunBinary, TuningVariablesReachEveryRank) {
  RunResult r = run_hvdrun({"-np", "2", "--oversubscribe", "--cycle-time-ms", "7", "--", "/bin/sh",
                            "-c", "echo rank=$OMPI_COMM_WORLD_RANK cycle=$HVD_CYCLE_TIME"},
                           kCleanEnv);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank=0 cycle=7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank=1 cycle=7"), std::string::npos) << r.output;
}

TEST(HvdrunBinary, MissingProgramIsOneLineError) {
  RunResult r = run_hvdrun({"-np", "1", "hvd-no-such-program-xyz"}, kCleanEnv);
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.output.find("program 'hvd-no-such-program-xyz' not found"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
}

TEST(HvdrunBinary, MissingMpirunIsOneLineError) {
  Args env = kCleanEnv;
  env.push_back("HVD_MPIRUN=/nonexistent/mpirun");
  RunResult r = run_hvdrun({"-np", "1", "true"}, env);
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.output.find("cannot find '/nonexistent/mpirun'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("HVD_MPIRUN"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
}

TEST(HvdrunBinary, NoProgramIsAnError) {
  RunResult r = run_hvdrun({"-np", "1"}, kCleanEnv);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("no program given"), std::string::npos) << r.output;
}

// ---- fault tolerance: SIGTERM, the exit status of a saved job, --restarts ------------------

// hvdrun started in the background, its stdout and stderr on one pipe.
struct Background {
  pid_t pid = -1;
  int fd = -1;
  std::string output;

  // Reads until `text` has appeared `times` times (or `seconds` pass); false on a timeout.
  bool read_until(const std::string& text, int times, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    auto count = [&] {
      int n = 0;
      for (size_t at = output.find(text); at != std::string::npos; at = output.find(text, at + 1))
        ++n;
      return n;
    };
    char buf[4096];
    while (count() < times) {
      if (std::chrono::steady_clock::now() > end) return false;
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) return false;
      output.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  int finish() {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
      output.append(buf, static_cast<size_t>(n));
    ::close(fd);
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
};

Background start_hvdrun(const Args& args, const Args& env) {
  Background b;
  int fds[2];
  if (::pipe(fds) != 0) return b;
  b.pid = ::fork();
  if (b.pid == 0) {
    ::setpgid(0, 0);  // as under a batch system: no terminal's signals
    exec_hvdrun(fds, args, env);
  }
  ::close(fds[1]);
  b.fd = fds[0];
  return b;
}

// A rank that saves on SIGUSR1 (exit 75), as hvd trainers do, and says so; on SIGTERM it exits
// 143 at once.
const char* kSavingRank =
    "trap 'echo rank $OMPI_COMM_WORLD_RANK saved; exit 75' USR1; "
    "trap 'echo rank $OMPI_COMM_WORLD_RANK terminated; exit 143' TERM; echo READY; "
    "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done";

TEST(HvdrunBinary, SaveAndRequeueStatusPassesThroughMpirun) {
  RunResult r = run_hvdrun(
      {"-np", "2", "-H", "localhost:2", "--oversubscribe", "--", "/bin/sh", "-c", "exit 75"},
      kCleanEnv);
  EXPECT_EQ(r.status, 75) << r.output;
}

TEST(HvdrunBinary, SigtermBecomesSigusr1SoTheRanksCanSave) {
  Background b =
      start_hvdrun({"-np", "2", "--oversubscribe", "--", "/bin/sh", "-c", kSavingRank}, kCleanEnv);
  ASSERT_TRUE(b.read_until("READY", 2, 30)) << b.output;
  ::kill(b.pid, SIGTERM);
  EXPECT_EQ(b.finish(), 75) << b.output;
  EXPECT_NE(b.output.find("hvdrun: SIGTERM: sending SIGUSR1 to mpirun"), std::string::npos)
      << b.output;
  EXPECT_NE(b.output.find("rank 0 saved"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("rank 1 saved"), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("rank 0 terminated"), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("rank 1 terminated"), std::string::npos) << b.output;
}

TEST(HvdrunBinary, SigtermFollowsAfterTheStopGraceOrASecondSigterm) {
  // Ranks that ignore SIGUSR1: SIGTERM reaches them after --stop-grace.
  const char* deaf =
      "trap '' USR1; trap 'echo terminated; exit 143' TERM; echo READY; "
      "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done";
  Background b =
      start_hvdrun({"--stop-grace", "1", "-np", "1", "--", "/bin/sh", "-c", deaf}, kCleanEnv);
  ASSERT_TRUE(b.read_until("READY", 1, 30)) << b.output;
  const auto sent = std::chrono::steady_clock::now();
  ::kill(b.pid, SIGTERM);
  EXPECT_NE(b.finish(), 0) << b.output;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_GE(s, 1.0) << b.output;
  EXPECT_LT(s, 15.0) << b.output;
  EXPECT_NE(b.output.find("1 s after SIGUSR1 (--stop-grace 1): forwarding SIGTERM"),
            std::string::npos)
      << b.output;
  EXPECT_NE(b.output.find("terminated"), std::string::npos) << b.output;

  b = start_hvdrun({"-np", "1", "--", "/bin/sh", "-c", deaf}, kCleanEnv);  // grace 60 s
  ASSERT_TRUE(b.read_until("READY", 1, 30)) << b.output;
  const auto first = std::chrono::steady_clock::now();
  ::kill(b.pid, SIGTERM);
  ASSERT_TRUE(b.read_until("SIGTERM follows in 60 s", 1, 10)) << b.output;
  ::kill(b.pid, SIGTERM);
  EXPECT_NE(b.finish(), 0) << b.output;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count(), 15.0);
  EXPECT_NE(b.output.find("hvdrun: second SIGTERM: forwarding it to mpirun."), std::string::npos)
      << b.output;
}

// A fake mpirun and rsh agent in a temporary folder: the first job on a host list with "gone"
// loses rank 1 the way hvd's survivors report it (its sentence, exit 70); the agent cannot reach
// "gone". Every mpirun command line is logged.
struct FakeCluster {
  std::string dir;
  FakeCluster() {
    char tmpl[] = "/tmp/hvd-test-restart.XXXXXX";
    dir = ::mkdtemp(tmpl);
    write("mpirun",
          "#!/bin/sh\n"
          "echo \"$*\" >> " +
              dir +
              "/calls\n"
              "case \"$*\" in *gone*) echo '[hvd rank 0] ERROR rank 1 was lost: no answer for 5 s. "
              "The process died' >&2; exit 70;; esac\n"
              "echo job ran on \"$*\"\n");
    write("agent", "#!/bin/sh\ncase \"$1\" in gone) exit 255;; esac\nexit 0\n");
  }
  ~FakeCluster() { std::system(("rm -rf " + dir).c_str()); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    ::chmod((dir + "/" + name).c_str(), 0755);
  }
  std::vector<std::string> calls() const {
    std::ifstream in(dir + "/calls");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  Args env() const {
    Args e = kCleanEnv;
    e.push_back("HVD_MPIRUN=" + dir + "/mpirun");
    return e;
  }
  Args args(Args extra) const {
    Args a = {"-H", "localhost:1,gone:1", "--mpi-args", "--mca plm_rsh_agent " + dir + "/agent"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("./train");
    return a;
  }
};

TEST(HvdrunBinary, RestartsOnTheHostsThatStillAnswer) {
  FakeCluster c;
  RunResult r = run_hvdrun(c.args({"--restarts", "1"}), c.env());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("hvdrun: restart 1/1: dropped host gone (rank 1 lost, host does not "
                          "answer); relaunching 1 rank on localhost:1\n"),
            std::string::npos)
      << r.output;
  auto calls = c.calls();
  ASSERT_EQ(calls.size(), 2u) << r.output;
  EXPECT_NE(calls[0].find("-np 2 -H localhost:1,gone:1"), std::string::npos) << calls[0];
  EXPECT_NE(calls[1].find("-np 1 -H localhost:1"), std::string::npos) << calls[1];
  EXPECT_NE(calls[1].find("./train"), std::string::npos) << calls[1];
}

// Each restart logs to its own folder under --output-filename: the lost attempt's logs stay.
TEST(HvdrunBinary, RestartsKeepTheLostAttemptsLogs) {
  FakeCluster c;
  RunResult r = run_hvdrun(c.args({"--restarts", "1", "--output-filename", "/tmp/l"}), c.env());
  EXPECT_EQ(r.status, 0) << r.output;
  auto calls = c.calls();
  ASSERT_EQ(calls.size(), 2u) << r.output;
  EXPECT_NE(calls[0].find("--output-filename /tmp/l "), std::string::npos) << calls[0];
  EXPECT_NE(calls[1].find("--output-filename /tmp/l/restart.1 "), std::string::npos) << calls[1];
}

TEST(HvdrunBinary, NoRestartWithoutRestartsOrBelowMinNp) {
  FakeCluster c;
  RunResult r = run_hvdrun(c.args({}), c.env());
  EXPECT_EQ(r.status, 70) << r.output;
  EXPECT_EQ(c.calls().size(), 1u);
  EXPECT_EQ(r.output.find("restart"), std::string::npos) << r.output;

  FakeCluster d;
  r = run_hvdrun(d.args({"--restarts", "1", "--min-np", "2"}), d.env());
  EXPECT_EQ(r.status, 70) << r.output;
  EXPECT_EQ(d.calls().size(), 1u);
  EXPECT_NE(r.output.find("hvdrun: error: restart 1/1 not possible: dropped host gone (rank 1 "
                          "lost, host does not answer) leaves localhost:1 (1 slots), fewer than "
                          "--min-np 2 ranks"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace hvd::launcher
