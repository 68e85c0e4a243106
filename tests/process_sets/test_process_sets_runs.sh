#!/usr/bin/env bash
# A set's cycles do not wait for a rank outside it: runs test_process_sets' BusySetBesideAnIdleRank
# on NP ranks (the set: every rank but the last, which idles) with a cycle time of 1 s, and counts
# on rank 0's timeline the global set's cycles (HVD_TIMELINE_MARK_CYCLES) between the set's first
# all-reduce and the end of its 30th. The idle rank runs a global cycle about once a second, so a
# set whose every operation waited for a global cycle (one set cycle per loop of the background
# thread, as before runs) would span about 30 of them; in runs of its own cycles the 30 take a few
# milliseconds and span at most a few (the limit, 5, leaves room for a machine slowed 100-fold).
# usage: test_process_sets_runs.sh MPIEXEC NP PROG
set -eu
MPIEXEC=$1 NP=$2 PROG=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
HVD_TIMELINE=$dir/timeline.json HVD_TIMELINE_MARK_CYCLES=1 HVD_CYCLE_TIME=1000 \
  timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" \
  "$PROG" --gtest_filter='ProcessSets.BusySetBesideAnIdleRank'
python3 - "$dir/timeline.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))
rows = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
times = [e["ts"] for e in events
         if e.get("ph") in ("B", "E") and rows.get(e.get("tid"), "").startswith("set1/ps.run.")]
ops = {n for n in rows.values() if n.startswith("set1/ps.run.")}
assert len(ops) == 30, f"expected 30 rows of the set's all-reduces, found {len(ops)}"
first, last = min(times), max(times)
cycles = [e["ts"] for e in events if e.get("name") == "CYCLE" and first <= e["ts"] <= last]
print(f"the set's 30 all-reduces took {(last - first) / 1000:.1f} ms and spanned "
      f"{len(cycles)} cycles of the global set")
assert len(cycles) <= 5, (f"the set's operations waited for the global set's cycles: "
                          f"{len(cycles)} global cycles during its 30 all-reduces")
PY
