#include "launcher/exec.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <sys/stat.h>

namespace hvd::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
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
    std::string dir =
        path_var.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
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
    bool local =
        n == "localhost" || n == "::1" || n.rfind("127.", 0) == 0 ||
        (!me.empty() && (n == me || n == me_short || n.substr(0, n.find('.')) == me_short));
    if (!local) return false;
  }
  return true;
}

namespace {

// Sets plan.env in this process and returns plan.argv as execvp wants it (null-terminated).
std::vector<char*> prepare_exec(const LaunchPlan& plan) {
  for (const auto& [k, v] : plan.env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

int exec_plan(const LaunchPlan& plan) {
  std::vector<char*> argv = prepare_exec(plan);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  int err = errno;
  std::fprintf(stderr, "hvdrun: cannot run '%s': %s\n", argv[0], std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

bool is_abort_notice(std::string_view text) {
  static constexpr std::string_view kNotices[] = {
      "the job has been aborted",          // a rank exited non-zero or was killed
      "abort is already in progress",      // mpirun's second notice
      "ORTE has lost communication",       // a daemon's node went away
      "mpirun noticed that process rank",  // a rank died on a signal
  };
  for (auto n : kNotices)
    if (text.find(n) != std::string_view::npos) return true;
  return false;
}

namespace {

std::atomic<pid_t> g_child{0};

// Signals sent to hvdrun alone (kill, a batch system) go on to mpirun; a terminal's Ctrl-C
// already reached mpirun, which is in hvdrun's process group, and is not sent a second time
// (mpirun takes a second SIGINT as "terminate forcibly").
void forward_signal(int sig, siginfo_t* info, void*) {
  pid_t child = g_child.load();
  if (child > 0 && (info == nullptr || info->si_code == SI_USER || info->si_code == SI_QUEUE))
    ::kill(child, sig);
}

// The descendants of `root` (children first found, then theirs), from /proc.
std::vector<pid_t> descendants(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> procs;  // pid, parent
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (!end || *end != '\0' || pid <= 0) continue;
      std::string path = std::string("/proc/") + e->d_name + "/stat";
      FILE* f = std::fopen(path.c_str(), "r");
      if (!f) continue;
      char buf[512];
      size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      buf[n] = '\0';
      const char* rp = std::strrchr(buf, ')');  // the command name may hold spaces
      int ppid = 0;
      char state = 0;
      if (rp && std::sscanf(rp + 1, " %c %d", &state, &ppid) == 2)
        procs.emplace_back(static_cast<pid_t>(pid), static_cast<pid_t>(ppid));
    }
    ::closedir(d);
  }
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size(); ++i)
    for (const auto& [pid, ppid] : procs)
      if (ppid == out[i]) out.push_back(pid);
  out.erase(out.begin());
  return out;
}

}  // namespace

namespace {

// An owned file descriptor: closed when it goes out of scope, so that every return path of
// supervise_plan closes what it opened.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// A pipe as two owned ends; false when the system refuses one.
bool make_pipe(UniqueFd& read_end, UniqueFd& write_end, int flags) {
  int fds[2];
  if (::pipe2(fds, flags) != 0) return false;
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return true;
}

void write_all(int fd, const char* data, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = ::write(fd, data + off, n - off);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

// Signals sent to hvdrun go on to the child (forward_signal).
void forward_signals_to(pid_t child) {
  g_child.store(child);
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2})
    ::sigaction(sig, &sa, nullptr);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// mpirun has been aborting for longer than the grace period: it and its own children (the ranks
// on this node, helpers) are ended, so that none is left orphaned.
int end_stuck_abort(pid_t pid, int abort_grace_seconds) {
  std::fprintf(
      stderr,
      "hvdrun: error: mpirun has been aborting the job for %d s without finishing: a node it "
      "started ranks on no longer answers (its host or network link failed; the ranks' errors "
      "above name the lost ranks). Ending mpirun; ranks on that node end when their daemon "
      "loses mpirun. Check that node, then rerun without it (-H/--hostfile) or resume from the "
      "last checkpoint.\n",
      abort_grace_seconds);
  ::kill(pid, SIGSTOP);
  for (pid_t d : descendants(pid)) ::kill(d, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return 1;
}

// Copies mpirun's stderr through as it comes and watches it for the notice that the job is being
// aborted. Open MPI's abort waits for every node's daemon to confirm: a daemon behind a dead link
// never does, and mpirun would wait until TCP gives up (many minutes).
class StderrPump {
 public:
  explicit StderrPump(UniqueFd fd) : fd_(std::move(fd)) {}
  // Waits up to 200 ms for output and copies it; true once the abort notice has been seen.
  bool pump() {
    if (!open_) {
      ::usleep(200000);
      return aborting_;
    }
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) return aborting_;
    ssize_t n = ::read(fd_.get(), buf_, sizeof buf_);
    if (n > 0) {
      write_all(STDERR_FILENO, buf_, static_cast<size_t>(n));
      tail_.append(buf_, static_cast<size_t>(n));  // a notice split across reads is still found
      aborting_ = aborting_ || is_abort_notice(tail_);
      if (tail_.size() > 512) tail_.erase(0, tail_.size() - 512);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      open_ = false;
    }
    return aborting_;
  }
  // The job's last lines, after the child has exited.
  void drain() {
    while (open_) {
      ssize_t n = ::read(fd_.get(), buf_, sizeof buf_);
      if (n <= 0) break;
      write_all(STDERR_FILENO, buf_, static_cast<size_t>(n));
    }
  }

 private:
  UniqueFd fd_;
  bool open_ = true, aborting_ = false;
  std::string tail_;
  char buf_[8192];
};

}  // namespace

int supervise_plan(const LaunchPlan& plan, int abort_grace_seconds) {
  UniqueFd err_read, err_write, execfail_read, execfail_write;
  // execfail is close-on-exec: the child reports a failed execvp through it.
  if (!make_pipe(err_read, err_write, 0) || !make_pipe(execfail_read, execfail_write, O_CLOEXEC))
    return exec_plan(plan);  // cannot supervise: behave as before
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) return exec_plan(plan);
  if (pid == 0) {
    err_read.reset();
    execfail_read.reset();
    ::dup2(err_write.get(), STDERR_FILENO);
    err_write.reset();
    std::vector<char*> argv = prepare_exec(plan);
    ::execvp(argv[0], argv.data());
    int err = errno;
    (void)!::write(execfail_write.get(), &err, sizeof err);
    ::_exit(127);
  }
  err_write.reset();
  execfail_write.reset();
  int exec_err = 0;
  if (::read(execfail_read.get(), &exec_err, sizeof exec_err) ==
      static_cast<ssize_t>(sizeof exec_err)) {
    ::waitpid(pid, nullptr, 0);
    std::fprintf(stderr, "hvdrun: cannot run '%s': %s\n", plan.argv[0].c_str(),
                 std::strerror(exec_err));
    return exec_err == ENOENT ? 127 : 126;
  }
  execfail_read.reset();
  forward_signals_to(pid);

  using Clock = std::chrono::steady_clock;
  StderrPump pump(std::move(err_read));
  std::optional<Clock::time_point> deadline;
  while (true) {
    if (pump.pump() && !deadline)
      deadline = Clock::now() + std::chrono::seconds(abort_grace_seconds);
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pump.drain();
      g_child.store(0);
      return exit_code_of(status);
    }
    if (deadline && Clock::now() > *deadline) {
      int rc = end_stuck_abort(pid, abort_grace_seconds);
      g_child.store(0);
      return rc;
    }
  }
}

}  // namespace hvd::launcher
