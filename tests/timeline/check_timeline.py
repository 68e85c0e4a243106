#!/usr/bin/env python3
"""Checks a timeline written by test_timeline_program: valid JSON (Chrome trace array), one row
per tensor, NEGOTIATE/QUEUE/op/MEMCPY phases for the fused allreduce, balanced B/E events, and the
three fused tensors sharing one MPI_ALLREDUCE span with fused=3."""
import json
import sys

events = json.load(open(sys.argv[1]))
assert isinstance(events, list) and events, "not a JSON array of events"
rows = {e["args"]["name"]: e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
for name in ["fused.0", "fused.1", "fused.2", "bcast", "gather"]:
    assert name in rows, f"no timeline row for {name}: {sorted(rows)}"


def spans(tid):
    stack, out = [], []
    for e in events:
        if e.get("tid") != tid or e.get("ph") not in ("B", "E"):
            continue
        if e["ph"] == "B":
            stack.append(e)
        else:
            assert stack and stack[-1]["name"] == e["name"], f"unbalanced E {e['name']} on row {tid}"
            b = stack.pop()
            assert e["ts"] >= b["ts"], "span ends before it begins"
            out.append((b["name"], b.get("args", {})))
    assert not stack, f"unterminated spans {[s['name'] for s in stack]} on row {tid}"
    return out


for i in range(3):
    s = spans(rows[f"fused.{i}"])
    names = [n for n, _ in s]
    for phase in ["NEGOTIATE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"]:
        assert phase in names, f"fused.{i}: no {phase} in {names}"
    args = dict(s)["MPI_ALLREDUCE"]
    assert args.get("fused") == 3, f"fused.{i}: MPI_ALLREDUCE args {args}, expected fused=3"
assert "MPI_BROADCAST" in [n for n, _ in spans(rows["bcast"])]
assert "MPI_ALLGATHER" in [n for n, _ in spans(rows["gather"])]
print(f"timeline ok: {len(events)} events, {len(rows)} rows")
