// SLURM hostlist and task-count expansion: zero padding, SLURM's order, malformed inputs.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "cluster/hostlist.h"
#include "common/sanitizers.h"
#include "hvd/error.h"
#include "tests/support/test_util.h"

namespace hvd::cluster {
namespace {

using Names = std::vector<std::string>;

// The message of the InvalidArgumentError `f` throws ("" if none).
using hvdtest::error_of;

TEST(Hostlist, RangeAndSingleKeepZeroPaddingAndOrder) {
  EXPECT_EQ(expand_hostlist("node[01-04,07]"),
            (Names{"node01", "node02", "node03", "node04", "node07"}));
}

TEST(Hostlist, DashInPrefixBeforeBracket) {
  EXPECT_EQ(expand_hostlist("b04-[09-10]"), (Names{"b04-09", "b04-10"}));
}

TEST(Hostlist, WidthComesFromLowerBound) {
  EXPECT_EQ(expand_hostlist("a[9-11]"), (Names{"a9", "a10", "a11"}));
  EXPECT_EQ(expand_hostlist("a[09-11]"), (Names{"a09", "a10", "a11"}));
  EXPECT_EQ(expand_hostlist("a[098-101]"), (Names{"a098", "a099", "a100", "a101"}));
  // Wider upper bound than the padding: numbers grow past the width, as printf("%0*d") does.
  EXPECT_EQ(expand_hostlist("a[8-10]"), (Names{"a8", "a9", "a10"}));
}

TEST(Hostlist, PlainNameAndBracketedNameSeparatedByComma) {
  EXPECT_EQ(expand_hostlist("x,y[1-2]"), (Names{"x", "y1", "y2"}));
}

TEST(Hostlist, SeveralBracketGroupsVaryRightmostFastest) {
  EXPECT_EQ(expand_hostlist("r[1-2]n[01-02]"), (Names{"r1n01", "r1n02", "r2n01", "r2n02"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[1,3]-ib"),
            (Names{"r1n1-ib", "r1n3-ib", "r2n1-ib", "r2n3-ib"}));
  EXPECT_EQ(expand_hostlist("[1-2][7-8]"), (Names{"17", "18", "27", "28"}));
}

TEST(Hostlist, OrderIsKeptNeverSorted) {
  EXPECT_EQ(expand_hostlist("zeta,alpha,node[10,2,1]"),
            (Names{"zeta", "alpha", "node10", "node2", "node1"}));
  // Duplicates are kept: they pair with task counts by position.
  EXPECT_EQ(expand_hostlist("a,a"), (Names{"a", "a"}));
}

TEST(Hostlist, SuffixAfterBracket) {
  EXPECT_EQ(expand_hostlist("gpu[1-2].cluster"), (Names{"gpu1.cluster", "gpu2.cluster"}));
}

TEST(Hostlist, SingleHostsAndSingleElementRanges) {
  EXPECT_EQ(expand_hostlist("login1"), (Names{"login1"}));
  EXPECT_EQ(expand_hostlist("n[5]"), (Names{"n5"}));
  EXPECT_EQ(expand_hostlist("n[5-5]"), (Names{"n5"}));
  EXPECT_EQ(expand_hostlist("n[0-0]"), (Names{"n0"}));
}

TEST(Hostlist, EmptyAndBlankAreEmptyLists) {
  EXPECT_TRUE(expand_hostlist("").empty());
  EXPECT_TRUE(expand_hostlist("   ").empty());
}

TEST(Hostlist, BlanksSeparateLikeCommas) {
  EXPECT_EQ(expand_hostlist(" a, b[1-2] c "), (Names{"a", "b1", "b2", "c"}));
}

TEST(Hostlist, ManyNamesCountMatchesRangeSize) {
  auto names = expand_hostlist("n[0000-1023]");
  ASSERT_EQ(names.size(), 1024u);
  EXPECT_EQ(names.front(), "n0000");
  EXPECT_EQ(names[511], "n0511");
  EXPECT_EQ(names.back(), "n1023");
}

struct Malformed {
  std::string input;
  size_t position;
};

class HostlistMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(HostlistMalformed, ThrowsNamingInputAndPosition) {
  const auto& m = GetParam();
  std::string msg = error_of([&] { expand_hostlist(m.input); });
  ASSERT_FALSE(msg.empty()) << "no error for '" << m.input << "'";
  EXPECT_NE(msg.find("'" + m.input + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("position " + std::to_string(m.position)), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostlistMalformed,
                         ::testing::Values(Malformed{"node[01-04", 4},  // never closed
                                           Malformed{"node[]", 5},      // empty group
                                           Malformed{"node[4-1]", 5},   // backwards
                                           Malformed{"node[a-b]", 5},   // not a number
                                           Malformed{"node[1-]", 7},    // no upper bound
                                           Malformed{"node1]", 5},      // stray ']'
                                           Malformed{"node[1[2]]", 6},  // nested
                                           Malformed{"node[1;2]", 6},   // bad separator
                                           Malformed{"a,,b", 2},        // empty entry
                                           Malformed{",a", 0},          // leading comma
                                           Malformed{"a,", 1},          // trailing comma
                                           Malformed{"n[1-1234567890123456789]",
                                                     4}));  // number too large

TEST(Hostlist, HugeExpansionIsRefusedNotAllocated) {
  std::string msg = error_of([] { expand_hostlist("n[0-99999999]"); });
  EXPECT_NE(msg.find("more than"), std::string::npos) << msg;
  msg = error_of([] { expand_hostlist("a[0-9999]b[0-9999]"); });
  EXPECT_NE(msg.find("more than"), std::string::npos) << msg;
}

// The 64 MiB bound on all names together is counted before any name is built, exactly: 8192 names
// of 8192 characters (2^26 bytes) pass; one more name, or one more character in a later entry,
// fails naming the entry that crossed it.
TEST(Hostlist, NameCharactersAreBoundedExactlyAcrossEntries) {
  const std::string prefix(8188, 'x');  // + 4 digits: 8192 characters a name
  auto names = expand_hostlist(prefix + "[0000-8191]");
  ASSERT_EQ(names.size(), 8192u);
  EXPECT_EQ(names.back(), prefix + "8191");
  names = {};

  std::string msg = error_of([&] { expand_hostlist(prefix + "[0000-8192]"); });
  EXPECT_NE(msg.find("MiB of host names"), std::string::npos) << msg;
  EXPECT_NE(msg.find("position 0"), std::string::npos) << msg;

  const std::string two = prefix + "[0000-8191],b";
  msg = error_of([&] { expand_hostlist(two); });
  EXPECT_NE(msg.find("MiB of host names"), std::string::npos) << msg;
  EXPECT_NE(msg.find("position " + std::to_string(two.size() - 1)), std::string::npos) << msg;
}

// Bytes of the process's data segment and private mappings (what RLIMIT_DATA limits).
size_t data_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmData: %zu kB", &kb) == 1) break;
  std::fclose(f);
  return kb << 10;
}

// Expands `list` with the data segment allowed to grow by 80 MiB only. 0: refused for its names'
// size; 2: out of memory; 1: accepted; 3-5: the limit could not be set, another error.
int expand_under_data_limit(const std::string& list) {
  const size_t now = data_bytes();
  if (now == 0) return 3;
  const size_t limit = now + (size_t{80} << 20);
  const rlimit lim{limit, limit};
  if (setrlimit(RLIMIT_DATA, &lim) != 0) return 4;
  try {
    expand_hostlist(list);
  } catch (const InvalidArgumentError& e) {
    return std::string(e.what()).find("MiB of host names") != std::string::npos ? 0 : 5;
  } catch (const std::bad_alloc&) {
    return 2;
  }
  return 1;
}

// A 4 KB hostlist that names 4 GB ("<4000 letters>[0-999999]", the fuzzer's memory bomb) is
// refused before any name is built: in a child process whose data may grow by 80 MiB (its group of
// 10^6 numbers takes 32 MB of that; the bound on all names is 64 MiB). The old
// expansion built names up to the 64 MiB bound before it failed, and ran out of memory there.
TEST(Hostlist, MemoryBombFailsWithoutBuildingNames) {
  if (kAddressSanitizer || kThreadSanitizer)
    GTEST_SKIP() << "a sanitizer's shadow memory makes a data limit meaningless";
  const std::string bomb = std::string(4000, 'a') + "[0-999999]";
  EXPECT_EXIT(std::_Exit(expand_under_data_limit(bomb)), ::testing::ExitedWithCode(0), "");
}

TEST(TaskCounts, RepeatsExpandInOrder) {
  EXPECT_EQ(expand_task_counts("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_task_counts("1,4(x2),3"), (std::vector<int>{1, 4, 4, 3}));
}

TEST(TaskCounts, SinglesAndEdgeValues) {
  EXPECT_EQ(expand_task_counts("4"), (std::vector<int>{4}));
  EXPECT_EQ(expand_task_counts("1(x1)"), (std::vector<int>{1}));
  EXPECT_EQ(expand_task_counts("0,3"), (std::vector<int>{0, 3}));
  EXPECT_EQ(expand_task_counts("7(x5)"), (std::vector<int>(5, 7)));
  EXPECT_TRUE(expand_task_counts("").empty());
}

TEST(TaskCounts, MalformedNamesInputAndPosition) {
  struct Case {
    std::string input;
    size_t position;
  };
  for (const Case& c :
       {Case{"2(x0)", 3}, Case{"(x3)", 0}, Case{"2(3)", 2}, Case{"2(x3", 1}, Case{"2,", 2},
        Case{"a", 0}, Case{"2 3", 2}, Case{"2(x)", 3}, Case{"-1", 0}}) {
    std::string msg = error_of([&] { expand_task_counts(c.input); });
    ASSERT_FALSE(msg.empty()) << "no error for '" << c.input << "'";
    EXPECT_NE(msg.find("'" + c.input + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("position " + std::to_string(c.position)), std::string::npos)
        << c.input << ": " << msg;
  }
}

}  // namespace
}  // namespace hvd::cluster
