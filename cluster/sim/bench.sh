#!/usr/bin/env bash
# The figures of docs/cluster.md, measured on a simulated cluster of 2 nodes x 2 ranks
# (cluster/sim/hvd-sim, links of --rate each way): run as root from anywhere.
#
#   cluster/sim/bench.sh [--build DIR] [--rate 2gbit] [--runs 5] [--only pingpong|small|hier]
#
#  1. pingpong (tests/cluster/pingpong.c) between node1 and node2: small-message latency and
#     bandwidth as MPI sees them.
#  2. allreduce_bench -b 4K -e 4K --tensors 1000 on 2 x 2: hvd (negotiated, fused) against 1000
#     unfused MPI_Allreduce calls and one hand-fused call.
#  3. 64 MiB all-reduce on 2 x 2, hvd with HVD_HIERARCHICAL_ALLREDUCE=1 against =0 (flat), --runs
#     runs of each (alternating), median of the per-run times; raw MPI_Allreduce beside them.
# The cluster is removed at the end whatever happens. Needs the build's pingpong and
# allreduce_bench targets (default build dir: build/ of this checkout).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$ROOT/build RATE=2gbit RUNS=5 ONLY=all NAME=hvdbench
while (($#)); do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) echo "bench.sh: unknown argument '$1' (--build DIR, --rate R, --runs N, --only pingpong|small|hier)" >&2; exit 2 ;;
  esac
done
PINGPONG=$BUILD/tests/cluster/pingpong
BENCH=$BUILD/examples/allreduce_bench/allreduce_bench
for b in "$PINGPONG" "$BENCH"; do
  [[ -x $b ]] || { echo "bench.sh: $b is not built (cmake --build $BUILD --target pingpong allreduce_bench)" >&2; exit 2; }
done

SIM=$HERE/hvd-sim
trap '"$SIM" down --name "$NAME" >/dev/null 2>&1 || true' EXIT
"$SIM" up --replace --name "$NAME" --subnet 250 --nodes 2 --rate "$RATE"
run() { echo "+ hvd-sim mpirun $*" >&2; "$SIM" mpirun --name "$NAME" "$@"; }
echo "# $(date -u +%FT%TZ) on $(hostname): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $ONLY == all || $ONLY == pingpong ]]; then
  run -np 2 -H node1:1,node2:1 "$PINGPONG" --iters 5000 --max-bytes 67108864
fi

if [[ $ONLY == all || $ONLY == small ]]; then
  run -np 4 -H node1:2,node2:2 "$BENCH" -b 4K -e 4K --tensors 1000 -n 5 -w 2
fi

if [[ $ONLY == all || $ONLY == hier ]]; then
  median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  hier=() flat=() mpi=()
  for ((i = 1; i <= RUNS; i++)); do
    for h in 1 0; do
      row=$(run -np 4 -H node1:2,node2:2 -x HVD_HIERARCHICAL_ALLREDUCE=$h "$BENCH" -b 64M -e 64M -n 3 -w 1 |
            awk '$1 == 67108864 { print $5, $9 }')
      [[ -n $row ]] || { echo "bench.sh: allreduce_bench printed no 64 MiB row" >&2; exit 1; }
      read -r t m <<<"$row"
      if ((h)); then hier+=("$t"); else flat+=("$t"); fi
      mpi+=("$m")
      echo "run $i HVD_HIERARCHICAL_ALLREDUCE=$h: hvd ${t} us, raw MPI_Allreduce ${m} us"
    done
  done
  mh=$(printf '%s\n' "${hier[@]}" | median)
  mf=$(printf '%s\n' "${flat[@]}" | median)
  mm=$(printf '%s\n' "${mpi[@]}" | median)
  awk -v h="$mh" -v f="$mf" -v m="$mm" -v n="$RUNS" 'BEGIN {
    printf "# 64 MiB all-reduce, 2 nodes x 2 ranks, median of %d runs:\n", n
    printf "#   hvd hierarchical %.0f us, hvd flat %.0f us, raw MPI_Allreduce %.0f us\n", h, f, m
    printf "#   hierarchical is %.2fx faster than hvd flat, %.2fx than raw MPI_Allreduce\n", f / h, m / h }'
fi
