// The host-name rule (cluster/host_name.h) and every path that reads host names: -H
// (parse_host_spec), hostfiles (parse_hostfile) and the SLURM node lists (expand_hostlist through
// SLURM_JOB_NODELIST / SLURM_STEP_NODELIST). One table of good and bad names goes through each;
// a bad name is refused naming the host, the character and where it came from.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster/env_resolver.h"
#include "cluster/host_name.h"
#include "cluster/hostfile.h"
#include "cluster/hostlist.h"
#include "hvd/error.h"
#include "tests/support/test_util.h"

namespace hvd::cluster {
namespace {

using hvdtest::error_of;
using hvdtest::fake_env;

const std::vector<std::string> kGood = {"node01",
                                        "NODE-1",
                                        "gpu-3.cluster.example.org",
                                        "login_1",
                                        "_svc",
                                        "17",
                                        "a",
                                        "x--y",
                                        "123abc",
                                        "10.0.0.1",
                                        "0.0.0.0",
                                        "255.255.255.255",
                                        "[fe80::1]",
                                        "[::1]",
                                        "[::]",
                                        "[2001:db8::7]",
                                        "[::ffff:10.0.0.1]",
                                        "ip-10-0-0-1.ec2.internal"};

struct Bad {
  std::string name;
  std::string mention;  // what the message must say about it
};

const std::vector<Bad> kBad = {
    {"node1;id", "has ';' at character 6"},
    {"node1`id`", "has '`' at character 6"},
    {"a$(id)", "has '$' at character 2"},
    {"a|b", "'|'"},
    {"a&b", "'&'"},
    {"a>b", "'>'"},
    {"a/b", "'/'"},
    {"a\\b", "'\\'"},
    {"a'b", "'''"},
    {"a\"b", "'\"'"},
    {"a*b", "'*'"},
    {"a!b", "'!'"},
    {"a@b", "'@'"},
    {"a b", "a blank at character 2"},
    {"a\tb", "a tab at character 2"},
    {"a\nb", "byte 0x0a"},
    {std::string("a\0b", 3), "byte 0x00"},
    {"a\x07"
     "b",
     "byte 0x07"},
    {"n\xc3\xa9", "byte 0xc3 at character 2"},
    {"a:b", "an IPv6 address goes in brackets"},
    {"a[1]", "'['"},
    {"a]", "']'"},
    {"a,b", "','"},
    {"a#b", "'#'"},
    {"a=b", "'='"},
    {"-n1", "starts with '-' at character 1"},
    {"n1-", "ends with '-' at character 3"},
    {"a.-b", "starts with '-' at character 3"},
    {"a..b", "has '..' at character 2"},
    {".a", "starts with '.'"},
    {"a.", "ends with '.'"},
    {"10.0.0.256", "'256' is not a number from 0 to 255"},
    {"10.0.0.0001", "'0001' is not a number"},
    {"1.2.3", "not an IPv4 address"},
    {"1.2.3.4.5", "not an IPv4 address"},
    {"[1:::2]", "is not an IPv6 address"},
    {"[]", "is not an IPv6 address"},
    {"[fe80::g]", "has 'g' at character 8"},
    {"[fe80::1%eth0]", "has '%' at character 9"},
    {"[node1]", "has 'n' at character 2"},
};

bool has_any(const std::string& s, const char* chars) {
  return s.find_first_of(chars) != std::string::npos;
}

TEST(HostName, GoodNamesPass) {
  for (const auto& n : kGood) EXPECT_EQ(host_name_problem(n), "") << n;
}

TEST(HostName, BadNamesAreNamedWithTheCharacter) {
  for (const auto& b : kBad) {
    const std::string why = host_name_problem(b.name);
    EXPECT_EQ(why.rfind("host name '", 0), 0u) << b.name << ": " << why;
    EXPECT_NE(why.find(b.mention), std::string::npos) << b.name << ": " << why;
  }
  EXPECT_EQ(host_name_problem(""), "a host name is empty");
  // Shown as it can be printed: a control byte as \xNN.
  EXPECT_NE(host_name_problem("a\x07"
                              "b")
                .find("host name 'a\\x07b'"),
            std::string::npos);
}

// Every byte between two letters: only letters, digits, '-', '_' and '.' make a host name.
TEST(HostName, EveryByteBetweenTwoLetters) {
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    ch == '-' || ch == '_' || ch == '.';
    EXPECT_EQ(host_name_problem(std::string("a") + ch + "b").empty(), ok) << "byte " << c;
  }
}

// ---- -H ------------------------------------------------------------------------------------

TEST(HostName, ThroughHostSpec) {
  for (const auto& n : kGood) {
    EXPECT_EQ(parse_host_spec(n + ":2"), (std::vector<HostSlots>{{n, 2}})) << n;
    EXPECT_EQ(parse_host_spec("x," + n), (std::vector<HostSlots>{{"x", 1}, {n, 1}})) << n;
  }
  for (const auto& b : kBad) {
    // A NUL cannot reach -H (a command-line word ends there).
    if (b.name.empty() || has_any(b.name, ",") || b.name.find('\0') != std::string::npos) continue;
    const std::string spec = "ok:1," + b.name + ":2";
    const std::string msg = error_of([&] { parse_host_spec(spec); });
    EXPECT_EQ(msg.rfind("invalid -H host spec '" + spec + "': host name '", 0), 0u)
        << b.name << ": " << msg;
    EXPECT_NE(msg.find(b.mention), std::string::npos) << b.name << ": " << msg;
  }
  // The example, in full.
  EXPECT_EQ(error_of([] { parse_host_spec("node1;id:2"); }),
            "invalid -H host spec 'node1;id:2': host name 'node1;id' has ';' at character 6, "
            "which no host name has (letters, digits, '-', '_' and '.'; an IPv4 address; an IPv6 "
            "address in brackets such as [fe80::1]).");
  // An IPv6 address keeps its brackets; its slots follow the ']'.
  EXPECT_EQ(format_host_spec(parse_host_spec("[fe80::1]:2,[::1]")), "[fe80::1]:2,[::1]:1");
  EXPECT_NE(error_of([] { parse_host_spec("[::1]x"); }).find("is not ':SLOTS'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_host_spec("fe80::1"); }).find("goes in brackets"),
            std::string::npos);
}

// ---- --hostfile ------------------------------------------------------------------------------

TEST(HostName, ThroughHostfile) {
  for (const auto& n : kGood)
    EXPECT_EQ(parse_hostfile("# c\n" + n + " slots=3\n", "h.txt"), (std::vector<HostSlots>{{n, 3}}))
        << n;
  for (const auto& b : kBad) {
    // Blanks, '#' and '=' are the file's own syntax (words, comments, keys), tested there.
    if (b.name.empty() || has_any(b.name, " \t\n\r#=")) continue;
    const std::string text = "n0 slots=1\n\n" + b.name + " slots=2\n";
    const std::string msg = error_of([&] { parse_hostfile(text, "hosts.txt"); });
    EXPECT_EQ(msg.rfind("hostfile hosts.txt line 3: host name '", 0), 0u) << b.name << ": " << msg;
    EXPECT_NE(msg.find(b.mention), std::string::npos) << b.name << ": " << msg;
  }
  EXPECT_EQ(error_of([] { parse_hostfile("node1`id` slots=2\n", "hosts.txt"); }),
            "hostfile hosts.txt line 1: host name 'node1`id`' has '`' at character 6, which no "
            "host name has (letters, digits, '-', '_' and '.'; an IPv4 address; an IPv6 address "
            "in brackets such as [fe80::1]).");
}

// ---- SLURM node lists ----------------------------------------------------------------------

TEST(HostName, ThroughSlurmNodeLists) {
  for (const auto& n : kGood) {
    if (has_any(n, "[]")) continue;  // brackets are SLURM's ranges: node names are names
    EXPECT_EQ(expand_hostlist("x," + n), (std::vector<std::string>{"x", n})) << n;
  }
  for (const auto& b : kBad) {
    // Blanks and ',' separate entries, brackets are ranges: hostlist syntax, tested there.
    // A NUL cannot reach an environment variable.
    if (b.name.empty() || has_any(b.name, " \t\n\r,[]") || b.name.find('\0') != std::string::npos)
      continue;
    const std::string list = "n[1-2]," + b.name;
    const std::string msg = error_of([&] {
      slurm_allocation(fake_env({{"SLURM_JOB_ID", "9"},
                                 {"SLURM_JOB_NODELIST", list},
                                 {"SLURM_TASKS_PER_NODE", "1(x3)"}}));
    });
    EXPECT_EQ(msg.rfind("SLURM_JOB_NODELIST: invalid SLURM hostlist '" + list +
                            "' at position 7: host name '",
                        0),
              0u)
        << b.name << ": " << msg;
    EXPECT_NE(msg.find(b.mention), std::string::npos) << b.name << ": " << msg;
  }
  // A bad name made by a range, and the step's list read by the SLURM resolver.
  std::string msg = error_of([] { expand_hostlist("a,-n[1-2]"); });
  EXPECT_NE(msg.find("at position 2: host name '-n1' has a label that starts with '-'"),
            std::string::npos)
      << msg;
  msg = error_of([] {
    resolve_slurm(fake_env({{"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "2"},
                            {"SLURM_LOCALID", "0"},
                            {"SLURM_STEP_NODELIST", "n1,n2;reboot"},
                            {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}}));
  });
  EXPECT_EQ(msg.rfind("SLURM_STEP_NODELIST: invalid SLURM hostlist 'n1,n2;reboot' at position 3: "
                      "host name 'n2;reboot' has ';' at character 3",
                      0),
            0u)
      << msg;
}

}  // namespace
}  // namespace hvd::cluster
