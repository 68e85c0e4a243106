#include "launcher/restart.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>

#include "common/ranks.h"
#include "hvd/error.h"

namespace hvd::launcher {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string short_name(const std::string& host) { return host.substr(0, host.find('.')); }

// The plan's host that `name` (as mpirun spelled it) is, if any.
std::optional<std::string> plan_host(const std::vector<cluster::HostSlots>& hosts,
                                     const std::string& name) {
  for (const auto& h : hosts)
    if (same_host(h.host, name)) return h.host;
  return std::nullopt;
}

std::string basename_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool same_host(const std::string& a, const std::string& b) {
  const std::string la = lower(a), lb = lower(b);
  return la == lb || short_name(la) == short_name(lb);
}

bool is_job_loss(const JobOutcome& outcome) {
  if (outcome.exit_code == 0 || outcome.exit_code == hvd::kExitRequeue)
    return false;  // the batch system requeues
  return outcome.exit_code == kExitPeerLoss || outcome.abort_ended || outcome.loss.any();
}

std::optional<std::string> host_of_rank(const std::vector<cluster::HostSlots>& hosts, int rank) {
  if (rank < 0) return std::nullopt;
  int first = 0;
  for (const auto& h : hosts) {
    if (rank < first + h.slots) return h.host;
    first += h.slots;
  }
  return std::nullopt;
}

RestartDecision plan_restart(const RestartRequest& r) {
  RestartDecision d;
  const std::string attempt =
      "restart " + std::to_string(r.attempt) + "/" + std::to_string(r.restarts);
  std::set<int> lost(r.loss.lost_ranks);
  lost.insert(r.loss.killed_ranks.begin(), r.loss.killed_ranks.end());

  // Which hosts to drop: those that do not answer; when all answer, those of the lost ranks.
  std::set<std::string> drop;
  const bool silent = !r.silent_hosts.empty();
  for (const auto& h : r.hosts) {
    if (silent) {
      for (const auto& s : r.silent_hosts)
        if (same_host(h.host, s)) drop.insert(h.host);
    }
  }
  if (!silent) {
    for (int rank : lost)
      if (rank < r.num_proc)
        if (auto h = host_of_rank(r.hosts, rank)) drop.insert(*h);
    for (const auto* names : {&r.loss.killed_on_hosts, &r.loss.lost_daemon_hosts})
      for (const auto& n : *names)
        if (auto h = plan_host(r.hosts, n)) drop.insert(*h);
  }
  if (drop.empty()) {
    d.message = attempt + " not possible: the job lost " +
                (lost.empty() ? std::string("ranks") : rank_list({lost.begin(), lost.end()})) +
                " but no host can be blamed (every host answers" +
                (lost.empty() ? std::string(" and no rank was named as lost") : "") +
                "); stopping. Check the ranks' errors above.";
    return d;
  }

  // Why each host goes: its lost ranks, and whether it answers.
  std::string dropped_text;
  for (const auto& h : r.hosts) {
    if (!drop.count(h.host)) {
      d.hosts.push_back(h);
      continue;
    }
    std::vector<int> ranks;
    for (int rank : lost)
      if (rank < r.num_proc && host_of_rank(r.hosts, rank) == h.host) ranks.push_back(rank);
    std::string why;
    if (!ranks.empty())
      why = rank_list(ranks) + " lost";
    else if (std::any_of(r.loss.lost_daemon_hosts.begin(), r.loss.lost_daemon_hosts.end(),
                         [&](const std::string& n) { return same_host(n, h.host); }))
      why = "mpirun lost its daemon";
    else
      why = "no rank named";
    why += silent ? ", host does not answer" : ", host answers but its ranks died";
    d.dropped.push_back(h.host);
    dropped_text += (dropped_text.empty() ? "" : ", ") + h.host + " (" + why + ")";
  }
  const std::string dropped =
      std::string(d.dropped.size() == 1 ? "dropped host " : "dropped hosts ") + dropped_text;
  const int slots = cluster::total_slots(d.hosts);
  d.num_proc = std::min(r.num_proc, slots);
  if (d.hosts.empty() || d.num_proc < r.min_np) {
    d.message = attempt + " not possible: " + dropped + " leaves " +
                (d.hosts.empty() ? std::string("no host")
                                 : cluster::format_host_spec(d.hosts) + " (" +
                                       std::to_string(slots) + " slots)") +
                ", fewer than --min-np " + std::to_string(r.min_np) +
                " ranks; stopping. Lower --min-np, or add hosts and resume.";
    return d;
  }
  d.ok = true;
  d.message = attempt + ": " + dropped + "; relaunching " + std::to_string(d.num_proc) +
              (d.num_proc == 1 ? " rank on " : " ranks on ") + cluster::format_host_spec(d.hosts);
  return d;
}

std::vector<std::string> probe_command(const LaunchOptions& options, bool slurm_allocation,
                                       const EnvLookup& env, const std::string& host,
                                       int timeout_seconds) {
  // The agent mpirun starts its daemons with: --mca plm_rsh_agent in --mpi-args, then
  // OMPI_MCA_plm_rsh_agent, then (no agent) srun inside an allocation, else ssh.
  std::optional<std::string> agent;
  const std::vector<std::string> args = split_args(options.mpi_args);
  for (size_t i = 0; i + 2 < args.size(); ++i)
    if ((args[i] == "--mca" || args[i] == "-mca") &&
        (args[i + 1] == "plm_rsh_agent" || args[i + 1] == "orte_rsh_agent"))
      agent = args[i + 2];
  if (!agent && env) agent = env("OMPI_MCA_plm_rsh_agent");
  std::vector<std::string> cmd;
  if (agent && !agent->empty()) {
    for (auto& w : split_args(*agent)) {  // "ssh : rsh": the first of the alternatives
      if (w == ":") break;
      cmd.push_back(std::move(w));
    }
  }
  if (cmd.empty() && slurm_allocation)
    return {"srun",      "--nodes=1", "--ntasks=1", "--nodelist=" + host,
            "--overlap", "--quiet",   "true"};
  if (cmd.empty()) cmd.push_back("ssh");
  if (basename_of(cmd[0]) == "ssh")
    cmd.insert(cmd.begin() + 1,
               {"-o", "BatchMode=yes", "-o", "ConnectTimeout=" + std::to_string(timeout_seconds)});
  cmd.push_back(host);
  cmd.push_back("true");
  return cmd;
}

std::set<std::string> silent_hosts(
    const std::vector<cluster::HostSlots>& hosts,
    const std::function<std::vector<std::string>(const std::string&)>& command,
    int timeout_seconds) {
  std::set<std::string> silent;
  std::map<pid_t, std::string> running;
  for (const auto& h : hosts) {
    if (all_hosts_local({h})) continue;  // this machine answers
    std::vector<std::string> words = command(h.host);
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      silent.insert(h.host);
      continue;
    }
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: a probe that hangs is killed with what it started
      int null = ::open("/dev/null", O_RDWR);
      for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    running.emplace(pid, h.host);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (!running.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      if (::waitpid(it->first, &status, WNOHANG) == it->first) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) silent.insert(it->second);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    if (!running.empty()) ::usleep(20000);
  }
  for (const auto& [pid, host] : running) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    silent.insert(host);
  }
  return silent;
}

