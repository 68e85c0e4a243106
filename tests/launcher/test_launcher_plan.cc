// hvdrun's launch plans, built from options and a faked environment without running anything.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>
#include <map>
#include <string>

#include "hvd/error.h"
#include "tests/support/test_util.h"
#include "common/ranks.h"
#include "launcher/exec.h"
#include "launcher/job_loss.h"
#include "launcher/launch_plan.h"
#include "launcher/restart.h"

namespace hvd::launcher {
namespace {

using Args = std::vector<std::string>;

struct FakeEnv {
  std::map<std::string, std::string> vars;
  bool root = false;

  LaunchEnvironment get() const {
    LaunchEnvironment e;
    e.lookup = [v = vars](const std::string& n) -> std::optional<std::string> {
      auto it = v.find(n);
      if (it == v.end()) return std::nullopt;
      return it->second;
    };
    e.variables.assign(vars.begin(), vars.end());
    e.is_root = root;
    return e;
  }
};

LaunchOptions with_command(Args cmd = {"./train", "--epochs", "3"}) {
  LaunchOptions o;
  o.command = std::move(cmd);
  return o;
}

using hvdtest::error_of;

// Index of the first occurrence of `seq` as a contiguous run in `argv`, or -1.
long find_seq(const Args& argv, const Args& seq) {
  auto it = std::search(argv.begin(), argv.end(), seq.begin(), seq.end());
  return it == argv.end() ? -1 : static_cast<long>(it - argv.begin());
}

size_t count_of(const Args& argv, const std::string& word) {
  return static_cast<size_t>(std::count(argv.begin(), argv.end(), word));
}

TEST(LaunchPlan, LocalhostWithNpSlots) {
  LaunchOptions o = with_command();
  o.num_proc = "3";
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  EXPECT_EQ(p.argv, (Args{"mpirun", "-np", "3", "-H", "localhost:3", "--bind-to", "none",
                          "--map-by", "slot", "./train", "--epochs", "3"}));
  EXPECT_EQ(p.hosts_from, "localhost");
  EXPECT_EQ(p.num_proc, 3);
  EXPECT_EQ(p.command_index, 9u);
  EXPECT_TRUE(p.env.empty());
}

TEST(LaunchPlan, NpRequiredWithoutHosts) {
  std::string msg = error_of([] { build_launch_plan(with_command(), FakeEnv{}.get()); });
  EXPECT_NE(msg.find("-np is required"), std::string::npos) << msg;
}

TEST(LaunchPlan, NpMustBePositiveInteger) {
  for (const char* bad : {"0", "-1", "two", ""}) {
    LaunchOptions o = with_command();
    o.num_proc = bad;
    std::string msg = error_of([&] { build_launch_plan(o, FakeEnv{}.get()); });
    EXPECT_NE(msg.find("-np='" + std::string(bad) + "'"), std::string::npos) << msg;
  }
}

TEST(LaunchPlan, HostSpecGivesHostsAndDefaultNp) {
  LaunchOptions o = with_command();
  o.hosts = "a:2,b:4,c";
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  EXPECT_EQ(p.num_proc, 7);
  EXPECT_GE(find_seq(p.argv, {"-np", "7", "-H", "a:2,b:4,c:1"}), 0);
  EXPECT_EQ(p.hosts_from, "-H");
}

TEST(LaunchPlan, NpAboveSlotsNamesBothNumbers) {
  LaunchOptions o = with_command();
  o.hosts = "a:2,b:2";
  o.num_proc = "5";
  std::string msg = error_of([&] { build_launch_plan(o, FakeEnv{}.get()); });
  EXPECT_NE(msg.find("-np 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 slots"), std::string::npos) << msg;
  // Allowed, and passed on, when the user asks for oversubscription.
  o.oversubscribe = true;
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  EXPECT_EQ(count_of(p.argv, "--oversubscribe"), 1u);
}

TEST(LaunchPlan, NpBelowSlotsIsFine) {
  LaunchOptions o = with_command();
  o.hosts = "a:4";
  o.num_proc = "1";
  EXPECT_GE(find_seq(build_launch_plan(o, FakeEnv{}.get()).argv, {"-np", "1", "-H", "a:4"}), 0);
}

TEST(LaunchPlan, NoOversubscribeUnlessAsked) {
  LaunchOptions o = with_command();
  o.num_proc = "2";
  EXPECT_EQ(count_of(build_launch_plan(o, FakeEnv{}.get()).argv, "--oversubscribe"), 0u);
}

TEST(LaunchPlan, HostfileIsReadInOrder) {
  std::string path = ::testing::TempDir() + "hvd_launch_plan_hosts.txt";
  {
    std::ofstream out(path);
    out << "# test\nzeta slots=2\nalpha\n";
  }
  LaunchOptions o = with_command();
  o.hostfile = path;
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  EXPECT_GE(find_seq(p.argv, {"-np", "3", "-H", "zeta:2,alpha:1"}), 0);
  EXPECT_EQ(p.hosts_from, "--hostfile");
  o.hosts = "a:1";
  EXPECT_NE(error_of([&] { build_launch_plan(o, FakeEnv{}.get()); }).find("choose one"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(LaunchPlan, SlurmAllocationWhenNoHostsGiven) {
  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "77"},
              {"SLURM_JOB_NODELIST", "node[01-02],gpu7"},
              {"SLURM_TASKS_PER_NODE", "2(x2),4"}};
  LaunchPlan p = build_launch_plan(with_command(), env.get());
  EXPECT_EQ(p.hosts_from, "SLURM allocation");
  EXPECT_GE(find_seq(p.argv, {"-np", "8", "-H", "node01:2,node02:2,gpu7:4"}), 0);
  // Explicit hosts win over the allocation.
  LaunchOptions o = with_command();
  o.hosts = "x:1";
  EXPECT_EQ(build_launch_plan(o, env.get()).hosts_from, "-H");
  // -np within the allocation.
  o = with_command();
  o.num_proc = "9";
  EXPECT_NE(error_of([&] { build_launch_plan(o, env.get()); }).find("8 slots"), std::string::npos);
}

TEST(LaunchPlan, TuningFlagsBecomeScaledVariables) {
  LaunchOptions o = with_command();
  o.num_proc = "2";
  o.tuning = {{"HVD_FUSION_THRESHOLD", "32"},
              {"HVD_CYCLE_TIME", "2.5"},
              {"HVD_CACHE_CAPACITY", "0"},
              {"HVD_HIERARCHICAL_ALLREDUCE", "1"},
              {"HVD_GPU_OPERATIONS", "mpi"},
              {"HVD_TIMELINE", "/tmp/t l.json"},
              {"HVD_STALL_CHECK_TIME_SECONDS", "30"},
              {"HVD_STALL_SHUTDOWN_TIME_SECONDS", "120"},
              {"HVD_LOG_LEVEL", "DEBUG"},
              {"HVD_START_TIMEOUT", "90"}};
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  for (const Args& x : std::vector<Args>{{"-x", "HVD_FUSION_THRESHOLD=33554432"},  // 32 MiB
                                         {"-x", "HVD_CYCLE_TIME=2.5"},
                                         {"-x", "HVD_CACHE_CAPACITY=0"},
                                         {"-x", "HVD_HIERARCHICAL_ALLREDUCE=1"},
                                         {"-x", "HVD_GPU_OPERATIONS=MPI"},
                                         {"-x", "HVD_TIMELINE=/tmp/t l.json"},
                                         {"-x", "HVD_STALL_CHECK_TIME_SECONDS=30"},
                                         {"-x", "HVD_STALL_SHUTDOWN_TIME_SECONDS=120"},
                                         {"-x", "HVD_LOG_LEVEL=debug"},
                                         {"-x", "HVD_START_TIMEOUT=90"}})
    EXPECT_GE(find_seq(p.argv, x), 0) << x[1];
  // Variables come before the program.
  EXPECT_LT(find_seq(p.argv, {"-x", "HVD_START_TIMEOUT=90"}), static_cast<long>(p.command_index));
}

TEST(LaunchPlan, FractionalFusionThresholdRoundsToBytes) {
  EXPECT_EQ(tuning_variables({{"HVD_FUSION_THRESHOLD", "0.5"}}),
            (EnvVars{{"HVD_FUSION_THRESHOLD", "524288"}}));
  EXPECT_EQ(tuning_variables({{"HVD_FUSION_THRESHOLD", "0"}}),
            (EnvVars{{"HVD_FUSION_THRESHOLD", "0"}}));
}

TEST(LaunchPlan, BadTuningValuesNameTheFlag) {
  struct Case {
    const char* var;
    const char* value;
    const char* mention;
  };
  for (const Case& c : {Case{"HVD_FUSION_THRESHOLD", "-1", "--fusion-threshold-mb='-1'"},
                        Case{"HVD_CYCLE_TIME", "fast", "--cycle-time-ms='fast'"},
                        Case{"HVD_CACHE_CAPACITY", "1.5", "--cache-capacity='1.5'"},
                        Case{"HVD_GPU_OPERATIONS", "gloo", "NCCL|MPI"},
                        Case{"HVD_LOG_LEVEL", "loud", "--log-level='loud'"},
                        Case{"HVD_TIMELINE", "", "--timeline-filename"},
                        Case{"HVD_START_TIMEOUT", "0", "--start-timeout='0'"}}) {
    LaunchOptions o = with_command();
    o.num_proc = "1";
    o.tuning = {{c.var, c.value}};
    std::string msg = error_of([&] { build_launch_plan(o, FakeEnv{}.get()); });
    EXPECT_NE(msg.find(c.mention), std::string::npos) << c.var << ": " << msg;
  }
}

TEST(LaunchPlan, CallerVariablesAreForwardedSortedAndFlagsWin) {
  FakeEnv env;
  env.vars = {{"NCCL_DEBUG", "INFO"},
              {"HVD_CYCLE_TIME", "5"},
              {"HOROVOD_FUSION_THRESHOLD", "1024"},
              {"HOROVOD_LOG_LEVEL", "info"},
              {"HVD_MPIRUN", "mpirun"},
              {"PATH", "/usr/bin"},
              {"NCCLX", "1"}};
  LaunchOptions o = with_command();
  o.num_proc = "2";
  o.tuning = {{"HVD_FUSION_THRESHOLD", "1"}};
  LaunchPlan p = build_launch_plan(o, env.get());
  // The flag sets both spellings so that the runtime does not see them disagree.
  EXPECT_GE(find_seq(p.argv, {"-x", "HVD_FUSION_THRESHOLD=1048576"}), 0);
  EXPECT_GE(find_seq(p.argv, {"-x", "HOROVOD_FUSION_THRESHOLD=1048576"}), 0);
  EXPECT_EQ(count_of(p.argv, "HOROVOD_FUSION_THRESHOLD"), 0u);
  // Forwarded by name, sorted.
  long a = find_seq(p.argv, {"-x", "HOROVOD_LOG_LEVEL"});
  long b = find_seq(p.argv, {"-x", "HVD_CYCLE_TIME"});
  long c = find_seq(p.argv, {"-x", "NCCL_DEBUG"});
  EXPECT_GE(a, 0);
  EXPECT_GT(b, a);
  EXPECT_GT(c, b);
  // Not forwarded: launcher-only, unrelated, lookalike.
  EXPECT_EQ(count_of(p.argv, "HVD_MPIRUN"), 0u);
  EXPECT_EQ(count_of(p.argv, "PATH"), 0u);
  EXPECT_EQ(count_of(p.argv, "NCCLX"), 0u);
}

TEST(LaunchPlan, MpiArgsPassedThroughAndBindingRespected) {
  LaunchOptions o = with_command();
  o.num_proc = "2";
  o.mpi_args = "--mca btl self,tcp -x 'FOO=a b' --report-bindings";
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  long at = find_seq(p.argv, {"--mca", "btl", "self,tcp", "-x", "FOO=a b", "--report-bindings"});
  EXPECT_GE(at, 0);
  EXPECT_EQ(at + 6, static_cast<long>(p.command_index));
  EXPECT_GE(find_seq(p.argv, {"--bind-to", "none"}), 0);

  for (const char* own : {"--bind-to core", "-bind-to socket", "--bind-to=core",
                          "--mca hwloc_base_binding_policy core"}) {
    o.mpi_args = own;
    p = build_launch_plan(o, FakeEnv{}.get());
    EXPECT_LT(find_seq(p.argv, {"--bind-to", "none"}), 0) << own;
  }
  o.mpi_args = "--map-by node";
  EXPECT_EQ(count_of(build_launch_plan(o, FakeEnv{}.get()).argv, "slot"), 0u);
  o.mpi_args = "-x 'unterminated";
  EXPECT_NE(error_of([&] { build_launch_plan(o, FakeEnv{}.get()); }).find("never closed"),
            std::string::npos);
}

TEST(LaunchPlan, NetworkInterfaceSetsMpiAndNccl) {
  FakeEnv env;
  env.vars = {{"NCCL_SOCKET_IFNAME", "lo"}};
  LaunchOptions o = with_command();
  o.num_proc = "2";
  o.network_interface = "eth1";
  LaunchPlan p = build_launch_plan(o, env.get());
  EXPECT_GE(find_seq(p.argv, {"--mca", "btl_tcp_if_include", "eth1"}), 0);
  EXPECT_GE(find_seq(p.argv, {"--mca", "oob_tcp_if_include", "eth1"}), 0);
  EXPECT_GE(find_seq(p.argv, {"-x", "NCCL_SOCKET_IFNAME=eth1"}), 0);
  EXPECT_LT(find_seq(p.argv, {"-x", "NCCL_SOCKET_IFNAME"}), 0);  // the caller's value is replaced
}

TEST(LaunchPlan, RootVariablesOnlyAsRoot) {
  LaunchOptions o = with_command();
  o.num_proc = "1";
  FakeEnv env;
  EXPECT_TRUE(build_launch_plan(o, env.get()).env.empty());
  env.root = true;
  LaunchPlan p = build_launch_plan(o, env.get());
  EXPECT_EQ(p.env,
            (EnvVars{{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}}));
  EXPECT_EQ(count_of(p.argv, "--allow-run-as-root"), 0u);
}

TEST(LaunchPlan, HvdMpirunOverridesBinary) {
  FakeEnv env;
  env.vars = {{"HVD_MPIRUN", "/opt/ompi/bin/mpirun"}};
  LaunchOptions o = with_command();
  o.num_proc = "1";
  EXPECT_EQ(build_launch_plan(o, env.get()).argv.front(), "/opt/ompi/bin/mpirun");
}

TEST(LaunchPlan, SrunLauncher) {
  FakeEnv env;
  env.vars = {
      {"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  LaunchOptions o = with_command({"./t"});
  o.launcher = "srun";
  o.tuning = {{"HVD_CYCLE_TIME", "3"}};
  o.network_interface = "ib0";
  LaunchPlan p = build_launch_plan(o, env.get());
  EXPECT_EQ(p.argv, (Args{"srun", "--mpi=pmix", "-n", "4", "--cpu-bind=none", "./t"}));
  EXPECT_EQ(p.env, (EnvVars{{"HVD_CYCLE_TIME", "3"},
                            {"NCCL_SOCKET_IFNAME", "ib0"},
                            {"OMPI_MCA_btl_tcp_if_include", "ib0"},
                            {"OMPI_MCA_oob_tcp_if_include", "ib0"}}));
  o = with_command({"./t"});
  o.launcher = "srun";
  o.hosts = "n1:1,n2:1";
  EXPECT_GE(find_seq(build_launch_plan(o, env.get()).argv, {"-n", "2", "--nodelist=n1,n2"}), 0);
  o.launcher = "ssh";
  EXPECT_NE(error_of([&] { build_launch_plan(o, env.get()); }).find("--launcher='ssh'"),
            std::string::npos);
}

TEST(LaunchPlan, OutputFilenameGoesToTheLauncher) {
  LaunchOptions o = with_command({"./t"});
  o.num_proc = "2";
  o.output_filename = "logs";
  o.network_interface = "eth0";
  LaunchPlan p = build_launch_plan(o, FakeEnv{}.get());
  // Open MPI's own flag, in the documented place: after the mapping, before --mca and -x.
  EXPECT_EQ(p.argv, (Args{"mpirun",
                          "-np",
                          "2",
                          "-H",
                          "localhost:2",
                          "--bind-to",
                          "none",
                          "--map-by",
                          "slot",
                          "--output-filename",
                          "logs",
                          "--mca",
                          "btl_tcp_if_include",
                          "eth0",
                          "--mca",
                          "oob_tcp_if_include",
                          "eth0",
                          "-x",
                          "NCCL_SOCKET_IFNAME=eth0",
                          "./t"}));
  EXPECT_EQ(p.create_directory, "");  // mpirun creates it on every node
  // Without the flag, nothing.
  o.output_filename.clear();
  EXPECT_EQ(count_of(build_launch_plan(o, FakeEnv{}.get()).argv, "--output-filename"), 0u);

  // srun: one file per task and stream (%t: the rank), '%' kept literal; hvdrun makes the folder.
  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_TASKS_PER_NODE", "2"}};
  o = with_command({"./t"});
  o.launcher = "srun";
  o.output_filename = "/shared/run%1";
  p = build_launch_plan(o, env.get());
  EXPECT_EQ(p.argv, (Args{"srun", "--mpi=pmix", "-n", "2", "--cpu-bind=none",
                          "--output=/shared/run%%1/rank.%t.stdout",
                          "--error=/shared/run%%1/rank.%t.stderr", "./t"}));
  EXPECT_EQ(p.create_directory, "/shared/run%1");
}

// Host names are checked wherever the plan reads them, and the error says where they came from.
TEST(LaunchPlan, BadHostNamesAreRefusedNamingTheSource) {
  LaunchOptions o = with_command();
  o.hosts = "node1;id:2";
  std::string msg = error_of([&] { build_launch_plan(o, FakeEnv{}.get()); });
  EXPECT_EQ(msg.rfind("invalid -H host spec 'node1;id:2': host name 'node1;id' has ';'", 0), 0u)
      << msg;

  const std::string path = ::testing::TempDir() + "hvd_launch_plan_bad_hosts.txt";
  std::ofstream(path) << "good slots=1\nnode1`id` slots=2\n";
  o = with_command();
  o.hostfile = path;
  msg = error_of([&] { build_launch_plan(o, FakeEnv{}.get()); });
  EXPECT_EQ(msg.rfind("hostfile " + path + " line 2: host name 'node1`id`' has '`'", 0), 0u) << msg;
  std::remove(path.c_str());

  FakeEnv env;
  env.vars = {{"SLURM_JOB_ID", "77"},
              {"SLURM_JOB_NODELIST", "node[01-02],gpu 7,x|y"},
              {"SLURM_TASKS_PER_NODE", "1(x4)"}};
  msg = error_of([&] { build_launch_plan(with_command(), env.get()); });
  EXPECT_EQ(msg.rfind("SLURM_JOB_NODELIST: invalid SLURM hostlist 'node[01-02],gpu 7,x|y' at "
                      "position 18: host name 'x|y' has '|'",
                      0),
            0u)
      << msg;
}

TEST(LaunchPlan, MissingProgramIsAnError) {
  LaunchOptions o = with_command({});
  o.num_proc = "1";
  EXPECT_NE(error_of([&] { build_launch_plan(o, FakeEnv{}.get()); }).find("no program"),
            std::string::npos);
}

TEST(ShellQuote, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(shell_quote("mpirun"), "mpirun");
  EXPECT_EQ(shell_quote("HVD_X=1,a:2/b.c-d@e%f+g"), "HVD_X=1,a:2/b.c-d@e%f+g");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
}

TEST(FormatCommand, EnvPrefixThenQuotedArgv) {
  LaunchPlan p;
  p.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}};
  p.argv = {"mpirun", "-np", "2", "sh", "-c", "exit 3"};
  EXPECT_EQ(format_command(p), "OMPI_ALLOW_RUN_AS_ROOT=1 mpirun -np 2 sh -c 'exit 3'");
}

TEST(SplitArgs, QuotesAndEscapes) {
  EXPECT_EQ(split_args(""), Args{});
  EXPECT_EQ(split_args("   "), Args{});
  EXPECT_EQ(split_args(" a  b\tc "), (Args{"a", "b", "c"}));
  EXPECT_EQ(split_args("-x 'A=1 2' \"B=\\\"q\\\" $x\""), (Args{"-x", "A=1 2", "B=\"q\" $x"}));
  EXPECT_EQ(split_args("a'b'\"c\"d"), (Args{"abcd"}));
  EXPECT_EQ(split_args("''"), (Args{""}));
  EXPECT_EQ(split_args("a\\ b"), (Args{"a b"}));
  EXPECT_NE(error_of([] { split_args("\"open"); }).find("position 0"), std::string::npos);
  EXPECT_NE(error_of([] { split_args("a 'open"); }).find("position 2"), std::string::npos);
}

}  // namespace
}  // namespace hvd::launcher

// ---- supervise_plan: mpirun as a supervised child ----------------------------------------------
namespace {
hvd::launcher::LaunchPlan shell_plan(const std::string& script) {
  hvd::launcher::LaunchPlan p;
  p.argv = {"/bin/sh", "-c", script};
  return p;
}
}  // namespace

TEST(Supervise, RecognisesOpenMpisAbortNotices) {
  using hvd::launcher::is_abort_notice;
  EXPECT_TRUE(
      is_abort_notice("a non-zero exit code. Per user-direction, the job has been aborted.\n"));
  EXPECT_TRUE(is_abort_notice("mpirun: abort is already in progress...hit ctrl-c again"));
  EXPECT_TRUE(is_abort_notice("ORTE has lost communication with a remote daemon."));
  EXPECT_TRUE(is_abort_notice(
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9"));
  EXPECT_FALSE(is_abort_notice("rank 0: error: allreduce of 'x' failed"));
  EXPECT_FALSE(is_abort_notice(""));
}

TEST(Supervise, PassesTheExitStatusThrough) {
  EXPECT_EQ(hvd::launcher::supervise_plan(shell_plan("echo out; echo err >&2; exit 3"), 5), 3);
  EXPECT_EQ(hvd::launcher::supervise_plan(shell_plan("exit 0"), 5), 0);
  EXPECT_EQ(hvd::launcher::supervise_plan(shell_plan("kill -9 $$"), 5), 128 + 9);
}

TEST(Supervise, MissingProgramIs127) {
  hvd::launcher::LaunchPlan p;
  p.argv = {"/nonexistent/hvd-no-such-mpirun"};
  EXPECT_EQ(hvd::launcher::supervise_plan(p, 5), 127);
}

TEST(Supervise, EndsAnAbortThatNeverFinishes) {
  // A "mpirun" that announces an abort (split across two writes) and then hangs, as Open MPI does
  // when a node's daemon cannot be reached: ended `grace` seconds later with status 1.
  const auto start = std::chrono::steady_clock::now();
  int rc = hvd::launcher::supervise_plan(
      shell_plan("printf 'Per user-direction, the job has ' >&2; sleep 0.3; printf 'been "
                 "aborted.\\n' >&2; sleep 60"),
      1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rc, 1);
  EXPECT_LT(s, 10.0) << "the hung abort was not ended";
  EXPECT_GE(s, 1.0) << "ended before the grace period";
}

// ---- --restarts: reading the job's losses, the new world, the probes -------------------------
namespace hvd::launcher {
namespace {

using Ranks = std::vector<int>;
using Hosts = std::vector<cluster::HostSlots>;

TEST(LostRanks, ParsesEveryFormOfTheLostRankSentence) {
  // Exactly what the ranks print (common/ranks.h), in the lines they print it in.
  EXPECT_EQ(parse_lost_ranks(lost_ranks_message({2}, "no answer for 5 s")), (Ranks{2}));
  EXPECT_EQ(parse_lost_ranks(lost_ranks_message({2, 3}, "x")), (Ranks{2, 3}));
  EXPECT_EQ(parse_lost_ranks(lost_ranks_message({0, 1, 2, 5}, "x")), (Ranks{0, 1, 2, 5}));
  EXPECT_EQ(parse_lost_ranks("[hvd rank 0] ERROR allreduce of 'x' did not complete: " +
                             lost_ranks_message({1}, "no answer")),
            (Ranks{1}));
  EXPECT_EQ(parse_lost_ranks("rank 0: error: ranks 4-6, 9 were lost: rank 0 had no answer"),
            (Ranks{4, 5, 6, 9}));
  // A list cut short names the ranks it shows.
  Ranks many;
  for (int r = 0; r < 40; r += 2) many.push_back(r);
  auto cut = parse_lost_ranks(lost_ranks_message(many, "x"));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->size(), 16u);
  EXPECT_FALSE(parse_lost_ranks("rank 0: loss 0.25 at step 10"));
  EXPECT_FALSE(parse_lost_ranks("[hvd rank 1] rank 2 was slow"));
  EXPECT_FALSE(parse_lost_ranks(""));
}

TEST(LostRanks, ScannerReadsSentencesAndMpirunsNoticesAcrossPieces) {
  JobLossScanner s;
  s.feed("rank 0: step 5\n[hvd rank 0] ERROR ranks 2");  // a line split across two reads
  s.feed(", 3 were lost: no answer. ...\n");
  s.feed(
      "mpirun noticed that process rank 5 with PID 0 on node node3 exited on signal 9 (Killed).\n");
  s.feed("mpirun noticed that process rank 6 with PID 0 on node node4 exited on signal 11.\n");
  s.feed("  Remote daemon: [[41942,0],2] on node node7\n");
  s.feed("rank 1 was lost");  // no newline: a later feed completes it
  EXPECT_EQ(s.loss().lost_ranks, (std::set<int>{2, 3}));
  s.feed(": x\n");
  EXPECT_EQ(s.loss().lost_ranks, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(s.loss().killed_ranks, (std::set<int>{5}));  // SIGSEGV is a bug, not a loss
  EXPECT_EQ(s.loss().killed_on_hosts, (std::set<std::string>{"node3"}));
  EXPECT_EQ(s.loss().lost_daemon_hosts, (std::set<std::string>{"node7"}));
  EXPECT_TRUE(s.loss().any());
  EXPECT_FALSE(JobLossScanner().loss().any());
}

TEST(Restart, OnlyLossesRestart) {
  JobOutcome o;
  o.exit_code = 70;
  EXPECT_TRUE(is_job_loss(o));
  o.exit_code = 0;
  EXPECT_FALSE(is_job_loss(o));
  o.exit_code = 75;  // saved on a signal: the batch system requeues
  o.loss.lost_ranks = {1};
  EXPECT_FALSE(is_job_loss(o));
  o.exit_code = 1;  // a failure that names a lost rank, or mpirun's report of a killed rank
  EXPECT_TRUE(is_job_loss(o));
  o.loss = {};
  EXPECT_FALSE(is_job_loss(o));  // a plain failure
  o.abort_ended = true;          // hvdrun ended an abort hung on an unreachable node
  EXPECT_TRUE(is_job_loss(o));
  o.abort_ended = false;
  o.exit_code = 137;
  o.loss.killed_ranks = {2};
  EXPECT_TRUE(is_job_loss(o));
}

TEST(Restart, RanksFillTheHostsInOrder) {
  Hosts h{{"a", 2}, {"b", 1}, {"c", 3}};
  EXPECT_EQ(host_of_rank(h, 0), "a");
  EXPECT_EQ(host_of_rank(h, 1), "a");
  EXPECT_EQ(host_of_rank(h, 2), "b");
  EXPECT_EQ(host_of_rank(h, 5), "c");
  EXPECT_FALSE(host_of_rank(h, 6));
  EXPECT_FALSE(host_of_rank(h, -1));
  EXPECT_TRUE(same_host("Node2", "node2.cluster.local"));
  EXPECT_FALSE(same_host("node2", "node20"));
}

RestartRequest request(Hosts hosts, int np) {
  RestartRequest r;
  r.hosts = std::move(hosts);
  r.num_proc = np;
  return r;
}

TEST(Restart, DropsTheHostThatDoesNotAnswer) {
  RestartRequest r = request({{"node1", 2}, {"node2", 2}}, 4);
  r.loss.lost_ranks = {2, 3};
  r.silent_hosts = {"node2"};
  RestartDecision d = plan_restart(r);
  ASSERT_TRUE(d.ok) << d.message;
  EXPECT_EQ(d.hosts, (Hosts{{"node1", 2}}));
  EXPECT_EQ(d.num_proc, 2);
  EXPECT_EQ(d.dropped, (std::vector<std::string>{"node2"}));
  EXPECT_EQ(d.message,
            "restart 1/1: dropped host node2 (ranks 2, 3 lost, host does not answer); "
            "relaunching 2 ranks on node1:2");
}

TEST(Restart, SilentHostsWinOverTheNamedRanks) {
  // A cut link: both sides name the other's ranks; the probe tells which side is gone.
  RestartRequest r = request({{"node1", 2}, {"node2", 2}, {"node3", 2}}, 6);
  r.loss.lost_ranks = {0, 1, 4, 5};
  r.silent_hosts = {"node3"};
  r.attempt = 2;
  r.restarts = 3;
  RestartDecision d = plan_restart(r);
  ASSERT_TRUE(d.ok) << d.message;
  EXPECT_EQ(d.hosts, (Hosts{{"node1", 2}, {"node2", 2}}));
  EXPECT_EQ(d.num_proc, 4);
  EXPECT_EQ(d.message,
            "restart 2/3: dropped host node3 (ranks 4, 5 lost, host does not answer); "
            "relaunching 4 ranks on node1:2,node2:2");
}

TEST(Restart, EveryHostAnswersDropsTheHostsOfTheLostRanks) {
  // Processes killed, hosts alive: mpirun named the rank and its node.
  RestartRequest r = request({{"node1", 2}, {"node2", 2}}, 4);
  r.loss.killed_ranks = {3};
  r.loss.killed_on_hosts = {"node2"};
  RestartDecision d = plan_restart(r);
  ASSERT_TRUE(d.ok) << d.message;
  EXPECT_EQ(d.hosts, (Hosts{{"node1", 2}}));
  EXPECT_EQ(d.message,
            "restart 1/1: dropped host node2 (rank 3 lost, host answers but its ranks died); "
            "relaunching 2 ranks on node1:2");
  // A node mpirun named in another spelling, with no rank: its daemon was lost.
  r = request({{"a", 1}, {"b.example.org", 1}, {"c", 1}}, 3);
  r.loss.lost_daemon_hosts = {"B"};
  d = plan_restart(r);
  ASSERT_TRUE(d.ok) << d.message;
  EXPECT_EQ(d.hosts, (Hosts{{"a", 1}, {"c", 1}}));
  EXPECT_NE(d.message.find("b.example.org (mpirun lost its daemon"), std::string::npos)
      << d.message;
  EXPECT_NE(d.message.find("relaunching 2 ranks on a:1,c:1"), std::string::npos) << d.message;
}

TEST(Restart, NpShrinksToTheSlotsLeftAndKeepsAnUnusedHost) {
  // -np 3 on a:2,b:2,c:2: rank 2 on b; c was idle and takes over.
  RestartRequest r = request({{"a", 2}, {"b", 2}, {"c", 2}}, 3);
  r.loss.lost_ranks = {2};
  RestartDecision d = plan_restart(r);
  ASSERT_TRUE(d.ok) << d.message;
  EXPECT_EQ(d.hosts, (Hosts{{"a", 2}, {"c", 2}}));
  EXPECT_EQ(d.num_proc, 3);
  EXPECT_NE(d.message.find("relaunching 3 ranks on a:2,c:2"), std::string::npos) << d.message;
  r = request({{"a", 1}, {"b", 1}}, 2);
  r.loss.lost_ranks = {1};
  EXPECT_NE(plan_restart(r).message.find("relaunching 1 rank on a:1"), std::string::npos);
}

TEST(Restart, NeverBelowMinNp) {
  RestartRequest r = request({{"node1", 2}, {"node2", 2}}, 4);
  r.loss.lost_ranks = {2};
  r.silent_hosts = {"node2"};
  r.min_np = 3;
  RestartDecision d = plan_restart(r);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.message,
            "restart 1/1 not possible: dropped host node2 (rank 2 lost, host does not answer) "
            "leaves node1:2 (2 slots), fewer than --min-np 3 ranks; stopping. Lower --min-np, "
            "or add hosts and resume.");
  // Every host lost.
  r = request({{"localhost", 2}}, 2);
  r.loss.lost_ranks = {1};
  d = plan_restart(r);
  EXPECT_FALSE(d.ok);
  EXPECT_NE(d.message.find("leaves no host"), std::string::npos) << d.message;
}

TEST(Restart, NoHostToBlameIsNoRestart) {
  RestartRequest r = request({{"node1", 2}, {"node2", 2}}, 4);  // exit 70, nothing named
  RestartDecision d = plan_restart(r);
  EXPECT_FALSE(d.ok);
  EXPECT_NE(d.message.find("no host can be blamed (every host answers and no rank was named"),
            std::string::npos)
      << d.message;
  r.loss.lost_ranks = {9};  // beyond -np: no host of the plan
  EXPECT_FALSE(plan_restart(r).ok);
}

TEST(Restart, ProbeGoesThroughMpirunsAgent) {
  LaunchOptions o = with_command();
  const EnvLookup none = hvdtest::fake_env({});
  EXPECT_EQ(probe_command(o, false, none, "node2", 10),
            (Args{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "node2", "true"}));
  o.mpi_args = "--mca plm_rsh_agent /tmp/hvd-sim-x/rsh-agent --mca pml ob1";
  EXPECT_EQ(probe_command(o, false, none, "node2", 10),
            (Args{"/tmp/hvd-sim-x/rsh-agent", "node2", "true"}));
  o.mpi_args = "";
  EXPECT_EQ(
      probe_command(o, false, hvdtest::fake_env({{"OMPI_MCA_plm_rsh_agent", "ssh : rsh"}}), "n", 5),
      (Args{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "n", "true"}));
  EXPECT_EQ(
      probe_command(o, false, hvdtest::fake_env({{"OMPI_MCA_plm_rsh_agent", "rsh -l u"}}), "n", 5),
      (Args{"rsh", "-l", "u", "n", "true"}));
  EXPECT_EQ(
      probe_command(o, true, none, "n7", 5),
      (Args{"srun", "--nodes=1", "--ntasks=1", "--nodelist=n7", "--overlap", "--quiet", "true"}));
}

TEST(Restart, SilentHostsAreThoseWhoseProbeFailsOrHangs) {
  const auto start = std::chrono::steady_clock::now();
  auto silent = silent_hosts(
      {{"localhost", 1}, {"up", 1}, {"down", 1}, {"hung", 1}},
      [](const std::string& host) -> Args {
        if (host == "up") return {"true"};
        if (host == "down") return {"false"};
        if (host == "hung") return {"sh", "-c", "sleep 30"};
        return {"false"};  // localhost is never probed
      },
      1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(silent, (std::set<std::string>{"down", "hung"}));
  EXPECT_LT(s, 5.0) << "the hung probe was not ended";
}

}  // namespace
}  // namespace hvd::launcher
