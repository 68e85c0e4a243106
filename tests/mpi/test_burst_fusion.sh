#!/usr/bin/env bash
# Usage: test_burst_fusion.sh MPIEXEC NP PROGRAM K BURSTS MIN_RATE
# Bursts of K all-reduces submitted together must be negotiated and executed as one response in
# at least MIN_RATE of BURSTS bursts, at the default HVD_CYCLE_TIME (the fusion window,
# runtime/runtime.cc). A behaviour check, not a timing: MIN_RATE leaves room for a loaded machine.
set -eu
MPIEXEC=$1 NP=$2 PROG=$3 K=$4 BURSTS=$5 MIN_RATE=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
HVD_TIMELINE=$dir/timeline.json timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" "$PROG" "$K" "$BURSTS"
python3 "$(dirname "$0")/check_burst_fusion.py" "$dir/timeline.json" "$K" "$MIN_RATE"
