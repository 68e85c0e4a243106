// Hostfiles and -H host specs: slots, comments, blank lines, duplicates and bad lines.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cluster/hostfile.h"
#include "hvd/error.h"
#include "tests/support/test_util.h"

namespace hvd::cluster {
namespace {

using Hosts = std::vector<HostSlots>;

using hvdtest::error_of;

TEST(Hostfile, SlotsCommentsAndBlankLines) {
  const std::string text =
      "# cluster of three\n"
      "\n"
      "node01 slots=4\n"
      "   \t\n"
      "node02\n"
      "node03 slots=2   # trailing comment\n"
      "node04\tslots=1 max_slots=8\n";
  EXPECT_EQ(parse_hostfile(text, "h.txt"),
            (Hosts{{"node01", 4}, {"node02", 1}, {"node03", 2}, {"node04", 1}}));
}

TEST(Hostfile, NoTrailingNewlineAndCrLf) {
  EXPECT_EQ(parse_hostfile("a slots=2\r\nb", "h"), (Hosts{{"a", 2}, {"b", 1}}));
}

TEST(Hostfile, OnlyCommentsIsEmpty) {
  EXPECT_TRUE(parse_hostfile("# nothing\n\n", "h").empty());
  EXPECT_TRUE(parse_hostfile("", "h").empty());
}

struct BadLine {
  std::string text;
  int line;
  std::string mention;  // a word the message must contain
};

class HostfileBadLine : public ::testing::TestWithParam<BadLine> {};

TEST_P(HostfileBadLine, ErrorNamesFileAndLineNumber) {
  const auto& c = GetParam();
  std::string msg = error_of([&] { parse_hostfile(c.text, "hosts.txt"); });
  ASSERT_FALSE(msg.empty()) << "no error for:\n" << c.text;
  EXPECT_NE(msg.find("hosts.txt line " + std::to_string(c.line) + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.mention), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostfileBadLine,
                         ::testing::Values(BadLine{"a slots=2\n# c\n\na slots=1\n", 4,
                                                   "listed twice"},
                                           BadLine{"a slots=0\n", 1, "slots='0'"},
                                           BadLine{"a\nb slots=-1\n", 2, "slots='-1'"},
                                           BadLine{"a slots=two\n", 1, "slots='two'"},
                                           BadLine{"a slots=\n", 1, "slots=''"},
                                           BadLine{"a 4\n", 1, "unexpected word '4'"},
                                           BadLine{"\n\na cpus=4\n", 3, "unknown key 'cpus'"},
                                           BadLine{"slots=4\n", 1, "not a host name"},
                                           BadLine{"a slots=2 slots=3\n", 1, "slots given twice"},
                                           BadLine{"a slots=4 max_slots=2\n", 1, "max_slots=2"}));

TEST(Hostfile, ReadFromDisk) {
  std::string path = ::testing::TempDir() + "hvd_hostfile_test.txt";
  {
    std::ofstream out(path);
    out << "# two nodes\nn1 slots=3\nn2 slots=5\n";
  }
  EXPECT_EQ(read_hostfile(path), (Hosts{{"n1", 3}, {"n2", 5}}));
  {
    std::ofstream out(path);
    out << "# only a comment\n";
  }
  EXPECT_NE(error_of([&] { read_hostfile(path); }).find("lists no hosts"), std::string::npos);
  std::remove(path.c_str());
  std::string msg = error_of([&] { read_hostfile(path); });
  EXPECT_NE(msg.find("cannot read hostfile '" + path + "'"), std::string::npos) << msg;
}

TEST(HostSpec, SlotsDefaultToOne) {
  EXPECT_EQ(parse_host_spec("a:2,b:4"), (Hosts{{"a", 2}, {"b", 4}}));
  EXPECT_EQ(parse_host_spec("a"), (Hosts{{"a", 1}}));
  EXPECT_EQ(parse_host_spec("a:3,b,c:1"), (Hosts{{"a", 3}, {"b", 1}, {"c", 1}}));
  EXPECT_EQ(parse_host_spec(" a:2 , b "), (Hosts{{"a", 2}, {"b", 1}}));
}

TEST(HostSpec, Errors) {
  struct Case {
    std::string spec;
    std::string mention;
  };
  for (const Case& c :
       {Case{"", "no hosts"}, Case{"a:2,a:1", "listed twice"}, Case{"a:0", "'0'"},
        Case{"a:x", "'x'"}, Case{"a:", "''"}, Case{":2", "missing host"},
        Case{"a,,b", "empty entry"}, Case{"a,", "empty entry"}, Case{"a b:2", "blank"}}) {
    std::string msg = error_of([&] { parse_host_spec(c.spec); });
    ASSERT_FALSE(msg.empty()) << "no error for '" << c.spec << "'";
    EXPECT_NE(msg.find("'" + c.spec + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.mention), std::string::npos) << c.spec << ": " << msg;
  }
}

TEST(HostSpec, TotalAndFormatRoundTrip) {
  Hosts h{{"a", 2}, {"b", 4}, {"c", 1}};
  EXPECT_EQ(total_slots(h), 7);
  EXPECT_EQ(total_slots({}), 0);
  EXPECT_EQ(format_host_spec(h), "a:2,b:4,c:1");
  EXPECT_EQ(parse_host_spec(format_host_spec(h)), h);
}

}  // namespace
}  // namespace hvd::cluster
