#!/usr/bin/env bash
# Usage: test_lost_rank.sh MPIEXEC NP PROGRAM kill|stop. Passes when the job ends non-zero within
# 30 s and its output names rank 1 (for "stop", every surviving rank's own error names it).
set -u
MPIEXEC=$1 NP=$2 PROG=$3 MODE=$4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s%N)
HVD_PEER_TIMEOUT_SECONDS=${HVD_PEER_TIMEOUT_SECONDS:-5} timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" "$MODE" >"$out" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
secs=$(( ms / 1000 )).$(( ms % 1000 / 100 ))
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -ne 0 ]] || fail "the job exited 0"
(( ms < 30000 )) || fail "the job took ${secs} s (limit 30 s)"
grep -q "rank 1" "$out" || fail "the output does not name rank 1"
if [[ $MODE == stop ]]; then
  for ((r = 0; r < NP; r++)); do
    [[ $r -eq 1 ]] && continue
    # The program's own error line, or (a rank stuck in a data-plane op with rank 1, or told by
    # another rank's watchdog) hvd's log line for that rank.
    grep -Eq "^rank $r: error: .*rank 1 was lost|\[hvd rank $r\] ERROR .*rank 1 was lost" "$out" ||
      fail "rank $r printed no error naming rank 1"
  done
fi
echo "PASS: ended with rc=$rc after ${secs} s"
