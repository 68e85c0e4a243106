// hvd::parse_signals and hvd::signal_name (hvd/stop.h): what --stop-signals accepts and refuses.

#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "hvd/error.h"
#include "hvd/stop.h"

namespace {

std::string refusal(const std::string& list) {
  try {
    hvd::parse_signals(list, "--stop-signals");
  } catch (const hvd::InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(StopSignals, NamesWithOrWithoutSigNumbersAndSpaces) {
  EXPECT_EQ(hvd::parse_signals("TERM,USR1", "f"), (std::vector<int>{SIGTERM, SIGUSR1}));
  EXPECT_EQ(hvd::parse_signals("SIGusr2, term", "f"), (std::vector<int>{SIGUSR2, SIGTERM}));
  EXPECT_EQ(hvd::parse_signals(std::to_string(SIGUSR1), "f"), (std::vector<int>{SIGUSR1}));
  EXPECT_EQ(hvd::parse_signals("TERM,TERM", "f"), (std::vector<int>{SIGTERM}));  // once
  EXPECT_TRUE(hvd::parse_signals("none", "f").empty());
}

TEST(StopSignals, RefusesWhatCannotBeCaughtOrIsNoSignal) {
  EXPECT_EQ(refusal("KILL"),
            "--stop-signals: SIGKILL cannot be caught: use TERM or USR1 (or none).");
  EXPECT_NE(refusal("TERM,STOP").find("cannot be caught"), std::string::npos);
  EXPECT_EQ(refusal("TERM,bogus"),
            "--stop-signals is 'TERM,bogus': 'bogus' is not a signal: give names (TERM, USR1, "
            "USR2, INT, HUP, QUIT, CONT, XCPU, ALRM) or numbers, separated by commas, or none.");
  EXPECT_NE(refusal(""), "");
  EXPECT_NE(refusal("TERM,"), "");
  EXPECT_NE(refusal("0"), "");
  EXPECT_NE(refusal("999"), "");
}

TEST(StopSignals, Names) {
  EXPECT_EQ(hvd::signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(hvd::signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(hvd::signal_name(SIGRTMIN + 2), "signal " + std::to_string(SIGRTMIN + 2));
}

TEST(StopSignals, ExitStatusIsTempfail) { EXPECT_EQ(hvd::kExitRequeue, 75); }
