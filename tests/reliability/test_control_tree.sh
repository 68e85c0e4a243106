#!/usr/bin/env bash
# Usage: test_control_tree.sh MPIEXEC NP LOST_PROGRAM SLOW_PROGRAM stop|kill|slow RANK.
# A rank anywhere in the control tree (comm/control_tree.h: with 4 ranks 0 -> {1, 2}, 2 -> {3}; rank
# 2 is interior, rank 3 a leaf below it) disappears or is slow, under HVD_CONTROL_TOPOLOGY (set by
# the caller: tree, or star for the same checks on the star):
#  stop: RANK freezes (SIGSTOP) at step 50; every other rank must end within 30 s with its own
#        error naming RANK, and no rank may name another rank as lost.
#  kill: RANK dies (SIGKILL) at step 50; the job must end non-zero within 30 s naming RANK (hvd's
#        error, or the launcher's message when it ends the job first), and no other rank lost.
#  slow: RANK's background thread pauses 7 s with a 2 s peer timeout; the job must finish with
#        every rank OK, nobody lost, and a warning that RANK (alone or with the ranks below it in
#        the tree, whose bits travel through it) is alive but slow.
#  mismatch: RANK runs the star and every other rank the tree: init() must fail at once (not hang)
#        with the error naming RANK's value and another rank's (every rank throws it; the first to
#        end makes mpirun end the others, so at least one printed message is required).
set -u
MPIEXEC=$1 NP=$2 LOST_PROG=$3 SLOW_PROG=$4 MODE=$5 RANK=$6
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
echo "HVD_CONTROL_TOPOLOGY=${HVD_CONTROL_TOPOLOGY:-tree (default)} np=$NP mode=$MODE rank=$RANK"
start=$(date +%s%N)
if [[ $MODE == mismatch ]]; then
  ctx=()
  for ((r = 0; r < NP; r++)); do
    ((r)) && ctx+=(:)
    ctx+=(-np 1 -x "HVD_CONTROL_TOPOLOGY=$([[ $r -eq $RANK ]] && echo star || echo tree)" "$SLOW_PROG")
  done
  timeout 60 "$MPIEXEC" --oversubscribe --bind-to none "${ctx[@]}" >"$out" 2>&1
elif [[ $MODE == slow ]]; then
  HVD_PEER_TIMEOUT_SECONDS=2 HVD_TEST_PAUSE_BACKGROUND="$RANK:7:50" \
    timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$SLOW_PROG" >"$out" 2>&1
else
  HVD_PEER_TIMEOUT_SECONDS=5 \
    timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$LOST_PROG" "$MODE" "$RANK" >"$out" 2>&1
fi
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$out"
case $MODE in
  slow)
    [[ $rc -eq 0 ]] || fail "the job exited with $rc"
    for ((r = 0; r < NP; r++)); do grep -q "^rank $r: OK" "$out" || fail "rank $r did not finish with the right values"; done
    ! grep -qi "was lost\|were lost" "$out" || fail "a healthy rank was declared lost"
    grep -Eq "(rank $RANK|ranks ([0-9]+(-[0-9]+)?, )*$RANK(-[0-9]+)?(, [0-9]+(-[0-9]+)?)*) ha(s|ve) not taken part in the negotiation for .* alive but slow" "$out" ||
      fail "no warning said that rank $RANK was alive but slow"
    echo "PASS: rank $RANK silent for 7 s with a 2 s peer timeout was waited for (${ms} ms)"
    ;;
  stop | kill)
    [[ $rc -ne 0 ]] || fail "the job exited 0"
    (( ms < 30000 )) || fail "the job took ${ms} ms (limit 30 s)"
    # kill: the launcher may end the job first, naming the rank in its own words.
    named="rank $RANK was lost"
    [[ $MODE == kill ]] && named="$named|process rank $RANK .*exited on signal 9"
    grep -Eq "$named" "$out" ||
      fail "the output does not name rank $RANK"
    ! grep -E "rank [0-9]+ was lost|ranks [0-9, -]+ were lost" "$out" | grep -qv "rank $RANK was lost" ||
      fail "a rank other than $RANK was named lost"
    if [[ $MODE == stop ]]; then
      for ((r = 0; r < NP; r++)); do
        [[ $r -eq $RANK ]] && continue
        grep -Eq "^rank $r: error: .*rank $RANK was lost|\[hvd rank $r\] ERROR .*rank $RANK was lost" "$out" ||
          fail "rank $r printed no error naming rank $RANK"
      done
    fi
    echo "PASS: ended with rc=$rc after ${ms} ms naming rank $RANK"
    ;;
  mismatch)
    [[ $rc -ne 0 && $rc -ne 124 ]] || fail "the job exited with $rc (want an error, not success or a hang)"
    (( ms < 30000 )) || fail "the job took ${ms} ms (limit 30 s)"
    grep -Eq "HVD_CONTROL_TOPOLOGY differs between ranks: rank $RANK has 'star', rank [0-9]+ has 'tree'\. Give every rank the same value" "$out" ||
      fail "no error named rank $RANK's 'star' against another rank's 'tree'"
    echo "PASS: init() failed on mismatched topologies after ${ms} ms"
    ;;
  *) fail "unknown mode $MODE" ;;
esac
