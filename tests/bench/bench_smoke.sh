#!/usr/bin/env bash
# The smoke test of scripts/bench (ctest scripts_bench.quick, label bench): runs it once with
# --quick --rounds 1 against an already-built tree into a temporary folder, then checks that
# results.md's table has every case, each with a numeric ratio "**R** (MIN–MAX)".
# With detects_wrong (ctest scripts_bench.detects_wrong): runs it on a copy of the tree whose
# allreduce_bench adds --inject-wrong (one wrong value on rank 0): scripts/bench must fail (exit 1)
# and name the wrong value, and write no results.md.
#   bench_smoke.sh SCRIPTS_BENCH BUILD_DIR [detects_wrong]
set -euo pipefail
bench=$1 build=$2 mode=${3:-quick}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if [[ $mode == detects_wrong ]]; then
  fake=$out/build
  for rel in examples/allreduce_bench tests/runtime tests/bench examples/train_cnn; do mkdir -p "$fake/$rel"; done
  cp "$build/CMakeCache.txt" "$fake/"
  for rel in tests/runtime/test_burst_fusion_program tests/bench/control_bench examples/train_cnn/train_cnn; do
    ln -s "$build/$rel" "$fake/$rel"
  done
  printf '#!/bin/sh\nexec %q "$@" --inject-wrong\n' "$build/examples/allreduce_bench/allreduce_bench" \
    >"$fake/examples/allreduce_bench/allreduce_bench"
  chmod +x "$fake/examples/allreduce_bench/allreduce_bench"
  rc=0
  "$bench" --quick --rounds 1 --no-build --build "$fake" --out "$out/res" --cases 64MiB.np2 \
    >"$out/log" 2>&1 || rc=$?
  cat "$out/log"
  if [[ $rc == 1 ]] && grep -q "bench: FAILED: r1-64MiB.np2 reported wrong values" "$out/log" &&
    [[ ! -e $out/res/results.md ]]; then
    echo "bench_smoke: the injected wrong value failed the run (exit 1)"
    exit 0
  fi
  echo "bench_smoke: scripts/bench exited $rc on an injected wrong value (expected 1, FAILED, no results.md)"
  exit 1
fi
"$bench" --quick --rounds 1 --no-build --build "$build" --out "$out"
table=$out/results.md
# One line per row of the table: "case | baseline"; the ratio is the 6th cell.
expected=(
  "1000 x 4 KiB float32 sum, 1 rank, per iteration|1000 unfused"
  "1000 x 4 KiB float32 sum, 1 rank, per iteration|one hand-fused"
  "1000 x 4 KiB float32 sum, 2 ranks, per iteration|1000 unfused"
  "1000 x 4 KiB float32 sum, 2 ranks, per iteration|one hand-fused"
  "64 MiB float32 sum, 2 ranks, out of place|MPI_Allreduce(in, out)"
  "64 MiB float32 sum, 2 ranks, in place|MPI_Allreduce(MPI_IN_PLACE, buf)"
  "one 4-byte float32 sum at a time, 2 ranks|raw"
  "one 4-byte float32 sum after a 0-3 ms sleep, 2 ranks: median|raw"
  "one 4-byte float32 sum after a 0-3 ms sleep, 2 ranks: 95th|raw"
  "bursts of 3 all-reduces|1 (the whole burst"
  "bursts of 20 all-reduces|1 (the whole burst"
  "control plane, one negotiation cycle, 2 ranks|star"
  "control plane, one negotiation cycle, 4 ranks|star"
  "control plane, one negotiation cycle, 8 ranks|star"
  "train_cnn --benchmark|the same on 1 rank"
)
status=0
for e in "${expected[@]}"; do
  case_part=${e%%|*} base_part=${e#*|}
  n=$(awk -F'|' -v c="$case_part" -v b="$base_part" '
    index($2, c) && index($3, b) && $6 ~ /^ \*\*[0-9]+\.[0-9]+\*\* \([0-9]+\.[0-9]+–[0-9]+\.[0-9]+\) $/ {n++}
    END {print n + 0}' "$table")
  if [[ $n != 1 ]]; then
    echo "bench_smoke: expected one row '$case_part' against '$base_part' with a numeric ratio, found $n"
    status=1
  fi
done
rows=$(grep -c '^| .* | \*\*[0-9]' "$table" || true)
if [[ $rows != "${#expected[@]}" ]]; then
  echo "bench_smoke: $rows rows with a ratio, expected ${#expected[@]}"
  status=1
fi
if ((status)); then
  cat "$table"
  exit 1
fi
echo "bench_smoke: all ${#expected[@]} rows present with a numeric ratio"
