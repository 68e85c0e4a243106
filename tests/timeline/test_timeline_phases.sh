#!/usr/bin/env bash
# Usage: test_timeline_phases.sh SCRIPT MPIEXEC NP ALLREDUCE_BENCH [MPIEXEC_FLAGS...]
# scripts/timeline-phases on a real timeline: allreduce_bench submits one 4-byte all-reduce per
# iteration (20 warm-up + 100 measured) with HVD_TIMELINE set; the phases of every operation after
# the first 10 must be there (90 + 20 - 10 of each), the medians not negative; a file cut in the
# middle of an event (a killed job) is read up to that event; a file without operations must be
# refused.
set -eu
SCRIPT=$1 MPIEXEC=$2 NP=$3 BENCH=$4
shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
HVD_TIMELINE=$dir/timeline.json timeout 120 "$MPIEXEC" "$@" -np "$NP" "$BENCH" -b 4 -e 4 -n 100 -w 20 \
  > "$dir/bench.log" 2>&1 || { cat "$dir/bench.log"; echo "FAIL: allreduce_bench exited non-zero"; exit 1; }
python3 "$SCRIPT" "$dir/timeline.json" --skip 10 --csv "$dir/phases.csv"
python3 - "$dir/phases.csv" <<'PY'
import csv, sys
rows = {r["phase"]: r for r in csv.DictReader(open(sys.argv[1]))}
want = 100 + 20 - 10
for phase in ("NEGOTIATE", "QUEUE", "MPI_ALLREDUCE"):
    assert phase in rows, f"FAIL: no {phase} row: {sorted(rows)}"
    assert int(rows[phase]["count"]) == want, f"FAIL: {phase}: {rows[phase]['count']} operations, expected {want}"
    assert float(rows[phase]["median_us"]) >= 0, f"FAIL: {phase}: negative median"
assert int(rows["period"]["count"]) == want - 1, f"FAIL: period: {rows['period']['count']}"
assert float(rows["period"]["median_us"]) > 0, "FAIL: period median"
PY
# A job killed while writing leaves the file open and its last event cut in the middle: the events
# before it count. Cut 40 characters into the last NEGOTIATE's line.
python3 - "$dir/timeline.json" "$dir/cut.json" <<'PY'
import sys
text = open(sys.argv[1]).read()
at = text.rfind('{"name":"NEGOTIATE"')
assert at > 0, "FAIL: no NEGOTIATE event in the timeline"
open(sys.argv[2], "w").write(text[: at + 40])
PY
python3 "$SCRIPT" "$dir/cut.json" --skip 10 --csv "$dir/cut.csv" > "$dir/cut.log" 2>&1 ||
  { cat "$dir/cut.log"; echo "FAIL: a timeline cut in the middle of an event was refused"; exit 1; }
python3 - "$dir/cut.csv" <<'PY'
import csv, sys
rows = {r["phase"]: r for r in csv.DictReader(open(sys.argv[1]))}
n = int(rows["NEGOTIATE"]["count"]) if "NEGOTIATE" in rows else 0
assert 100 + 20 - 10 - 2 <= n < 100 + 20 - 10, f"FAIL: {n} operations read from the cut timeline"
PY
echo '[' > "$dir/empty.json"
if python3 "$SCRIPT" "$dir/empty.json" > "$dir/empty.log" 2>&1; then
  echo "FAIL: a timeline without operations was accepted"; exit 1
fi
grep -q "no operation" "$dir/empty.log" || { cat "$dir/empty.log"; echo "FAIL: no message"; exit 1; }
echo "timeline phases ok"
