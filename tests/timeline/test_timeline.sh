#!/usr/bin/env bash
# Usage: test_timeline.sh MPIEXEC NP PROGRAM [error]
set -eu
MPIEXEC=$1 NP=$2 PROG=$3 MODE=${4:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
set +e
# A long cycle and fusion window: the three tensors submitted back to back are negotiated in one
# cycle and fused (with 1 ms a cycle boundary fell between two submissions now and then, and with
# the default 50 us window a preempted rank, or any rank under ThreadSanitizer, negotiated the
# first tensor alone). The program's wait closes the window (runtime/handle.h), so it costs no time.
HVD_CYCLE_TIME=100 HVD_FUSION_WINDOW=100000 HVD_TIMELINE=$dir/timeline.json timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" $MODE
rc=$?
set -e
if [[ -z "$MODE" && $rc -ne 0 ]]; then echo "FAIL: job exited $rc"; exit 1; fi
if [[ "$MODE" == error && $rc -eq 0 ]]; then echo "FAIL: the error job exited 0"; exit 1; fi
python3 "$(dirname "$0")/check_timeline.py" "$dir/timeline.json"
