#include "cluster/hostfile.h"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "cluster/host_name.h"
#include "hvd/error.h"

namespace hvd::cluster {
namespace {

constexpr int kMaxSlots = 1 << 20;

// Parses a positive slot count; returns -1 if `s` is not an integer in [1, kMaxSlots].
int parse_slots(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return (v >= 1 && v <= kMaxSlots) ? v : -1;
}

std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen_hosts;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  auto fail = [&](const std::string& why) -> void {
    throw InvalidArgumentError("hostfile " + source + " line " + std::to_string(line_no) + ": " +
                               why + " (expected 'HOST' or 'HOST slots=N'; '#' starts a comment).");
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    auto words = split_words(line);
    if (words.empty()) continue;

    HostSlots hs{words[0], 1};
    if (hs.host.find('=') != std::string::npos)
      fail("'" + hs.host + "' is not a host name (a line starts with the host)");
    if (std::string problem = host_name_problem(hs.host); !problem.empty())
      throw InvalidArgumentError("hostfile " + source + " line " + std::to_string(line_no) + ": " +
                                 problem + ".");
    int max_slots = -1;
    bool have_slots = false;
    for (size_t i = 1; i < words.size(); ++i) {
      const std::string& w = words[i];
      auto eq = w.find('=');
      if (eq == std::string::npos) fail("unexpected word '" + w + "' after host '" + hs.host + "'");
      std::string key = w.substr(0, eq), value = w.substr(eq + 1);
      int v = parse_slots(value);
      if (key == "slots") {
        if (have_slots) fail("slots given twice for host '" + hs.host + "'");
        if (v < 0) fail("slots='" + value + "' is not a positive integer");
        hs.slots = v;
        have_slots = true;
      } else if (key == "max_slots" || key == "max-slots") {
        if (v < 0) fail(key + "='" + value + "' is not a positive integer");
        max_slots = v;
      } else {
        fail("unknown key '" + key + "' (accepted: slots, max_slots)");
      }
    }
    if (max_slots >= 0 && max_slots < hs.slots)
      fail("max_slots=" + std::to_string(max_slots) +
           " is less than slots=" + std::to_string(hs.slots));
    if (!seen_hosts.insert(hs.host).second)
      fail("host '" + hs.host + "' is listed twice; give it one line with the total slots");
    hosts.push_back(std::move(hs));
  }
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgumentError("cannot read hostfile '" + path + "': check --hostfile.");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InvalidArgumentError("error while reading hostfile '" + path + "'.");
  auto hosts = parse_hostfile(text.str(), path);
  if (hosts.empty())
    throw InvalidArgumentError("hostfile '" + path + "' lists no hosts: add lines 'HOST slots=N'.");
  return hosts;
}

std::vector<HostSlots> parse_host_spec(const std::string& spec) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen_hosts;
  auto fail = [&](const std::string& why) -> void {
    throw InvalidArgumentError("invalid -H host spec '" + spec + "': " + why +
                               " (expected HOST[:SLOTS],... such as 'a:2,b:4').");
  };
  if (spec.find_first_not_of(" \t") == std::string::npos) fail("no hosts given");
  size_t pos = 0;
  while (true) {
    size_t comma = spec.find(',', pos);
    std::string item =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (item.empty()) fail("empty entry at position " + std::to_string(pos));
    HostSlots hs{item, 1};
    // The slot count follows the last ':', or the ']' of a bracketed IPv6 address ("[fe80::1]:2").
    const size_t close = item[0] == '[' ? item.find(']') : std::string::npos;
    const size_t colon = close != std::string::npos
                             ? (close + 1 < item.size() ? close + 1 : std::string::npos)
                             : item.rfind(':');
    if (colon != std::string::npos) {
      hs.host = item.substr(0, colon);
      if (item[colon] != ':')
        fail("'" + item.substr(colon) + "' after host '" + hs.host + "' is not ':SLOTS'");
      std::string value = item.substr(colon + 1);
      hs.slots = parse_slots(value);
      if (hs.slots < 0)
        fail("slots '" + value + "' of host '" + hs.host + "' is not a positive integer");
    }
    if (hs.host.empty()) fail("missing host name in '" + item + "'");
    if (std::string problem = host_name_problem(hs.host); !problem.empty())
      throw InvalidArgumentError("invalid -H host spec '" + spec + "': " + problem + ".");
    if (!seen_hosts.insert(hs.host).second)
      fail("host '" + hs.host + "' is listed twice; give it once with the total slots");
    hosts.push_back(std::move(hs));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return hosts;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  long long sum = 0;
  for (const auto& h : hosts) sum += h.slots;
  return sum > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max()
                                               : static_cast<int>(sum);
}

std::string format_host_spec(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (size_t i = 0; i < hosts.size(); ++i)
    out += (i ? "," : "") + hosts[i].host + ":" + std::to_string(hosts[i].slots);
  return out;
}

}  // namespace hvd::cluster
