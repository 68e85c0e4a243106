#!/usr/bin/env bash
# Usage: test_burst_fusion.sh MPIEXEC NP PROGRAM K BURSTS MIN_RATE
# Bursts of K all-reduces submitted together must be negotiated and executed as one response in
# at least MIN_RATE of BURSTS bursts, at the default HVD_CYCLE_TIME (the fusion window,
# runtime/runtime.cc). A behaviour check, not a timing: MIN_RATE leaves room for a loaded machine.
set -eu
MPIEXEC=$1 NP=$2 PROG=$3 K=$4 BURSTS=$5 MIN_RATE=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Under ThreadSanitizer (scripts/test --sanitize) every submission is about ten times slower, and
# a burst of 20 outlasts the default 50 us window on either rank (measured: 45-58 % of bursts in
# one response before and after the wait that closes the window, which raised it to 62-73 %): the
# window is scaled to match there. 1 ms still failed once (75 % of bursts) while another TSan test
# ran beside it and descheduled a submitting thread mid-burst: 5 ms. The program waits on its
# handles after each burst, which closes the window at once, so a long window costs nothing.
# ASan + UBSan (ASAN_OPTIONS set by scripts/test --sanitize) slow a submission about 3 times: in the
# full run of 2026-11-29 (load 3-6) k3.np2 put 95 of 200 bursts in one response and k20.np2 155,
# against the 80 % asked; the same scaling there. The default run keeps the default window.
if [[ -n ${TSAN_OPTIONS:-} || -n ${ASAN_OPTIONS:-} ]]; then
  export HVD_FUSION_WINDOW=${HVD_FUSION_WINDOW:-5000}
fi
HVD_TIMELINE=$dir/timeline.json timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" "$K" "$BURSTS"
python3 "$(dirname "$0")/check_burst_fusion.py" "$dir/timeline.json" "$K" "$MIN_RATE"
