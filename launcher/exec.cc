#include "launcher/exec.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>

namespace hvd::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::optional<std::string> find_executable(const std::string& name, const std::string& path_var) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos)
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  size_t pos = 0;
  while (true) {
    size_t colon = path_var.find(':', pos);
    std::string dir = path_var.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) return std::nullopt;
    pos = colon + 1;
  }
}

bool all_hosts_local(const std::vector<cluster::HostSlots>& hosts) {
  char buf[HOST_NAME_MAX + 1] = {};
  std::string me = ::gethostname(buf, sizeof buf - 1) == 0 ? lower(buf) : "";
  std::string me_short = me.substr(0, me.find('.'));
  for (const auto& h : hosts) {
    std::string n = lower(h.host);
    bool local = n == "localhost" || n == "::1" || n.rfind("127.", 0) == 0 ||
                 (!me.empty() && (n == me || n == me_short || n.substr(0, n.find('.')) == me_short));
    if (!local) return false;
  }
  return true;
}

int exec_plan(const LaunchPlan& plan) {
  for (const auto& [k, v] : plan.env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  int err = errno;
  std::fprintf(stderr, "hvdrun: cannot run '%s': %s\n", argv[0], std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

}  // namespace hvd::launcher
