#!/usr/bin/env bash
# Step time and the share of it spent waiting for data, with and without the input pipeline's
# prefetch (docs/benchmarks.md, "Input pipeline with prefetch").
#
# usage: prefetch_bench.sh TRAIN_CNN [ROUNDS] [RANKS...]
#   env: DELAYS (default "0 20 50"), PREFETCH (default "0 2"), STEPS (default 40),
#        BATCH (default 64), EXTRA (more train_cnn flags, e.g. "--device cuda")
#
# For each round, each rank count, each --data-delay-ms and each --prefetch (interleaved, so that
# the machine's load falls on every configuration alike), one `train_cnn --benchmark` on a
# synthetic set; prints every run, then per configuration the median ms per step, the median
# data-wait and communication-wait shares, and the speed-up of prefetch over --prefetch 0 at
# the same delay (ratio of the medians), with the 1-minute load average before and after.
set -euo pipefail
train_cnn=$1
rounds=${2:-3}
shift $(($# >= 2 ? 2 : 1))
ranks=("$@")
((${#ranks[@]})) || ranks=(1 2)
delays=(${DELAYS:-0 20 50})
prefetches=(${PREFETCH:-0 2})
steps=${STEPS:-40}
batch=${BATCH:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; ++r)); do
  for np in "${ranks[@]}"; do
    for d in "${delays[@]}"; do
      for p in "${prefetches[@]}"; do
        line=$(mpirun --oversubscribe --bind-to none -np "$np" "$train_cnn" --benchmark --synthetic \
          --synthetic-size $((np * batch * (steps + 2))) --batch-size "$batch" --max-steps "$steps" \
          --metrics-csv none --progress lines --prefetch "$p" --data-delay-ms "$d" ${EXTRA:-} |
          grep '^benchmark:')
        ms=$(grep -oE '[0-9.]+ ms per step' <<<"$line" | grep -oE '^[0-9.]+')
        comm=$(grep -oE 'communication [0-9.]+%' <<<"$line" | grep -oE '[0-9.]+')
        data=$(grep -oE 'for data [0-9.]+%' <<<"$line" | grep -oE '[0-9.]+')
        load=$(grep -oE 'load average [0-9.]+' <<<"$line" | grep -oE '[0-9.]+$')
        echo "round $r np $np delay $d prefetch $p: $ms ms/step, data $data%, comm $comm%, load $load"
        echo "$ms $data $comm" >>"$out/$np.$d.$p"
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "| ranks | --data-delay-ms | --prefetch | ms per step (median) | waiting for data | waiting for communication | speed-up over --prefetch 0 |"
echo "|---|---|---|---|---|---|---|"
for np in "${ranks[@]}"; do
  for d in "${delays[@]}"; do
    base=$(cut -d' ' -f1 "$out/$np.$d.${prefetches[0]}" | median)
    for p in "${prefetches[@]}"; do
      f="$out/$np.$d.$p"
      ms=$(cut -d' ' -f1 "$f" | median)
      data=$(cut -d' ' -f2 "$f" | median)
      comm=$(cut -d' ' -f3 "$f" | median)
      speed=$(awk -v b="$base" -v m="$ms" 'BEGIN { printf "%.2fx", b / m }')
      echo "| $np | $d | $p | $ms | $data% | $comm% | $speed |"
    done
  done
done
