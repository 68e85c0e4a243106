#include "launcher/options.h"

#include <boost/program_options.hpp>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "hvd/error.h"
#include "common/config.h"

namespace hvd::launcher {
namespace po = boost::program_options;
namespace {

// The default of a registry variable in its flag's unit ("67108864" bytes -> "64" MiB).
std::string flag_default(const ConfigVar& v) {
  if (v.type == ConfigType::kBool || *v.default_value == '\0') return "";
  if (v.type != ConfigType::kInt && v.type != ConfigType::kDouble) return v.default_value;
  double x = std::strtod(v.default_value, nullptr) / v.launcher_scale;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// Which --help group a registry flag belongs to (horovodrun's grouping).
enum Group {
  kGeneral,
  kHosts,
  kFaultTolerance,
  kTuning,
  kTimeline,
  kStall,
  kLogging,
  kLauncher,
  kGroupCount
};

Group group_of(const std::string& flag) {
  if (flag.rfind("timeline", 0) == 0) return kTimeline;
  if (flag.rfind("stall", 0) == 0) return kStall;
  if (flag.rfind("log", 0) == 0) return kLogging;
  if (flag == "start-timeout") return kGeneral;
  return kTuning;
}

struct Descriptions {
  std::unique_ptr<po::options_description> groups[kGroupCount];
  std::string captions[kGroupCount] = {"General arguments",         "Host arguments",
                                       "Fault tolerance arguments", "Tuneable parameter arguments",
                                       "Timeline arguments",        "Stall check arguments",
                                       "Logging arguments",         "Launcher and MPI arguments"};
  po::options_description all{"hvdrun options"};

  Descriptions() {
    for (int g = 0; g < kGroupCount; ++g)
      groups[g] = std::make_unique<po::options_description>(captions[g]);
    groups[kGeneral]->add_options()("help,h", po::bool_switch(), "Show this help and exit.")(
        "version,v", po::bool_switch(), "Print hvdrun's version and exit.")(
        "np,num-proc", po::value<std::string>()->value_name("N"),
        "Number of processes (ranks) to start. Default: the total slots of the hosts.")(
        "check-build", po::bool_switch(),
        "Print the backends and library versions hvd was built with, and exit.")(
        "dry-run", po::bool_switch(),
        "Print the exact command (and the environment it sets) instead of running it.")(
        "verbose", po::bool_switch(), "Print the command to stderr before running it.")(
        "network-interface", po::value<std::string>()->value_name("IF"),
        "Network interface for MPI and NCCL traffic (e.g. eth0): sets btl_tcp_if_include, "
        "oob_tcp_if_include and NCCL_SOCKET_IFNAME.");
    groups[kHosts]->add_options()(
        "hosts,H", po::value<std::string>()->value_name("HOST:SLOTS,..."),
        "Hosts and their slots, e.g. 'node1:4,node2:4' (a host without ':N' has 1 slot). "
        "Default: --hostfile, else the SLURM allocation, else localhost with -np slots.")(
        "hostfile", po::value<std::string>()->value_name("PATH"),
        "File with one 'HOST slots=N' per line ('#' comments).");
    groups[kFaultTolerance]->add_options()(
        "stop-grace", po::value<std::string>()->value_name("SECONDS"),
        "A SIGTERM to hvdrun becomes a SIGUSR1 to mpirun, which passes it to every rank: hvd "
        "trainers stop at an agreed step, save a checkpoint and exit 75 (requeue to continue). "
        "If the job has not ended SECONDS later (or at a second SIGTERM), mpirun gets the "
        "SIGTERM. 0: forward SIGTERM at once. Default: 60.")(
        "restarts", po::value<std::string>()->value_name("N"),
        "When the job ends because it lost a rank or a node (hvd's exit 70, a rank killed, a "
        "node that stopped answering), drop the hosts that no longer answer (else those of the "
        "lost ranks) and start the same command on the hosts left, at most N times; a trainer "
        "with --checkpoint-dir resumes from its newest checkpoint. mpirun launcher only. "
        "Default: 0.")(
        "min-np", po::value<std::string>()->value_name("M"),
        "Never restart with fewer than M ranks (--restarts): stop with the job's status "
        "instead. Default: 1.");
    groups[kLogging]->add_options()(
        "output-filename", po::value<std::string>()->value_name("DIR"),
        "One log per rank under DIR, as mpirun --output-filename: DIR/1/rank.N/stdout and "
        "stderr (the output still shows here too). With srun: DIR/rank.N.stdout and .stderr. "
        "DIR must be where every node can write it (a shared file system).");
    groups[kLauncher]->add_options()(
        "launcher", po::value<std::string>()->value_name("mpirun|srun")->default_value("mpirun"),
        "Start ranks with mpirun (Open MPI; HVD_MPIRUN overrides the binary) or with "
        "'srun --mpi=pmix' inside a SLURM allocation.")(
        "mpi-args", po::value<std::string>()->value_name("\"ARGS\""),
        "Extra arguments for mpirun/srun, split like a shell does (quotes respected).")(
        "oversubscribe", po::bool_switch(),
        "Allow more ranks than slots (mpirun --oversubscribe, srun --overcommit).");

    for (const ConfigVar& v : config_registry()) {
      if (v.hidden || *v.launcher_flag == '\0') continue;  // hidden: a test hook, no flag
      std::string doc = v.launcher_doc;
      doc += std::string(" Sets ") + v.name + ".";
      if (auto d = flag_default(v); !d.empty()) doc += " Default: " + d + ".";
      auto& group = *groups[group_of(v.launcher_flag)];
      if (v.type == ConfigType::kBool) {
        group.add_options()(v.launcher_flag, po::bool_switch(), doc.c_str());
      } else {
        const char* value_name = v.type == ConfigType::kEnum     ? "CHOICE"
                                 : v.type == ConfigType::kString ? "VALUE"
                                                                 : "N";
        group.add_options()(v.launcher_flag, po::value<std::string>()->value_name(value_name),
                            doc.c_str());
      }
    }
    for (auto& g : groups) all.add(*g);
  }
};

// Index of the first argument that belongs to the program (or args.size()), skipping option
// values; `after_dashes` tells whether it follows a literal "--".
size_t program_start(const po::options_description& desc, const std::vector<std::string>& args,
                     bool& after_dashes) {
  after_dashes = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      after_dashes = true;
      return i + 1;
    }
    if (a.size() < 2 || a[0] != '-') return i;
    if (a.find('=') != std::string::npos) continue;  // --name=value
    const po::option_description* od = nullptr;
    if (a[1] == '-') {
      od = desc.find_nothrow(a.substr(2), false);
    } else {
      od = desc.find_nothrow(a.substr(1), false);  // -np: a long name with one dash
      if (od == nullptr) {
        od = desc.find_nothrow(a.substr(0, 2), false);  // -H: a short name
        if (od != nullptr && a.size() > 2) continue;    // -Hvalue
      }
    }
    if (od != nullptr && od->semantic()->max_tokens() > 0) ++i;  // skip its value
  }
  return args.size();
}

// "  -np, --num-proc N        Number of ..." wrapped at kHelpWidth columns. Program_options' own
// printer cannot show the single-dash long name -np, which is how everyone spells it.
constexpr size_t kHelpWidth = 100;
constexpr size_t kHelpColumn = 38;

std::string format_option(const po::option_description& od) {
  std::string names;
  const std::string f = od.format_name();
  if (f.size() >= 2 && f[0] == '-' && f[1] != '-') names = f.substr(0, 2);  // short name
  auto [longs, count] = od.long_names();
  for (size_t i = 0; i < count; ++i)
    names += (names.empty() ? "" : ", ") + (longs[i] == "np" ? "-np" : "--" + longs[i]);
  if (std::string param = od.format_parameter(); !param.empty()) names += " " + param;

  std::string out = "  " + names;
  if (out.size() + 1 >= kHelpColumn)
    out += "\n" + std::string(kHelpColumn, ' ');
  else
    out += std::string(kHelpColumn - out.size(), ' ');
  size_t col = kHelpColumn;
  std::istringstream words(od.description());
  bool first = true;
  for (std::string w; words >> w; first = false) {
    if (!first && col + 1 + w.size() > kHelpWidth) {
      out += "\n" + std::string(kHelpColumn, ' ');
      col = kHelpColumn;
    } else if (!first) {
      out += ' ';
      ++col;
    }
    out += w;
    col += w.size();
  }
  return out + "\n";
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args) {
  Descriptions d;
  bool after_dashes = false;
  size_t start = program_start(d.all, args, after_dashes);
  std::vector<std::string> ours(
      args.begin(), args.begin() + static_cast<std::ptrdiff_t>(after_dashes ? start - 1 : start));
  CommandLine cl;
  cl.launch.command.assign(args.begin() + static_cast<std::ptrdiff_t>(start), args.end());

  po::variables_map vm;
  try {
    int style = (po::command_line_style::unix_style | po::command_line_style::allow_long_disguise) &
                ~po::command_line_style::allow_guessing & ~po::command_line_style::allow_sticky;
    po::store(po::command_line_parser(ours).options(d.all).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgumentError(std::string(e.what()) + " (see hvdrun --help).");
  }

  auto str = [&](const char* name) -> std::string {
    return vm.count(name) ? vm[name].as<std::string>() : std::string();
  };
  auto flag = [&](const char* name) { return vm.count(name) && vm[name].as<bool>(); };
  cl.help = flag("help");
  cl.version = flag("version");
  cl.check_build = flag("check-build");
  cl.dry_run = flag("dry-run");
  cl.verbose = flag("verbose");

  if (vm.count("np")) cl.launch.num_proc = str("np");
  cl.launch.hosts = str("hosts");
  cl.launch.hostfile = str("hostfile");
  if (vm.count("hosts") && cl.launch.hosts.empty())
    throw InvalidArgumentError("-H needs hosts, e.g. -H node1:2,node2:2.");
  if (vm.count("hostfile") && cl.launch.hostfile.empty())
    throw InvalidArgumentError("--hostfile needs a path.");
  cl.launch.launcher = str("launcher");
  cl.launch.mpi_args = str("mpi-args");
  cl.launch.network_interface = str("network-interface");
  if (vm.count("network-interface") && cl.launch.network_interface.empty())
    throw InvalidArgumentError("--network-interface needs an interface name, e.g. eth0.");
  cl.launch.output_filename = str("output-filename");
  if (vm.count("output-filename") && cl.launch.output_filename.empty())
    throw InvalidArgumentError("--output-filename needs a directory, e.g. --output-filename logs.");
  cl.launch.oversubscribe = flag("oversubscribe");
  if (vm.count("stop-grace"))
    cl.stop_grace_seconds =
        static_cast<int>(parse_int("--stop-grace", str("stop-grace"), 0, 86400));
  if (vm.count("restarts"))
    cl.restarts = static_cast<int>(parse_int("--restarts", str("restarts"), 0, 1000));
  if (vm.count("min-np"))
    cl.min_np = static_cast<int>(parse_int("--min-np", str("min-np"), 1, 1 << 24));

  for (const ConfigVar& v : config_registry()) {
    if (v.hidden || *v.launcher_flag == '\0') continue;
    if (v.type == ConfigType::kBool) {
      if (flag(v.launcher_flag)) cl.launch.tuning.emplace_back(v.name, "1");
    } else if (vm.count(v.launcher_flag)) {
      cl.launch.tuning.emplace_back(v.name, str(v.launcher_flag));
    }
  }
  return cl;
}

std::string help_text() {
  Descriptions d;
  std::ostringstream out;
  out << "Usage: hvdrun [options] [--] PROGRAM [ARGS...]\n"
         "\n"
         "Starts PROGRAM as an hvd job: -np ranks on the given hosts through mpirun (or srun),\n"
         "with hvd's tuning variables exported to every rank. Long options take one or two\n"
         "dashes (-np 4, --hostfile=h.txt). Examples:\n"
         "  hvdrun -np 4 ./train_cnn\n"
         "  hvdrun -np 8 -H node1:4,node2:4 --fusion-threshold-mb 32 ./train_cnn --epochs 3\n"
         "  hvdrun --dry-run --hostfile hosts.txt ./train_cnn\n";
  for (int g = 0; g < kGroupCount; ++g) {
    out << "\n" << d.captions[g] << ":\n";
    for (const auto& od : d.groups[g]->options()) out << format_option(*od);
  }
  out << "\nEnvironment: HVD_MPIRUN overrides the mpirun binary; every NCCL_*, HVD_* and\n"
         "HOROVOD_* variable already set is forwarded to the ranks.\n";
  return out.str();
}

}  // namespace hvd::launcher
