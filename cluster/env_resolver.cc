#include "cluster/env_resolver.h"

#include <algorithm>
#include <limits>

#include "cluster/hostlist.h"
#include "hvd/error.h"

namespace hvd::cluster {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// The value of the first variable of `names` that is set, with its name.
struct Found {
  std::string name;
  std::string value;
};
std::optional<Found> first_set(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env(n)) return Found{n, *v};
  return std::nullopt;
}

int read_int(const Found& f, int64_t min) {
  return static_cast<int>(parse_int(f.name, f.value, min, kIntMax));
}

std::optional<int> read_opt_int(const EnvLookup& env, std::initializer_list<const char*> names,
                                int64_t min) {
  auto f = first_set(env, names);
  if (!f) return std::nullopt;
  return read_int(*f, min);
}

// Expands a variable's hostlist / task counts; errors name the variable.
std::vector<std::string> hostlist_of(const Found& f) {
  try {
    return expand_hostlist(f.value);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(f.name + ": " + e.what());
  }
}
std::vector<int> task_counts_of(const Found& f) {
  try {
    return expand_task_counts(f.value);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(f.name + ": " + e.what());
  }
}

[[noreturn]] void inconsistent(const std::string& source, const std::string& what) {
  throw InvalidArgumentError(source + " environment is inconsistent: " + what +
                             ". Unset stale variables inherited from an outer job, or start the "
                             "program through its launcher.");
}

void check_ranges(const Placement& p, const std::string& rank_var, const std::string& size_var,
                  const std::string& local_rank_var, const std::string& local_size_var) {
  if (p.rank >= p.size)
    inconsistent(p.source, rank_var + "=" + std::to_string(p.rank) + " is not below " + size_var +
                               "=" + std::to_string(p.size));
  if (p.local_rank >= p.local_size)
    inconsistent(p.source, local_rank_var + "=" + std::to_string(p.local_rank) + " is not below " +
                               local_size_var + "=" + std::to_string(p.local_size));
  if (p.local_size > p.size)
    inconsistent(p.source, local_size_var + "=" + std::to_string(p.local_size) + " exceeds " +
                               size_var + "=" + std::to_string(p.size));
}

}  // namespace

