#!/usr/bin/env bash
# The libtorch_mnist figures of docs/benchmarks.md: images/s and the share of step time spent
# waiting for communication, median (and best) of RUNS runs per configuration (the configurations
# alternate within each round, so that a change of the machine's load hits all of them alike);
# rank 0's CPU time per step (all its threads: LibTorch's and hvd's background thread) and the 10th
# percentile of its step times (the fast steps, which other jobs on a shared machine disturb least).
#
# usage: examples/libtorch_mnist/bench.sh [BUILD_DIR] [RUNS] [STEPS]   (defaults: build 3 605)
# Each run: --max-steps STEPS --epochs 5 --warmup 5 --no-test --threads 1 (one thread per rank), real
# Fashion-MNIST; 1 rank: batch 64; 2 ranks: batch 64 per rank (global 128).
set -euo pipefail
build=${1:-build}
runs=${2:-3}
steps=${3:-605}
B=$build/examples/libtorch_mnist
mpi=(mpirun --bind-to none --oversubscribe)
common=(--epochs 5 --warmup 5 --no-test --threads 1 --log-interval 0)
names=(plain.np1 hvd.np1 hvd.np1.cycle0.1 hvd.np1.no-overlap hvd.np2 hvd.np2.no-overlap hvd.np2.cycle0.1)
run() {  # run NAME STEPS
  local n=$2
  case $1 in
    plain.np1)          "$B/libtorch_mnist" "${common[@]}" --max-steps "$n" --batch-size 64 ;;
    hvd.np1)            "${mpi[@]}" -np 1 "$B/libtorch_mnist_hvd" "${common[@]}" --max-steps "$n" --batch-size 64 ;;
    hvd.np1.cycle0.1)   HVD_CYCLE_TIME=0.1 "${mpi[@]}" -x HVD_CYCLE_TIME -np 1 "$B/libtorch_mnist_hvd" "${common[@]}" --max-steps "$n" --batch-size 64 ;;
    hvd.np1.no-overlap) "${mpi[@]}" -np 1 "$B/libtorch_mnist_hvd" "${common[@]}" --max-steps "$n" --batch-size 64 --no-overlap ;;
    hvd.np2)            "${mpi[@]}" -np 2 "$B/libtorch_mnist_hvd" "${common[@]}" --max-steps "$n" --batch-size 128 ;;
    hvd.np2.no-overlap) "${mpi[@]}" -np 2 "$B/libtorch_mnist_hvd" "${common[@]}" --max-steps "$n" --batch-size 128 --no-overlap ;;
    hvd.np2.cycle0.1)   HVD_CYCLE_TIME=0.1 "${mpi[@]}" -x HVD_CYCLE_TIME -np 2 "$B/libtorch_mnist_hvd" "${common[@]}" --max-steps "$n" --batch-size 128 ;;
  esac
}
out=$(mktemp -d)
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load before: $(cat /proc/loadavg)"
for ((i = 1; i <= runs; i++)); do
  for name in "${names[@]}"; do
    line=$(run "$name" "$steps" 2>&1 | grep '^done:')
    ips=$(sed -E 's/.* ([0-9.]+) images\/s.*/\1/' <<<"$line")
    wait=$(grep -oE 'waiting for communication [0-9.]+%' <<<"$line" | grep -oE '[0-9.]+' || echo -)
    cpu=$(sed -E 's/.*CPU ([0-9.]+) ms per step.*/\1/' <<<"$line")
    p10=$(sed -E 's/.*10th percentile ([0-9.]+) ms.*/\1/' <<<"$line")
    echo "$name $ips $wait $cpu $p10" >>"$out/all"
    echo "round $i $name: $ips images/s, waiting $wait%, CPU $cpu ms/step, p10 step $p10 ms (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
done
echo "load after: $(cat /proc/loadavg)"
echo "per configuration: median images/s (best), median waiting %, median CPU ms per step, median p10 step ms:"
for name in "${names[@]}"; do
  col() { grep "^$name " "$out/all" | awk -v c="$1" '{print $c}' | sort -g; }
  med() { col "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
  printf '  %-20s %10s (%s) %8s %8s %8s\n' "$name" "$(med 2)" "$(col 2 | tail -1)" "$(med 3)" "$(med 4)" "$(med 5)"
done
rm -rf "$out"
