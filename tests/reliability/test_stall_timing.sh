#!/usr/bin/env bash
# Usage: test_stall_timing.sh MPIEXEC NP PROGRAM (tests/reliability/test_stall_skip_program.cc).
# With HVD_STALL_CHECK_TIME_SECONDS=2 and HVD_STALL_SHUTDOWN_TIME_SECONDS=7, checks that:
#  - rank 0's first stall warning comes when the stall is between 2 and 4 s old (timed against the
#    program's "STALL BEGINS" line), and the next one about 2 s later;
#  - each warning and the final error name both stalled tensors with the ranks that submitted them
#    and those that did not: 'grad.2' submitted by every rank but 1, 'images' only by rank 1;
#  - every rank prints the error once ("hvd: rank R: ..."), the job exits non-zero, and nobody
#    prints an abort backtrace.
set -u
MPIEXEC=$1 NP=$2 PROG=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Each output line gets the time it arrived (seconds since the epoch, ms resolution).
HVD_STALL_CHECK_TIME_SECONDS=2 HVD_STALL_SHUTDOWN_TIME_SECONDS=7 \
  timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" 2>&1 |
  while IFS= read -r line; do
    printf '%s %s\n' "$(date +%s.%3N)" "$line"
  done >"$out"
rc=${PIPESTATUS[0]}
cat "$out"
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "the job exited with $rc (want non-zero, not a timeout)"
if [[ $NP -eq 2 ]]; then submitted="rank 0"; missing_images="rank 0"
else submitted="ranks 0, 2"; missing_images="ranks 0, 2"; fi
((NP == 4)) && submitted="ranks 0, 2, 3" && missing_images="ranks 0, 2, 3"
begin=$(grep -m1 "STALL BEGINS" "$out" | cut -d' ' -f1)
[[ -n $begin ]] || fail "the program never printed STALL BEGINS"
mapfile -t warns < <(grep "stall: tensors submitted by some ranks" "$out" | cut -d' ' -f1)
((${#warns[@]} >= 2)) || fail "fewer than 2 stall warnings before the shutdown (${#warns[@]})"
first=$(awk -v a="${warns[0]}" -v b="$begin" 'BEGIN { printf "%.2f", a - b }')
gap=$(awk -v a="${warns[1]}" -v b="${warns[0]}" 'BEGIN { printf "%.2f", a - b }')
echo "first warning after ${first} s of stall; next one ${gap} s later"
awk -v x="$first" 'BEGIN { exit !(x >= 1.9 && x <= 4.0) }' || fail "first warning after ${first} s (want 2-4 s)"
awk -v x="$gap" 'BEGIN { exit !(x >= 1.5 && x <= 3.0) }' || fail "second warning ${gap} s after the first (want ~2 s)"
w=$(grep -m1 "stall: tensors submitted by some ranks" "$out")
[[ $w == *"'grad.2' (submitted by $submitted; missing rank 1;"* ]] || fail "warning does not say who submitted grad.2"
for r in $(seq 0 $((NP - 1))); do
  line=$(grep "hvd: rank $r: " "$out")
  [[ $(grep -c "hvd: rank $r: " "$out") -eq 1 ]] || fail "rank $r printed its error $(grep -c "hvd: rank $r: " "$out") times (want once)"
  [[ $line == *"stalled for more than HVD_STALL_SHUTDOWN_TIME_SECONDS=7 s"* ]] || fail "rank $r: error does not say it stalled: $line"
  [[ $line == *"'grad.2' (submitted by $submitted; missing rank 1;"* ]] || fail "rank $r: error does not name grad.2 correctly: $line"
  if ((NP > 1)); then
    [[ $line == *"'images' (submitted by rank 1; missing $missing_images;"* ]] || fail "rank $r: error does not name 'images' correctly: $line"
  fi
done
! grep -qiE "backtrace|Signal: Aborted|terminate called" "$out" || fail "an abort backtrace was printed"
grep -q "UNEXPECTED" "$out" && fail "a rank finished"
echo "PASS: warnings after ${first} s and ${gap} s more; every rank ended with one error line (rc=$rc)"