int run_supervised(const LaunchOptions& options, const LaunchEnvironment& env, LaunchPlan plan,
                   const SuperviseOptions& supervise, const RestartPolicy& policy, bool verbose) {
  const bool slurm_allocation = plan.hosts_from == "SLURM allocation";
  LaunchOptions current = options;
  for (int attempt = 1;; ++attempt) {
    const JobOutcome out = supervise_job(plan, supervise);
    const unsigned stops = stop_signals_received();
    if (policy.restarts <= 0 || out.stop_requested || !is_job_loss(out)) return out.exit_code;
    if (attempt > policy.restarts) {
      std::fprintf(stderr,
                   "hvdrun: the job lost ranks again after %d restart%s (--restarts %d): stopping "
                   "with its status %d.\n",
                   policy.restarts, policy.restarts == 1 ? "" : "s", policy.restarts,
                   out.exit_code);
      return out.exit_code;
    }
    std::fprintf(stderr, "hvdrun: the job lost ranks (status %d): probing its %zu hosts.\n",
                 out.exit_code, plan.hosts.size());
    RestartRequest request;
    request.hosts = plan.hosts;
    request.num_proc = plan.num_proc;
    request.loss = out.loss;
    request.silent_hosts = silent_hosts(
        plan.hosts,
        [&](const std::string& host) {
          return probe_command(current, slurm_allocation, env.lookup, host, kProbeTimeoutSeconds);
        },
        kProbeTimeoutSeconds);
    request.min_np = policy.min_np;
    request.attempt = attempt;
    request.restarts = policy.restarts;
    RestartDecision decision = plan_restart(request);
    if (!decision.ok) {
      std::fprintf(stderr, "hvdrun: error: %s\n", decision.message.c_str());
      return out.exit_code;
    }
    if (stop_signals_received() != stops) return out.exit_code;  // asked to stop meanwhile
    LaunchOptions next = current;
    next.hosts = cluster::format_host_spec(decision.hosts);
    next.hostfile.clear();
    next.num_proc = std::to_string(decision.num_proc);
    // Each attempt logs to its own folder: mpirun would overwrite the lost attempt's logs.
    if (!options.output_filename.empty())
      next.output_filename = options.output_filename + "/restart." + std::to_string(attempt);
    try {
      plan = build_launch_plan(next, env);
    } catch (const hvd::Error& e) {
      std::fprintf(stderr, "hvdrun: error: %s: %s\n", decision.message.c_str(), e.what());
      return out.exit_code;
    }
    current = next;
    std::fprintf(stderr, "hvdrun: %s\n", decision.message.c_str());
    if (verbose) std::fprintf(stderr, "hvdrun: %s\n", format_command(plan).c_str());
  }
}

}  // namespace hvd::launcher
