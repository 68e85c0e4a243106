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

// The signals hvdrun relays to mpirun. The handler only counts them (lock-free atomics are
// async-signal-safe); the supervise loop, woken by the EINTR of its poll, acts on the counts.
constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
constexpr size_t kRelayedCount = sizeof kRelayed / sizeof kRelayed[0];
std::atomic<unsigned> g_sent[kRelayedCount];  // sent with kill()/sigqueue(): to be passed on
std::atomic<unsigned> g_stops{0};             // INT/TERM/HUP/QUIT from anywhere
static_assert(std::atomic<unsigned>::is_always_lock_free);

// Signals sent to hvdrun alone (kill, a batch system) are counted to be passed on; a terminal's
// Ctrl-C has already reached mpirun, which is in hvdrun's process group, and is not counted for
// passing on (mpirun takes a second SIGINT as "terminate forcibly"), only as a stop.
void note_signal(int sig, siginfo_t* info, void*) {
  const bool sent = info == nullptr || info->si_code == SI_USER || info->si_code == SI_QUEUE;
  for (size_t i = 0; i < kRelayedCount; ++i)
    if (kRelayed[i] == sig && sent) g_sent[i].fetch_add(1);
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) g_stops.fetch_add(1);
}

void install_signal_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa {};
  sa.sa_sigaction = note_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : kRelayed) ::sigaction(sig, &sa, nullptr);
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
      "loses mpirun. Without --restarts: check that node, then rerun without it (-H/--hostfile); "
      "the trainer resumes from its last checkpoint.\n",
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
      scanner_.feed(std::string_view(buf_, static_cast<size_t>(n)));
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
      scanner_.feed(std::string_view(buf_, static_cast<size_t>(n)));
    }
    scanner_.feed("\n");  // a last line without its newline
  }
  const JobLoss& loss() const { return scanner_.loss(); }

 private:
  UniqueFd fd_;
  bool open_ = true, aborting_ = false;
  std::string tail_;
  JobLossScanner scanner_;
  char buf_[8192];
};

using Clock = std::chrono::steady_clock;

// Passes the signals counted by note_signal on to mpirun, from the supervise loop. SIGTERM is the
// exception: hvd trainers take SIGUSR1 as "stop at an agreed step, save, exit 75", which mpirun
// forwards to every rank, whereas Open MPI turns a SIGTERM into SIGTERM then SIGKILL of every
// rank within seconds, too soon to save. So the first SIGTERM becomes SIGUSR1, and SIGTERM
// follows after the stop grace, or at a second SIGTERM.
class SignalRelay {
 public:
  SignalRelay(pid_t child, int stop_grace_seconds)
      : child_(child), grace_(stop_grace_seconds), stops_at_start_(g_stops.load()) {
    for (size_t i = 0; i < kRelayedCount; ++i) handled_[i] = g_sent[i].load();
  }

  void poll() {
    for (size_t i = 0; i < kRelayedCount; ++i)
      for (unsigned n = g_sent[i].load(); handled_[i] != n; ++handled_[i]) relay(kRelayed[i]);
    if (usr1_sent_ && !term_sent_ && Clock::now() >= term_deadline_) {
      std::fprintf(stderr,
                   "hvdrun: the job has not ended %d s after SIGUSR1 (--stop-grace %d): "
                   "forwarding SIGTERM to mpirun.\n",
                   grace_, grace_);
      send(SIGTERM);
    }
  }

  bool stop_requested() const { return g_stops.load() != stops_at_start_; }

 private:
  void relay(int sig) {
    if (sig != SIGTERM || grace_ <= 0) {
      ::kill(child_, sig);
      return;
    }
    if (usr1_sent_) {
      if (!term_sent_) std::fprintf(stderr, "hvdrun: second SIGTERM: forwarding it to mpirun.\n");
      send(SIGTERM);
      return;
    }
    std::fprintf(stderr,
                 "hvdrun: SIGTERM: sending SIGUSR1 to mpirun, which passes it to every rank (hvd "
                 "trainers save a checkpoint and exit 75); SIGTERM follows in %d s if the job has "
                 "not ended (--stop-grace), or at a second SIGTERM.\n",
                 grace_);
    ::kill(child_, SIGUSR1);
    usr1_sent_ = true;
    term_deadline_ = Clock::now() + std::chrono::seconds(grace_);
  }

  void send(int sig) {
    ::kill(child_, sig);
    term_sent_ = term_sent_ || sig == SIGTERM;
  }

  pid_t child_;
  int grace_;
  unsigned stops_at_start_;
  unsigned handled_[kRelayedCount] = {};
  // A plain time point and a flag: GCC's -Wmaybe-uninitialized misreads an optional<time_point>.
  bool usr1_sent_ = false;
  Clock::time_point term_deadline_{};
  bool term_sent_ = false;
};

}  // namespace

JobOutcome supervise_job(const LaunchPlan& plan, const SuperviseOptions& options) {
  JobOutcome out;
  UniqueFd err_read, err_write, execfail_read, execfail_write;
  // execfail is close-on-exec: the child reports a failed execvp through it.
  if (!make_pipe(err_read, err_write, 0) || !make_pipe(execfail_read, execfail_write, O_CLOEXEC)) {
    out.exit_code = exec_plan(plan);  // cannot supervise: behave as before
    return out;
  }
  install_signal_handlers();
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) {
    out.exit_code = exec_plan(plan);
    return out;
  }
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
  ssize_t got;
  do {
    got = ::read(execfail_read.get(), &exec_err, sizeof exec_err);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof exec_err)) {
    ::waitpid(pid, nullptr, 0);
    std::fprintf(stderr, "hvdrun: cannot run '%s': %s\n", plan.argv[0].c_str(),
                 std::strerror(exec_err));
    out.exit_code = exec_err == ENOENT ? 127 : 126;
    return out;
  }
  execfail_read.reset();

  SignalRelay relay(pid, options.stop_grace_seconds);
  StderrPump pump(std::move(err_read));
  std::optional<Clock::time_point> deadline;
  while (true) {
    relay.poll();
    if (pump.pump() && !deadline)
      deadline = Clock::now() + std::chrono::seconds(options.abort_grace_seconds);
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pump.drain();
      out.exit_code = exit_code_of(status);
      break;
    }
    if (deadline && Clock::now() > *deadline) {
      out.exit_code = end_stuck_abort(pid, options.abort_grace_seconds);
      out.abort_ended = true;
      break;
    }
  }
  out.stop_requested = relay.stop_requested();
  out.loss = pump.loss();
  return out;
}

int supervise_plan(const LaunchPlan& plan, int abort_grace_seconds) {
  SuperviseOptions options;
  options.abort_grace_seconds = abort_grace_seconds;
  return supervise_job(plan, options).exit_code;
}

unsigned stop_signals_received() { return g_stops.load(); }

}  // namespace hvd::launcher
