// StopOnSignal (hvd/stop.h): signal handlers that ask for an agreed stop, and the message that
// names who asked.

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "common/ranks.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "hvd/hvd.h"
#include "hvd/stop.h"

namespace hvd {
namespace {

void on_stop_signal(int signal) { request_stop(signal); }  // one atomic store: signal-safe

struct NamedSignal {
  const char* name;
  int number;
};
constexpr NamedSignal kSignals[] = {{"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
                                    {"INT", SIGINT},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
                                    {"CONT", SIGCONT}, {"XCPU", SIGXCPU}, {"ALRM", SIGALRM}};

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Named only to be refused: they cannot be caught.
constexpr NamedSignal kUncatchable[] = {{"KILL", SIGKILL}, {"STOP", SIGSTOP}};

}  // namespace

std::string signal_name(int signal) {
  for (const auto& s : kSignals)
    if (s.number == signal) return std::string("SIG") + s.name;
  for (const auto& s : kUncatchable)
    if (s.number == signal) return std::string("SIG") + s.name;
  return "signal " + std::to_string(signal);
}

std::vector<int> parse_signals(const std::string& list, const std::string& flag) {
  std::vector<int> out;
  if (trim(list) == "none") return out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = list.find(',', pos);
    std::string item =
        trim(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
    std::string upper;
    for (char c : item) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (upper.rfind("SIG", 0) == 0) upper.erase(0, 3);
    int number = 0;
    for (const auto& s : kSignals)
      if (upper == s.name) number = s.number;
    for (const auto& s : kUncatchable)
      if (upper == s.name) number = s.number;
    if (number == 0 && !upper.empty() &&
        upper.find_first_not_of("0123456789") == std::string::npos && upper.size() < 4)
      number = std::stoi(upper);
    std::string names;
    for (const auto& s : kSignals) names += (names.empty() ? "" : ", ") + std::string(s.name);
    if (number == SIGKILL || number == SIGSTOP)
      throw InvalidArgumentError(flag + ": " + signal_name(number) +
                                 " cannot be caught: use TERM or USR1 (or none).");
    if (number <= 0 || number >= NSIG)
      throw InvalidArgumentError(flag + " is '" + list + "': '" + item +
                                 "' is not a signal: give names (" + names +
                                 ") or numbers, separated by commas, or none.");
    bool seen = false;
    for (int s : out) seen = seen || s == number;
    if (!seen) out.push_back(number);
  }
  return out;
}

StopOnSignal::StopOnSignal(std::vector<int> signals) : signals_(std::move(signals)) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  // SA_RESTART: a system call the signal lands in (rank 0 writing a checkpoint, a read of the
  // data) goes on instead of failing with EINTR.
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  previous_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i)
    if (::sigaction(signals_[i], &sa, &previous_[i]) != 0)
      throw InvalidArgumentError("StopOnSignal: cannot handle " + signal_name(signals_[i]) + ": " +
                                 std::strerror(errno) + ".");
}

StopOnSignal::~StopOnSignal() {
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &previous_[i], nullptr);
}

bool StopOnSignal::should_stop() {
  if (stopping_) return true;
  if (!stop_agreed()) return false;
  stopping_ = true;
  // Every rank is here after the same step: one allgather, once, says who was asked.
  const std::vector<int32_t> mine{static_cast<int32_t>(stop_requested() ? stop_signal() : -1)};
  const std::vector<int32_t> all = allgather(mine, "hvd.stop_on_signal.who");
  std::vector<int> ranks;
  int first = 0;
  bool mixed = false;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] < 0) continue;
    if (ranks.empty())
      first = all[r];
    else
      mixed = mixed || all[r] != first;
    ranks.push_back(static_cast<int>(r));
  }
  if (ranks.empty()) {
    reason_ = "a stop request";  // cannot happen: some rank asked
  } else if (mixed) {
    reason_ = "signals on " + rank_list(ranks);
  } else {
    reason_ = (first > 0 ? signal_name(first) : std::string("hvd::request_stop()")) + " on " +
              rank_list(ranks);
  }
  return true;
}

}  // namespace hvd
