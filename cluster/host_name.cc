#include "cluster/host_name.h"

#include <arpa/inet.h>

#include <cstdio>

namespace hvd::cluster {
namespace {

constexpr const char* kRule =
    "letters, digits, '-', '_' and '.'; an IPv4 address; an IPv6 address in brackets such as "
    "[fe80::1]";

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_printable(char c) { return c >= ' ' && c < 0x7f; }

// The name as it can be printed: bytes that are not printable ASCII become \xNN.
std::string shown(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (is_printable(c)) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out;
}

// "';'", "a blank", "byte 0x07".
std::string character(char c) {
  if (c == ' ') return "a blank";
  if (c == '\t') return "a tab";
  if (!is_printable(c)) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", static_cast<unsigned char>(c));
    return buf;
  }
  return std::string("'") + c + "'";
}

std::string head(std::string_view name) { return "host name '" + shown(name) + "'"; }

std::string at(size_t i) { return " at character " + std::to_string(i + 1); }

std::string ipv6_problem(std::string_view name) {
  const std::string_view inner = name.substr(1, name.size() - 2);
  for (size_t i = 0; i < inner.size(); ++i) {
    const char c = inner[i];
    if (!is_hex(c) && c != ':' && c != '.')
      return head(name) + " has " + character(c) + at(i + 1) +
             ", which an IPv6 address in brackets does not have (hex digits, ':' and '.' only)";
  }
  in6_addr addr;
  if (inner.empty() || ::inet_pton(AF_INET6, std::string(inner).c_str(), &addr) != 1)
    return head(name) + " is not an IPv6 address (e.g. [fe80::1], [2001:db8::7])";
  return "";
}

}  // namespace

std::string host_name_problem(std::string_view name) {
  if (name.empty()) return "a host name is empty";
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') return ipv6_problem(name);

  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (is_alnum(c) || c == '-' || c == '_' || c == '.') continue;
    std::string why =
        head(name) + " has " + character(c) + at(i) + ", which no host name has (" + kRule + ")";
    if (c == ':') why += "; an IPv6 address goes in brackets";
    return why;
  }

  // Labels: not empty, not starting or ending with '-'.
  bool all_digits = true;
  int labels = 0;
  for (size_t b = 0;; ++labels) {
    size_t e = name.find('.', b);
    if (e == std::string_view::npos) e = name.size();
    const std::string_view label = name.substr(b, e - b);
    if (label.empty()) {
      const std::string where = b == 0             ? "starts with '.'"
                                : e == name.size() ? "ends with '.'"
                                                   : "has '..'" + at(b - 1);
      return head(name) + " " + where + ": a label is empty, which no host name has (" + kRule +
             ")";
    }
    if (label.front() == '-' || label.back() == '-') {
      const size_t i = label.front() == '-' ? b : e - 1;
      return head(name) + " has a label that " + (label.front() == '-' ? "starts" : "ends") +
             " with '-'" + at(i) +
             ", which no host name has (a label starts and ends with a letter, a digit or '_')";
    }
    for (char c : label) all_digits = all_digits && is_digit(c);
    if (e == name.size()) break;
    b = e + 1;
  }
  ++labels;

  // Digits and dots only: an IPv4 address, or nothing.
  if (all_digits && labels > 1) {
    if (labels != 4)
      return head(name) + " has only digits and dots but is not an IPv4 address (four numbers " +
             "from 0 to 255, e.g. 10.0.0.1)";
    for (size_t b = 0; b <= name.size();) {
      size_t e = name.find('.', b);
      if (e == std::string_view::npos) e = name.size();
      const std::string_view part = name.substr(b, e - b);
      if (part.size() > 3 || std::stoi(std::string(part)) > 255)
        return head(name) + " is not an IPv4 address: '" + std::string(part) +
               "' is not a number from 0 to 255 (e.g. 10.0.0.1)";
      b = e + 1;
    }
  }
  return "";
}

}  // namespace hvd::cluster