std::optional<Placement> resolve_open_mpi(const EnvLookup& env) {
  auto rank = first_set(env, {"OMPI_COMM_WORLD_RANK"});
  if (!rank) return std::nullopt;
  Placement p;
  p.source = "Open MPI";
  p.rank = read_int(*rank, 0);
  auto size = first_set(env, {"OMPI_COMM_WORLD_SIZE"});
  if (!size) inconsistent(p.source, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
  p.size = read_int(*size, 1);
  auto local_rank = first_set(env, {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_NODE_RANK"});
  auto local_size = first_set(env, {"OMPI_COMM_WORLD_LOCAL_SIZE"});
  if (!local_rank || !local_size)
    inconsistent(p.source,
                 "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_LOCAL_RANK (or _NODE_RANK) and "
                 "OMPI_COMM_WORLD_LOCAL_SIZE are not both set");
  p.local_rank = read_int(*local_rank, 0);
  p.local_size = read_int(*local_size, 1);
  check_ranges(p, rank->name, size->name, local_rank->name, local_size->name);
  return p;
}

std::optional<Placement> resolve_slurm(const EnvLookup& env) {
  auto rank = first_set(env, {"SLURM_PROCID"});
  if (!rank) return std::nullopt;
  Placement p;
  p.source = "SLURM";
  p.rank = read_int(*rank, 0);
  auto size = first_set(env, {"SLURM_NTASKS", "SLURM_NPROCS"});
  if (!size) inconsistent(p.source, "SLURM_PROCID is set but SLURM_NTASKS is not");
  p.size = read_int(*size, 1);
  auto local_rank = first_set(env, {"SLURM_LOCALID"});
  if (!local_rank) inconsistent(p.source, "SLURM_PROCID is set but SLURM_LOCALID is not");
  p.local_rank = read_int(*local_rank, 0);

  // Node list and task counts: the step's when this is an srun step, else the job's.
  auto nodelist = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  auto tasks_var = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  std::vector<int> tasks;
  if (nodelist) p.nodes = hostlist_of(*nodelist);
  if (tasks_var) tasks = task_counts_of(*tasks_var);
  bool same_level =
      nodelist && tasks_var &&
      (nodelist->name == "SLURM_STEP_NODELIST") == (tasks_var->name == "SLURM_STEP_TASKS_PER_NODE");
  if (same_level && p.nodes.size() != tasks.size())
    inconsistent(p.source, nodelist->name + "='" + nodelist->value + "' names " +
                               std::to_string(p.nodes.size()) + " nodes but " + tasks_var->name +
                               "='" + tasks_var->value + "' gives " + std::to_string(tasks.size()) +
                               " task counts");
  if (nodelist)
    p.cross_size = static_cast<int>(p.nodes.size());
  else if (tasks_var)
    p.cross_size = static_cast<int>(tasks.size());

  p.cross_rank = read_opt_int(env, {"SLURM_NODEID"}, 0);
  if (p.cross_rank && p.cross_size && *p.cross_rank >= *p.cross_size)
    inconsistent(p.source, "SLURM_NODEID=" + std::to_string(*p.cross_rank) + " is not below the " +
                               std::to_string(*p.cross_size) + " nodes of the job");

  // Tasks on this node: this node's count when the node index is known, else a uniform count.
  std::optional<int> local_size;
  if (p.cross_rank && static_cast<size_t>(*p.cross_rank) < tasks.size())
    local_size = tasks[*p.cross_rank];
  else if (!tasks.empty() && std::equal(tasks.begin() + 1, tasks.end(), tasks.begin()))
    local_size = tasks.front();
  if (!local_size) local_size = read_opt_int(env, {"SLURM_NTASKS_PER_NODE"}, 1);
  if (!local_size)
    inconsistent(p.source,
                 "the tasks on this node are unknown: set SLURM_STEP_TASKS_PER_NODE or "
                 "SLURM_TASKS_PER_NODE (and SLURM_NODEID when nodes run different task counts)");
  p.local_size = *local_size;
  check_ranges(p, rank->name, size->name, local_rank->name,
               tasks_var ? tasks_var->name : std::string("SLURM_NTASKS_PER_NODE"));
  return p;
}

std::optional<Placement> resolve_mpich(const EnvLookup& env) {
  auto rank = first_set(env, {"PMI_RANK"});
  if (!rank) return std::nullopt;
  Placement p;
  p.source = "MPICH/PMI";
  p.rank = read_int(*rank, 0);
  auto size = first_set(env, {"PMI_SIZE"});
  if (!size) inconsistent(p.source, "PMI_RANK is set but PMI_SIZE is not");
  p.size = read_int(*size, 1);
  auto local_rank = first_set(env, {"MPI_LOCALRANKID"});
  auto local_size = first_set(env, {"MPI_LOCALNRANKS"});
  if (local_rank && local_size) {
    p.local_rank = read_int(*local_rank, 0);
    p.local_size = read_int(*local_size, 1);
    check_ranges(p, rank->name, size->name, local_rank->name, local_size->name);
    return p;
  }
  // srun's PMI plugins set PMI_RANK but not MPICH's local variables: take the node-local view
  // from SLURM when it describes the same process.
  if (auto s = resolve_slurm(env); s && s->rank == p.rank && s->size == p.size) {
    s->source = p.source;
    return s;
  }
  return std::nullopt;  // not enough to place this process
}

std::optional<Placement> resolve_placement(const EnvLookup& env) {
  if (auto p = resolve_open_mpi(env)) return p;
  if (auto p = resolve_mpich(env)) return p;
  return resolve_slurm(env);
}

std::optional<std::vector<HostSlots>> slurm_allocation(const EnvLookup& env) {
  auto job = env("SLURM_JOB_ID");
  if (!job) return std::nullopt;
  auto fail = [&](const std::string& why) -> void {
    throw InvalidArgumentError("cannot read the SLURM allocation of job " + *job + ": " + why +
                               ". Pass -H or --hostfile to choose the hosts yourself.");
  };
  auto nodelist = first_set(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nodelist) fail("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not");
  std::vector<std::string> nodes = hostlist_of(*nodelist);
  if (nodes.empty()) fail(nodelist->name + " is empty");

  std::vector<int> tasks;
  if (auto t = first_set(env, {"SLURM_TASKS_PER_NODE"})) {
    tasks = task_counts_of(*t);
    if (tasks.size() != nodes.size())
      fail(nodelist->name + "='" + nodelist->value + "' names " + std::to_string(nodes.size()) +
           " nodes but SLURM_TASKS_PER_NODE='" + t->value + "' gives " +
           std::to_string(tasks.size()) + " task counts");
  } else if (auto n = first_set(env, {"SLURM_NTASKS_PER_NODE"})) {
    tasks.assign(nodes.size(), read_int(*n, 1));
  } else {
    fail("neither SLURM_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is set");
  }

  std::vector<HostSlots> hosts;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (tasks[i] > 0) hosts.push_back({nodes[i], tasks[i]});
  if (hosts.empty()) fail("the allocation has no task slots");
  return hosts;
}

std::string describe_mismatch(const Placement& env, int mpi_rank, int mpi_size, int mpi_local_rank,
                              int mpi_local_size) {
  std::string diffs;
  auto cmp = [&](const char* what, int from_env, int from_mpi) {
    if (from_env == from_mpi) return;
    diffs += std::string(diffs.empty() ? "" : ", ") + what + " " + std::to_string(from_env) +
             " (MPI says " + std::to_string(from_mpi) + ")";
  };
  cmp("rank", env.rank, mpi_rank);
  cmp("size", env.size, mpi_size);
  cmp("local_rank", env.local_rank, mpi_local_rank);
  cmp("local_size", env.local_size, mpi_local_size);
  if (diffs.empty()) return "";
  return "the " + env.source + " environment disagrees with MPI about this process: " + diffs +
         ". hvd uses MPI's values; the variables are probably stale (inherited from an outer job "
         "or launcher) or the job was started by a different launcher than they describe.";
}

std::string to_string(const Placement& p) {
  std::string s = p.source + ": rank " + std::to_string(p.rank) + "/" + std::to_string(p.size) +
                  ", local " + std::to_string(p.local_rank) + "/" + std::to_string(p.local_size);
  if (p.cross_rank || p.cross_size)
    s += ", node " + (p.cross_rank ? std::to_string(*p.cross_rank) : std::string("?")) + "/" +
         (p.cross_size ? std::to_string(*p.cross_size) : std::string("?"));
  if (!p.nodes.empty()) {
    s += " (";
    for (size_t i = 0; i < p.nodes.size() && i < 8; ++i) s += (i ? "," : "") + p.nodes[i];
    if (p.nodes.size() > 8) s += ",... " + std::to_string(p.nodes.size()) + " nodes";
    s += ")";
  }
  return s;
}

}  // namespace hvd::cluster
