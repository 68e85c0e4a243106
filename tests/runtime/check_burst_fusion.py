#!/usr/bin/env python3
"""Reads rank 0's timeline of test_burst_fusion_program (K tensors burst.0..K-1 per burst, the
first burst a warm-up) and reports how many responses each burst took: a tensor's op span carries
`fused` = the number of tensors in its response, so a burst took sum(1/fused) responses. Responses
are identical on every rank (runtime/controller.h), so rank 0's timeline speaks for all.
Usage: check_burst_fusion.py TIMELINE K MIN_RATE"""
import json
import sys

path, k, min_rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
events = json.load(open(path))
rows = {e["args"]["name"]: e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
fused = {}
for j in range(k):
    tid = rows[f"burst.{j}"]
    fused[j] = [e["args"]["fused"] for e in events
                if e.get("tid") == tid and e.get("ph") == "B" and e.get("name") == "MPI_ALLREDUCE"]
n = min(len(v) for v in fused.values())
assert n > 1 and all(len(v) == n for v in fused.values()), {j: len(v) for j, v in fused.items()}
one = 0
total = 0.0
for b in range(1, n):  # burst 0: the warm-up
    responses = sum(1.0 / fused[j][b] for j in range(k))
    total += responses
    one += round(responses) == 1
bursts = n - 1
rate = one / bursts
print(f"k={k}: {one}/{bursts} bursts in one response (fusion rate {rate:.3f}), "
      f"{total / bursts:.2f} responses per burst on average")
if rate < min_rate:
    print(f"FAIL: fusion rate {rate:.3f} < {min_rate}")
    sys.exit(1)
print("burst fusion ok")
