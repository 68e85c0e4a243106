#!/usr/bin/env bash
# Usage: test_lost_rank.sh MPIEXEC NP PROGRAM kill|stop|handler. Passes when the job ends non-zero
# within 30 s and its output names rank 1 (for "stop", every surviving rank's own error names it).
# "handler": rank 1 freezes inside its 50th allreduce (HVD_TEST_STOP_IN_OP), the other ranks are
# blocked in MPI with it; each surviving rank's watchdog must call the program's peer-loss handler
# with a message naming rank 1, then (the handler returns) end the process with status 70.
set -u
MPIEXEC=$1 NP=$2 PROG=$3 MODE=$4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
[[ $MODE == handler ]] && export HVD_TEST_STOP_IN_OP=1:50
start=$(date +%s%N)
# Its own timeout, not the environment's: the sanitizer runs give every other test a longer one
# (scripts/test --sanitize=thread), which would not fit in the 30 s this test allows.
HVD_PEER_TIMEOUT_SECONDS=5 timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" "$MODE" >"$out" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
secs=$(( ms / 1000 )).$(( ms % 1000 / 100 ))
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -ne 0 ]] || fail "the job exited 0"
(( ms < 30000 )) || fail "the job took ${secs} s (limit 30 s)"
grep -q "rank 1" "$out" || fail "the output does not name rank 1"
if [[ $MODE == stop ]]; then
  # No handler is set: hvd's log line must not say it calls one.
  ! grep -q "peer-loss handler" "$out" || fail "a peer-loss handler was announced but none is set"
  for ((r = 0; r < NP; r++)); do
    [[ $r -eq 1 ]] && continue
    # The program's own error line, or (a rank stuck in a data-plane op with rank 1, or told by
    # another rank's watchdog) hvd's log line for that rank.
    grep -Eq "^rank $r: error: .*rank 1 was lost|\[hvd rank $r\] ERROR .*rank 1 was lost" "$out" ||
      fail "rank $r printed no error naming rank 1"
  done
fi
if [[ $MODE == handler ]]; then
  for ((r = 0; r < NP; r++)); do
    [[ $r -eq 1 ]] && continue
    # Its own watchdog's verdict, or the one rank 0's watchdog announced to it first.
    grep -Eq "^rank $r: peer-loss handler: (allreduce of 'loop' did not complete: )?rank 1 was lost" "$out" ||
      fail "rank $r: the peer-loss handler was not called with a message naming rank 1"
    grep -Eq "\[hvd rank $r\] ERROR .*rank 1 was lost.*Calling the program's peer-loss handler" "$out" ||
      fail "rank $r logged no error naming rank 1 and the handler"
  done
  [[ $rc -eq 70 ]] || fail "the job exited $rc, not 70 (HVD_ON_PEER_LOSS=exit after the handler returned)"
fi
echo "PASS: ended with rc=$rc after ${secs} s"
