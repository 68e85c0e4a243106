#!/usr/bin/env bash
# Usage: test_stall.sh MPIEXEC NP PROGRAM. Passes when the job ends non-zero within 20 s, rank 0's
# warning names 'lonely' and rank 1, and every rank printed an error naming rank 1.
set -u
MPIEXEC=$1 NP=$2 PROG=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
HVD_STALL_CHECK_TIME_SECONDS=1 HVD_STALL_SHUTDOWN_TIME_SECONDS=3 \
  timeout 40 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" >"$out" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -ne 0 ]] || fail "the job exited 0"
[[ $secs -lt 20 ]] || fail "the job took ${secs} s (limit 20 s)"
grep -q "stall: .*'lonely' (submitted by rank.*; missing rank 1;" "$out" || fail "no stall warning naming 'lonely' and rank 1"
for ((r = 0; r < NP; r++)); do
  grep -q "^rank $r: error: .*stalled for more than HVD_STALL_SHUTDOWN_TIME_SECONDS=3 s.*'lonely' (submitted by rank.*; missing rank 1;" "$out" || fail "rank $r printed no error naming rank 1 and 'lonely'"
done
echo "PASS: ended with rc=$rc after ${secs} s"
