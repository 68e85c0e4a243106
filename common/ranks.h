#pragma once

// How messages name ranks, in one place: a rank list ("rank 3", "ranks 0-2, 5") and the lost-rank
// sentence that the controller, the watchdog and the lost-rank notice all print.

#include <string>
#include <vector>

namespace hvd {

// "rank 3", "ranks 0-2, 5": runs of consecutive ranks collapsed, at most 16 runs listed (for
// messages that name ranks).
std::string rank_list(const std::vector<int>& ranks);

// "rank 3 was lost: <why>. The process died or its node's network failed; see that rank's log and
// the launcher's message." (plural for several ranks). `why` says what went unanswered for how
// long, e.g. "no answer for 30 s (HVD_PEER_TIMEOUT_SECONDS=30)".
std::string lost_ranks_message(const std::vector<int>& lost, const std::string& why);

}  // namespace hvd
