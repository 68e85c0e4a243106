#!/bin/bash
# hvd's allreduce_bench against Horovod 0.28.1 on the same machine, same mpirun arguments, same
# cases, rounds interleaved; prints each round's times and the median ratios (scripts/horovod/README.md;
# scripts/bench --horovod runs it after its own rounds).
# usage: scripts/horovod/side-by-side.sh PATH/TO/allreduce_bench [ROUNDS]
#        (Horovod first: scripts/horovod/install.sh)
set -u
B=${1:?path to hvd allreduce_bench}; R=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ARGS=(--oversubscribe --bind-to none --mca btl self,vader --mca oob_tcp_if_include lo -np 2)
# the data row of allreduce_bench: col 5 = hvd time(us); cols 9 and 13 = MPI baselines
row() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print; exit}'; }
declare -a r64 r1k r4 u1k f1k
for ((i = 1; i <= R; i++)); do
  h64=$(mpirun "${ARGS[@]}" "$B" -b 64M -e 64M -d float -o sum -n 10 -w 2 2>/dev/null | row | awk '{print $5/1000}')
  h1k_row=$(mpirun "${ARGS[@]}" "$B" -b 4K -e 4K --tensors 1000 -n 50 -w 5 2>/dev/null | row)
  h1k=$(awk '{print $5/1000}' <<<"$h1k_row"); un=$(awk '{print $9/1000}' <<<"$h1k_row"); fu=$(awk '{print $13/1000}' <<<"$h1k_row")
  h4=$(mpirun "${ARGS[@]}" "$B" -b 4 -e 4 -n 2000 -w 50 2>/dev/null | row | awk '{print $5/1000}')
  hv=$(/usr/bin/python3 "$here/bench_horovod.py" --impl horovod --horovod-variants oop,inplace --cases 64MiB,1000x4KiB,4B 2>/dev/null)
  g() { grep -m1 "^impl=$1 case=$2 " <<<"$hv" | sed -E 's/.*mean_ms=([0-9.]+).*/\1/'; }
  o64=$(g horovod 64MiB); o1k=$(g horovod 1000x4KiB); o4=$(g horovod 4B); i64=$(g horovod-inplace 64MiB)
  echo "round $i (load $(cut -d' ' -f1 /proc/loadavg)): ms hvd/horovod 64MiB $h64/$o64 (Horovod in place $i64) | 1000x4KiB $h1k/$o1k (MPI unfused $un, hand-fused $fu) | 4B $h4/$o4"
  r64+=("$(echo "$h64 / $o64" | bc -l)"); r1k+=("$(echo "$h1k / $o1k" | bc -l)"); r4+=("$(echo "$h4 / $o4" | bc -l)")
  f1k+=("$(echo "$h1k / $fu" | bc -l)")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "%.2f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "median hvd/horovod time: 64MiB $(med "${r64[@]}"), 1000x4KiB $(med "${r1k[@]}"), 4B $(med "${r4[@]}"); hvd/hand-fused 1000x4KiB $(med "${f1k[@]}")"
