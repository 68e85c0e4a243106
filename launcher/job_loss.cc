#include "launcher/job_loss.h"

#include <regex>
#include <string>

namespace hvd::launcher {
namespace {

// A line longer than this is cut: a runaway line must not grow hvdrun without bound, and every
// notice read here is short.
constexpr size_t kMaxLine = 4096;

}  // namespace

std::optional<std::vector<int>> parse_lost_ranks(std::string_view line) {
  // rank_list (common/ranks.cc): "rank 3", "ranks 2, 3", "ranks 0-2, 5", "... and 4 more".
  static const std::regex kSentence(
      R"((?:^|[^A-Za-z_])ranks? ((?:\d+(?:-\d+)?)(?:, \d+(?:-\d+)?)*)(?: and \d+ more)? )"
      R"((?:was|were) lost)");
  static const std::regex kItem(R"((\d+)(?:-(\d+))?)");
  std::cmatch m;
  if (!std::regex_search(line.data(), line.data() + line.size(), m, kSentence)) return std::nullopt;
  std::vector<int> ranks;
  const std::string list = m[1].str();
  for (auto it = std::sregex_iterator(list.begin(), list.end(), kItem);
       it != std::sregex_iterator(); ++it) {
    const long first = std::stol((*it)[1].str());
    const long last = (*it)[2].matched ? std::stol((*it)[2].str()) : first;
    for (long r = first; r <= last && r - first < (1 << 20); ++r)
      ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

void JobLossScanner::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n') {
      scan_line(partial_);
      partial_.clear();
    } else if (partial_.size() < kMaxLine) {
      partial_ += c;
    }
  }
}

void JobLossScanner::scan_line(std::string_view line) {
  static const std::regex kKilled(
      R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+))");
  static const std::regex kDaemon(R"(Remote daemon: *\S+ on node (\S+))");
  // Cheap filters first: every line of the job's stderr passes here.
  const bool lost = line.find(" lost") != std::string_view::npos;
  const bool killed = line.find("exited on signal") != std::string_view::npos;
  const bool daemon = line.find("Remote daemon") != std::string_view::npos;
  if (!lost && !killed && !daemon) return;
  if (auto ranks = lost ? parse_lost_ranks(line) : std::nullopt) {
    loss_.lost_ranks.insert(ranks->begin(), ranks->end());
    return;
  }
  std::cmatch m;
  const char* b = line.data();
  const char* e = line.data() + line.size();
  if (std::regex_search(b, e, m, kKilled)) {
    if (std::stoi(m[3].str()) == 9) {
      loss_.killed_ranks.insert(std::stoi(m[1].str()));
      loss_.killed_on_hosts.insert(m[2].str());
    }
  } else if (std::regex_search(b, e, m, kDaemon)) {
    loss_.lost_daemon_hosts.insert(m[1].str());
  }
}

}  // namespace hvd::launcher
