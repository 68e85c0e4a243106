#!/usr/bin/env bash
# Rank 0's timeline draws a process set's operations on rows of their own ("set<id>/<name>"):
# runs test_process_sets' even/odd case on NP ranks with HVD_TIMELINE and checks that the even set's
# (id 1, rank 0's) all-reduce has its row with NEGOTIATE, QUEUE and the op span, the global set's
# rows keep their plain names, and every row's spans are balanced.
# usage: test_process_sets_timeline.sh MPIEXEC NP PROG
set -eu
MPIEXEC=$1 NP=$2 PROG=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
HVD_TIMELINE=$dir/timeline.json timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" \
  "$PROG" --gtest_filter='ProcessSets.EvenAndOddRanks:ProcessSets.GlobalSetIsTheWorld'
python3 - "$dir/timeline.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))
rows = {e["args"]["name"]: e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
assert "set1/ps.parity.sum" in rows, f"no row for the even set's all-reduce: {sorted(rows)}"
assert "ps.global.sum" in rows, f"no row for the global set's all-reduce: {sorted(rows)}"
assert not any(r.startswith("set2/") for r in rows), "rank 0 drew the odd set, which it is not in"
for name, tid in rows.items():
    stack, seen = [], set()
    for e in events:
        if e.get("tid") != tid or e.get("ph") not in ("B", "E"):
            continue
        if e["ph"] == "B":
            stack.append(e["name"])
            seen.add(e["name"])
        else:
            assert stack and stack[-1] == e["name"], f"unbalanced E {e['name']} on row {name}"
            stack.pop()
    assert not stack, f"unterminated spans {stack} on row {name}"
    if name == "set1/ps.parity.sum":
        assert {"NEGOTIATE", "QUEUE"} <= seen and any(s.startswith("MPI_") for s in seen), \
            f"row {name} has spans {sorted(seen)}"
print("timeline: process set rows OK:", sorted(r for r in rows if r.startswith("set")) [:5], "...")
PY
