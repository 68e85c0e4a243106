#!/bin/bash
# Interleaved rounds of one allreduce_bench case, in place and out of place, for several builds of
# the bench (e.g. before and after a change) and, when it is installed, Horovod 0.28.1's same case
# (scripts/horovod/bench_horovod.py, variants oop and inplace). Each round runs every
# build once, then Horovod, so that a change of load hits all of them alike. Prints one line per
# run and, at the end, the median over rounds of each time and ratio. docs/benchmarks.md quotes it.
#
#   placement_rounds.sh [-r ROUNDS] [-c CASE] [-H HOROVOD_BENCH] LABEL=PATH/TO/allreduce_bench ...
#     -r ROUNDS   rounds (default 3)
#     -c CASE     64MiB (default; -b 64M -e 64M -n 10 -w 2, Horovod's 64MiB case) or 4KiB
#                 (-b 4K -e 4K -n 200 -w 20; Horovod is not run)
#     -H FILE     bench_horovod.py (default scripts/horovod/bench_horovod.py of this checkout);
#                 "none" skips Horovod
# Times are milliseconds per iteration: hvd's and the raw MPI baseline's mean over the timed loop
# (averaged over ranks), Horovod's mean_ms (the comparable figure, see its README).
set -u
rounds=3 case=64MiB horovod=
while getopts "r:c:H:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    c) case=$OPTARG ;;
    H) horovod=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-c 64MiB|4KiB] [-H bench_horovod.py|none] LABEL=BENCH ..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if (($# == 0)); then
  echo "$0: name at least one LABEL=PATH/TO/allreduce_bench" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
[ -n "$horovod" ] || horovod=$here/../../scripts/horovod/bench_horovod.py
case $case in
  64MiB) flags=(-b 64M -e 64M -d float -o sum -n 10 -w 2) ;;
  4KiB) flags=(-b 4K -e 4K -d float -o sum -n 200 -w 20); horovod=none ;;
  *) echo "$0: -c '$case' is not a case: use 64MiB or 4KiB" >&2; exit 2 ;;
esac
if [ "$horovod" != none ] && ! /usr/bin/python3 -c 'import horovod.torch' 2>/dev/null; then
  echo "# Horovod is not installed (scripts/horovod/install.sh): not run"
  horovod=none
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--oversubscribe --bind-to none --mca btl self,vader --mca oob_tcp_if_include lo -np 2)
results=$(mktemp)
trap 'rm -f "$results"' EXIT

for ((i = 1; i <= rounds; i++)); do
  for spec in "$@"; do
    label=${spec%%=*} bench=${spec#*=}
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$(mpirun "${args[@]}" "$bench" "${flags[@]}" --placement both 2>&1)
    rc=$?
    # Data rows: size count type redop hvd(time algbw busbw wrong) MPI(time ...) ratio place.
    rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 14 {print}' <<<"$out")
    if [ $rc -ne 0 ] || [ -z "$rows" ]; then
      echo "round $i $label: allreduce_bench failed (exit $rc):"
      echo "$out" | tail -5
      continue
    fi
    while read -r _ _ _ _ ht _ _ hw mt _ _ mw ratio place; do
      printf 'round %d load %s %-10s %-3s hvd %9.3f ms  MPI %9.3f ms  hvd/MPI %6.3f  wrong %d/%d\n' \
        "$i" "$load" "$label" "$place" "$(bc -l <<<"$ht/1000")" "$(bc -l <<<"$mt/1000")" "$ratio" \
        "$hw" "$mw"
      echo "$i $label $place hvd $(bc -l <<<"$ht/1000")" >>"$results"
      echo "$i $label $place MPI $(bc -l <<<"$mt/1000")" >>"$results"
      echo "$i $label $place hvd/MPI $ratio" >>"$results"
    done <<<"$rows"
  done
  if [ "$horovod" != none ]; then
    load=$(cut -d' ' -f1 /proc/loadavg)
    hv=$(/usr/bin/python3 "$horovod" --impl horovod --horovod-variants oop,inplace --cases "$case" 2>&1)
    for v in horovod horovod-inplace; do
      ms=$(grep -m1 "^impl=$v case=$case " <<<"$hv" | sed -E 's/.*mean_ms=([0-9.]+).*/\1/')
      wrong=$(grep -m1 "^impl=$v case=$case " <<<"$hv" | sed -E 's/.* wrong=([0-9]+).*/\1/')
      if [ -z "$ms" ]; then
        echo "round $i Horovod $v: no result:"
        echo "$hv" | tail -5
        continue
      fi
      place=out
      [ "$v" = horovod-inplace ] && place=in
      printf 'round %d load %s %-10s %-3s %s %9.3f ms  wrong %s\n' "$i" "$load" Horovod "$place" \
        "$v" "$ms" "$wrong"
      echo "$i Horovod $place time $ms" >>"$results"
    done
  fi
done

# Medians over rounds of every time and ratio, and of each build's per-round hvd/Horovod ratio
# (hvd's time over Horovod's in the same round and placement).
median() { sort -g | awk '{a[NR] = $1} END {if (NR) printf "%.3f", (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
awk '$2 != "Horovod" && $4 == "hvd" {print}' "$results" | while read -r r label place _ t; do
  h=$(awk -v r="$r" -v p="$place" '$1 == r && $2 == "Horovod" && $3 == p {print $5}' "$results")
  [ -n "$h" ] && echo "$r $label $place hvd/Horovod $(bc -l <<<"$t/$h")" >>"$results"
done
echo "# medians over $rounds rounds (times in ms)"
for key in $(awk '{print $2 "|" $3 "|" $4}' "$results" | sort -u); do
  IFS='|' read -r label place what <<<"$key"
  m=$(awk -v l="$label" -v p="$place" -v w="$what" '$2 == l && $3 == p && $4 == w {print $5}' "$results" | median)
  n=$(awk -v l="$label" -v p="$place" -v w="$what" '$2 == l && $3 == p && $4 == w' "$results" | wc -l)
  echo "median $label $place $what $m (of $n)"
done
