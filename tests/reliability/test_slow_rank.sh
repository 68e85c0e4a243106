#!/usr/bin/env bash
# Usage: test_slow_rank.sh MPIEXEC NP PROGRAM. The last rank's background thread pauses 7 s with a
# 2 s peer timeout (HVD_TEST_PAUSE_BACKGROUND): the job must finish with exit 0, every rank must
# print OK, nobody may be declared lost, and rank 0 must log that the rank is alive but slow.
set -u
MPIEXEC=$1 NP=$2 PROG=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
slow=$((NP - 1))
HVD_PEER_TIMEOUT_SECONDS=2 HVD_TEST_PAUSE_BACKGROUND="$slow:7:50" \
  timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" >"$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || fail "the job exited with $rc"
for ((r = 0; r < NP; r++)); do grep -q "^rank $r: OK" "$out" || fail "rank $r did not finish with the right values"; done
! grep -qi "was lost\|were lost" "$out" || fail "a healthy rank was declared lost"
if ((NP > 1)); then
  grep -q "rank $slow has not taken part in the negotiation for .* alive but slow" "$out" ||
    fail "rank 0 did not say that rank $slow was alive but slow"
fi
echo "PASS: a rank silent for 7 s with a 2 s peer timeout was waited for, not declared lost"
