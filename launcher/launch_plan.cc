#include "launcher/launch_plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "cluster/env_resolver.h"
#include "hvd/error.h"

namespace hvd::launcher {
namespace {

std::string format_double(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool is_forwarded_name(const std::string& name) {
  if (!(starts_with(name, "NCCL_") || starts_with(name, "HVD_") || starts_with(name, "HOROVOD_")))
    return false;
  if (name == "HVD_MPIRUN") return false;  // hvdrun's own setting, meaningless to ranks
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Whether the user's mpirun arguments already choose a binding or a mapping. Open MPI accepts one
// or two dashes and the MCA spellings.
bool mentions(const std::vector<std::string>& args, const std::vector<std::string>& options,
              const std::string& mca_param) {
  for (size_t i = 0; i < args.size(); ++i) {
    for (const auto& o : options)
      for (const std::string& spelled : {"-" + o, "--" + o})
        if (args[i] == spelled || starts_with(args[i], spelled + "=")) return true;
    if ((args[i] == "--mca" || args[i] == "-mca") && i + 1 < args.size() &&
        args[i + 1] == mca_param)
      return true;
  }
  return false;
}

std::string flag_name(const ConfigVar& v) { return std::string("--") + v.launcher_flag; }

std::string alias_of(const std::string& hvd_name) { return "HOROVOD_" + hvd_name.substr(4); }

}  // namespace

EnvVars tuning_variables(const EnvVars& tuning) {
  EnvVars out;
  for (const auto& [name, value] : tuning) {
    const ConfigVar* v = find_config_var(name);
    if (v == nullptr || v->hidden || *v->launcher_flag == '\0')
      throw InvalidArgumentError("internal: '" + name + "' is not a launcher tuning variable.");
    const std::string flag = flag_name(*v);
    const double scale = v->launcher_scale;
    std::string result;
    switch (v->type) {
      case ConfigType::kBool:
        result = parse_bool(flag, value) ? "1" : "0";
        break;
      case ConfigType::kInt:
        if (scale == 1) {
          result = std::to_string(
              parse_int(flag, value, static_cast<int64_t>(v->min), static_cast<int64_t>(v->max)));
        } else {
          double x = parse_double(flag, value, v->min / scale, v->max / scale);
          result = std::to_string(static_cast<int64_t>(std::llround(x * scale)));
        }
        break;
      case ConfigType::kDouble:
        result = format_double(parse_double(flag, value, v->min / scale, v->max / scale) * scale);
        break;
      case ConfigType::kEnum:
        result = parse_enum(flag, value, v->choices);
        break;
      case ConfigType::kString:
        if (value.empty())
          throw InvalidArgumentError(flag + " needs a non-empty value: " + v->launcher_doc);
        result = value;
        break;
    }
    out.emplace_back(name, result);
  }
  return out;
}

namespace {

// The hosts, in order of precedence: -H, --hostfile, the SLURM allocation, localhost with -np.
void resolve_hosts(const LaunchOptions& o, const LaunchEnvironment& env, std::optional<int> np,
                   LaunchPlan& plan) {
  if (!o.hosts.empty() && !o.hostfile.empty())
    throw InvalidArgumentError("-H and --hostfile both given: choose one.");
  if (!o.hosts.empty()) {
    plan.hosts = cluster::parse_host_spec(o.hosts);
    plan.hosts_from = "-H";
  } else if (!o.hostfile.empty()) {
    plan.hosts = cluster::read_hostfile(o.hostfile);
    plan.hosts_from = "--hostfile";
  } else if (auto alloc = cluster::slurm_allocation(env.lookup)) {
    plan.hosts = *alloc;
    plan.hosts_from = "SLURM allocation";
  } else {
    if (!np)
      throw InvalidArgumentError(
          "-np is required when no hosts are given (-H, --hostfile or a SLURM allocation): "
          "e.g. 'hvdrun -np 2 ./train'.");
    plan.hosts = {{"localhost", *np}};
    plan.hosts_from = "localhost";
  }
  const int slots = cluster::total_slots(plan.hosts);
  plan.num_proc = np ? *np : slots;
  if (plan.num_proc > slots && !o.oversubscribe)
    throw InvalidArgumentError("-np " + std::to_string(plan.num_proc) + " is more than the " +
                               std::to_string(slots) + " slots of the hosts (" + plan.hosts_from +
                               ": " + cluster::format_host_spec(plan.hosts) +
                               "): lower -np, give more slots, or pass --oversubscribe.");
}

// Variables for the ranks: what the tuning flags set, and the caller's variables to forward.
struct RankVariables {
  EnvVars set;
  std::vector<std::string> forwarded;  // sorted: a stable command line
};

// Tuning flags first; the caller's NCCL_/HVD_/HOROVOD_ variables are forwarded unless a flag sets
// the same variable (or its HOROVOD_ spelling, which the runtime would otherwise find in
// disagreement with the flag's value).
RankVariables rank_variables(const LaunchOptions& o, const LaunchEnvironment& env) {
  RankVariables v;
  v.set = tuning_variables(o.tuning);
  std::set<std::string> caller_names;
  for (const auto& kv : env.variables) caller_names.insert(kv.first);
  for (size_t i = 0, n = v.set.size(); i < n; ++i) {
    std::string alias = alias_of(v.set[i].first);
    if (caller_names.count(alias)) v.set.emplace_back(alias, v.set[i].second);
  }
  if (!o.network_interface.empty()) v.set.emplace_back("NCCL_SOCKET_IFNAME", o.network_interface);
  std::set<std::string> set_names;
  for (const auto& kv : v.set) set_names.insert(kv.first);
  for (const auto& name : caller_names)
    if (is_forwarded_name(name) && !set_names.count(name)) v.forwarded.push_back(name);
  return v;
}

void mpirun_command(const LaunchOptions& o, const LaunchEnvironment& env,
                    const std::vector<std::string>& user_args, const RankVariables& vars,
                    LaunchPlan& plan) {
  auto& a = plan.argv;
  auto custom = env.lookup ? env.lookup("HVD_MPIRUN") : std::nullopt;
  a.push_back(custom && !custom->empty() ? *custom : "mpirun");
  a.insert(a.end(), {"-np", std::to_string(plan.num_proc)});
  a.insert(a.end(), {"-H", cluster::format_host_spec(plan.hosts)});
  if (!mentions(user_args, {"bind-to", "bind_to"}, "hwloc_base_binding_policy"))
    a.insert(a.end(), {"--bind-to", "none"});
  if (!mentions(user_args, {"map-by", "map_by", "npernode", "npersocket", "ppr"},
                "rmaps_base_mapping_policy"))
    a.insert(a.end(), {"--map-by", "slot"});
  if (o.oversubscribe) a.push_back("--oversubscribe");
  if (!o.output_filename.empty()) a.insert(a.end(), {"--output-filename", o.output_filename});
  if (!o.network_interface.empty()) {
    a.insert(a.end(), {"--mca", "btl_tcp_if_include", o.network_interface});
    a.insert(a.end(), {"--mca", "oob_tcp_if_include", o.network_interface});
  }
  for (const auto& [k, v] : vars.set) a.insert(a.end(), {"-x", k + "=" + v});
  for (const auto& k : vars.forwarded) a.insert(a.end(), {"-x", k});
  if (env.is_root) {
    plan.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
    plan.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
}

// srun propagates its whole environment (--export=ALL by default), so variables are set in srun's
// environment; forwarded ones are already there.
void srun_command(const LaunchOptions& o, const std::vector<std::string>& user_args,
                  const RankVariables& vars, LaunchPlan& plan) {
  auto& a = plan.argv;
  a.insert(a.end(), {"srun", "--mpi=pmix", "-n", std::to_string(plan.num_proc)});
  if (plan.hosts_from != "SLURM allocation") {
    std::string nodes;
    for (const auto& h : plan.hosts) nodes += (nodes.empty() ? "" : ",") + h.host;
    a.push_back("--nodelist=" + nodes);
  }
  if (!mentions(user_args, {"cpu-bind", "cpu_bind"}, "")) a.push_back("--cpu-bind=none");
  if (o.oversubscribe) a.push_back("--overcommit");
  if (!o.output_filename.empty()) {
    // srun's file names are patterns: %t is the task (rank), a literal '%' is written "%%".
    std::string dir;
    for (char c : o.output_filename) dir += c == '%' ? std::string("%%") : std::string(1, c);
    a.push_back("--output=" + dir + "/rank.%t.stdout");
    a.push_back("--error=" + dir + "/rank.%t.stderr");
    plan.create_directory = o.output_filename;
  }
  plan.env = vars.set;
  if (!o.network_interface.empty()) {
    plan.env.emplace_back("OMPI_MCA_btl_tcp_if_include", o.network_interface);
    plan.env.emplace_back("OMPI_MCA_oob_tcp_if_include", o.network_interface);
  }
}

}  // namespace

LaunchPlan build_launch_plan(const LaunchOptions& o, const LaunchEnvironment& env) {
  LaunchPlan plan;
  if (o.command.empty())
    throw InvalidArgumentError(
        "no program given: put it after the options, e.g. 'hvdrun -np 4 ./train --epochs 3' "
        "(use '--' before it if it starts with '-').");
  if (o.launcher != "mpirun" && o.launcher != "srun")
    throw InvalidArgumentError("--launcher='" + o.launcher +
                               "' is not valid: expected mpirun or srun.");
  std::optional<int> np;
  if (o.num_proc) np = static_cast<int>(parse_int("-np", *o.num_proc, 1, 1 << 24));
  resolve_hosts(o, env, np, plan);

  const std::vector<std::string> user_args = split_args(o.mpi_args);
  const RankVariables vars = rank_variables(o, env);
  if (o.launcher == "mpirun")
    mpirun_command(o, env, user_args, vars, plan);
  else
    srun_command(o, user_args, vars, plan);
  auto& a = plan.argv;
  a.insert(a.end(), user_args.begin(), user_args.end());
  plan.command_index = a.size();
  a.insert(a.end(), o.command.begin(), o.command.end());
  return plan;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
      }))
    return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string format_command(const LaunchPlan& plan) {
  std::string out;
  for (const auto& [k, v] : plan.env) out += k + "=" + shell_quote(v) + " ";
  for (size_t i = 0; i < plan.argv.size(); ++i) out += (i ? " " : "") + shell_quote(plan.argv[i]);
  return out;
}

std::vector<std::string> split_args(const std::string& text) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  size_t i = 0;
  auto unterminated = [&](char q, size_t at) {
    throw InvalidArgumentError("--mpi-args '" + text + "': quote " + std::string(1, q) +
                               " at position " + std::to_string(at) + " is never closed.");
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
      ++i;
    } else if (c == '\'') {
      size_t close = text.find('\'', i + 1);
      if (close == std::string::npos) unterminated('\'', i);
      cur += text.substr(i + 1, close - i - 1);
      in_word = true;
      i = close + 1;
    } else if (c == '"') {
      size_t at = i++;
      in_word = true;
      while (true) {
        if (i >= text.size()) unterminated('"', at);
        char d = text[i];
        if (d == '"') {
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < text.size() &&
            std::string_view("\"\\$`").find(text[i + 1]) != std::string_view::npos) {
          cur += text[i + 1];
          i += 2;
        } else {
          cur += d;
          ++i;
        }
      }
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[i + 1];
      in_word = true;
      i += 2;
    } else {
      cur += c;
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

}  // namespace hvd::launcher
