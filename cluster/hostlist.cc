#include "cluster/hostlist.h"

#include <cctype>
#include <cstdint>
#include <string_view>

#include "cluster/host_name.h"
#include "hvd/error.h"

namespace hvd::cluster {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Numbers in ranges and counts are bounded well below overflow.
constexpr uint64_t kMaxNumber = 999'999'999'999'999'999ull;  // 18 digits

// Bound on the characters of all expanded names together: kMaxExpandedHosts alone does not bound
// memory, since a 4 KB entry such as "<4000 letters>[0-999999]" would expand to 4 GB.
constexpr size_t kMaxExpandedChars = size_t{64} << 20;

[[noreturn]] void fail(const char* what, const std::string& input, size_t pos,
                       const std::string& expected) {
  throw InvalidArgumentError(std::string("invalid SLURM ") + what + " '" + input +
                             "' at position " + std::to_string(pos) + ": " + expected + ".");
}

// Parses a run of digits at `pos`; advances pos past it. Returns the digits as written.
std::string_view read_digits(const std::string& s, size_t& pos) {
  size_t b = pos;
  while (pos < s.size() && is_digit(s[pos])) ++pos;
  return std::string_view(s).substr(b, pos - b);
}

uint64_t to_number(const char* what, const std::string& input, size_t pos, std::string_view d) {
  if (d.size() > 18) fail(what, input, pos, "number '" + std::string(d) + "' is too large");
  uint64_t x = 0;
  for (char c : d) x = x * 10 + static_cast<uint64_t>(c - '0');
  if (x > kMaxNumber) fail(what, input, pos, "number is too large");
  return x;
}

std::string pad(uint64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// One bracket group "[a-b,c]" starting at s[pos] == '['. Returns the formatted numbers in the
// order written and leaves pos after the closing ']'.
std::vector<std::string> parse_group(const std::string& s, size_t& pos, size_t budget) {
  const char* what = "hostlist";
  size_t open = pos++;
  std::vector<std::string> out;
  while (true) {
    size_t at = pos;
    std::string_view lo = read_digits(s, pos);
    if (lo.empty()) {
      if (pos >= s.size()) fail(what, s, open, "'[' is never closed");
      fail(what, s, at, std::string("expected a number, found '") + s[at] + "'");
    }
    uint64_t lo_v = to_number(what, s, at, lo);
    uint64_t hi_v = lo_v;
    if (pos < s.size() && s[pos] == '-') {
      size_t hi_at = ++pos;
      std::string_view hi = read_digits(s, pos);
      if (hi.empty()) {
        if (pos >= s.size()) fail(what, s, open, "'[' is never closed");
        fail(what, s, hi_at, "expected the upper bound of the range after '-'");
      }
      hi_v = to_number(what, s, hi_at, hi);
      if (hi_v < lo_v)
        fail(what, s, at,
             "range " + std::string(lo) + "-" + std::string(hi) + " runs backwards (write " +
                 std::string(hi) + "-" + std::string(lo) + " or list the numbers)");
    }
    if (hi_v - lo_v >= budget - out.size())
      fail(what, s, at, "expands to more than " + std::to_string(kMaxExpandedHosts) + " names");
    for (uint64_t v = lo_v;; ++v) {
      out.push_back(pad(v, lo.size()));
      if (v == hi_v) break;
    }
    if (pos >= s.size()) fail(what, s, open, "'[' is never closed");
    if (s[pos] == ',') {
      ++pos;
      continue;
    }
    if (s[pos] == ']') {
      ++pos;
      return out;
    }
    fail(what, s, pos, std::string("expected ',', '-' or ']', found '") + s[pos] + "'");
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& hostlist) {
  const char* what = "hostlist";
  std::vector<std::string> hosts;
  size_t chars = 0;
  size_t pos = 0;
  const size_t n = hostlist.size();
  while (pos < n) {
    // Skip separators between entries. Commas must separate non-empty entries.
    while (pos < n && is_blank(hostlist[pos])) ++pos;
    if (pos >= n) break;
    if (hostlist[pos] == ',') fail(what, hostlist, pos, "empty host name before ','");

    // One entry: literal text and bracket groups, expanded as an odometer (rightmost fastest).
    size_t entry_start = pos;
    std::vector<std::vector<std::string>> parts;
    size_t combos = 1;
    while (pos < n && hostlist[pos] != ',' && !is_blank(hostlist[pos])) {
      char c = hostlist[pos];
      if (c == ']') fail(what, hostlist, pos, "']' without a matching '['");
      if (c == '[') {
        size_t group_at = pos;
        auto group = parse_group(hostlist, pos, kMaxExpandedHosts);
        if (combos > kMaxExpandedHosts / group.size())
          fail(what, hostlist, group_at,
               "expands to more than " + std::to_string(kMaxExpandedHosts) + " names");
        combos *= group.size();
        parts.push_back(std::move(group));
      } else {
        size_t b = pos;
        while (pos < n && hostlist[pos] != '[' && hostlist[pos] != ']' && hostlist[pos] != ',' &&
               !is_blank(hostlist[pos]))
          ++pos;
        parts.push_back({hostlist.substr(b, pos - b)});
      }
    }
    if (hosts.size() + combos > kMaxExpandedHosts)
      fail(what, hostlist, entry_start,
           "expands to more than " + std::to_string(kMaxExpandedHosts) + " names");
    // The entry's characters, counted before any name is built: each value of a part appears in
    // combos / (that part's size) names. A list over the bound fails here, having allocated
    // nothing (it used to build names up to the bound first: ~3x the bound in memory, 2 GB of RSS
    // under the fuzzer's ASan). At most 2^20 combos x 2^20 values x 18 digits: no overflow.
    size_t entry_chars = 0;
    for (const auto& part : parts) {
      size_t part_chars = 0;
      for (const auto& v : part) part_chars += v.size();
      entry_chars += part_chars * (combos / part.size());
    }
    if (chars + entry_chars > kMaxExpandedChars)
      fail(
          what, hostlist, entry_start,
          "expands to more than " + std::to_string(kMaxExpandedChars >> 20) + " MiB of host names");
    chars += entry_chars;

    hosts.reserve(hosts.size() + combos);
    std::vector<size_t> idx(parts.size(), 0);
    for (size_t k = 0; k < combos; ++k) {
      size_t len = 0;
      for (size_t p = 0; p < parts.size(); ++p) len += parts[p][idx[p]].size();
      std::string name;
      name.reserve(len);
      for (size_t p = 0; p < parts.size(); ++p) name += parts[p][idx[p]];
      if (std::string problem = host_name_problem(name); !problem.empty())
        fail(what, hostlist, entry_start, problem);
      hosts.push_back(std::move(name));
      for (size_t p = parts.size(); p-- > 0;) {
        if (++idx[p] < parts[p].size()) break;
        idx[p] = 0;
      }
    }

    while (pos < n && is_blank(hostlist[pos])) ++pos;
    if (pos < n && hostlist[pos] == ',') {
      ++pos;
      size_t after = pos;
      while (after < n && is_blank(hostlist[after])) ++after;
      if (after >= n) fail(what, hostlist, pos - 1, "empty host name after ','");
    }
  }
  return hosts;
}

std::vector<int> expand_task_counts(const std::string& counts) {
  const char* what = "task count list";
  std::vector<int> out;
  size_t pos = 0;
  const size_t n = counts.size();
  auto skip_blanks = [&] {
    while (pos < n && is_blank(counts[pos])) ++pos;
  };
  skip_blanks();
  if (pos >= n) return out;
  while (true) {
    skip_blanks();
    size_t at = pos;
    std::string_view d = read_digits(counts, pos);
    if (d.empty())
      fail(what, counts, at,
           at < n ? std::string("expected a task count, found '") + counts[at] + "'"
                  : std::string("expected a task count after ','"));
    uint64_t tasks = to_number(what, counts, at, d);
    if (tasks > 1'000'000'000ull) fail(what, counts, at, "task count is too large");
    uint64_t repeat = 1;
    if (pos < n && counts[pos] == '(') {
      size_t paren = pos++;
      if (pos >= n || counts[pos] != 'x')
        fail(what, counts, pos, "expected 'x' after '(' as in 2(x3)");
      size_t rep_at = ++pos;
      std::string_view r = read_digits(counts, pos);
      if (r.empty()) fail(what, counts, rep_at, "expected a repeat count after '(x'");
      repeat = to_number(what, counts, rep_at, r);
      if (repeat == 0) fail(what, counts, rep_at, "repeat count must be at least 1");
      if (pos >= n || counts[pos] != ')')
        fail(what, counts, pos >= n ? paren : pos, "expected ')' to close '(x" + std::string(r));
      ++pos;
    }
    if (repeat > kMaxExpandedHosts - out.size())
      fail(what, counts, at,
           "expands to more than " + std::to_string(kMaxExpandedHosts) + " nodes");
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(tasks));
    skip_blanks();
    if (pos >= n) break;
    if (counts[pos] != ',')
      fail(what, counts, pos, std::string("expected ',' or the end, found '") + counts[pos] + "'");
    ++pos;
  }
  return out;
}

}  // namespace hvd::cluster
