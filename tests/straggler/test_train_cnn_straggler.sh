#!/usr/bin/env bash
# train_cnn names its slow rank (docs/train_cnn.md, "The slow rank"): NP ranks, the last one
# started with --data-delay-ms DELAY and --prefetch 0 (each of its batches takes DELAY ms longer
# to load, before the step's negotiations; mpirun's MPMD form gives it its own flags), 24 steps.
# Rank 0's metrics file must name that rank (slow_rank) in >= 90 % of the steps after the first
# two, each time late by >= DELAY / 2 ms (lateness_ms), and no other rank in more than 10 %; every
# plain progress line must carry a "last ..." field, and some the slow rank's ("last rN in").
#
# usage: test_train_cnn_straggler.sh TRAIN_CNN WORKDIR NP DELAY_MS MPIEXEC [MPIEXEC_FLAGS...]
set -uo pipefail
train_cnn=$1 workdir=$2 np=$3 delay=$4
shift 4
mpiexec=("$@")
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$workdir" && mkdir -p "$workdir" && cd "$workdir" || exit 1
slow=$((np - 1))
steps=24
common=(--synthetic --synthetic-size 4096 --batch-size 16 --max-steps $steps --test-limit 0
        --progress lines --log-every 4 --prefetch 0 --seed 3)
"${mpiexec[@]}" -np $slow "$train_cnn" "${common[@]}" --metrics-csv m.csv : \
  -np 1 "$train_cnn" "${common[@]}" --metrics-csv none --data-delay-ms "$delay" >run.log 2>&1 ||
  { cat run.log; fail "train_cnn failed"; }
cat run.log
head -1 m.csv | grep -q ',slow_rank,lateness_ms$' || fail "m.csv's header lacks slow_rank,lateness_ms"
# kind,epoch,step,loss,accuracy,images_per_s,lr,wait_share,test_loss,test_accuracy,slow_rank,lateness_ms
awk -F, -v slow=$slow -v np=$np -v delay=$delay -v steps=$steps '
  $1 == "step" {
    n++
    if (NF != 12 || $11 !~ /^-?[0-9]+$/ || $11 < -1 || $11 >= np || $12 < 0) { print "bad row: " $0; bad = 1 }
    if ($3 <= 2) next
    counted++
    if ($11 == slow && $12 >= delay / 2) hit++
    else if ($11 >= 0 && $11 != slow) other[$11]++
  }
  END {
    printf "step rows %d; of the %d after step 2 the slow rank %d was named, late by >= %g ms, in %d\n", n, counted, slow, delay / 2, hit
    if (n != steps) { print "want " steps " step rows"; bad = 1 }
    if (hit * 10 < counted * 9) { print "want >= 90 %"; bad = 1 }
    for (r in other) if (other[r] * 10 > counted) { print "rank " r " named in " other[r] " steps"; bad = 1 }
    exit bad
  }' m.csv || fail "m.csv does not name the slow rank in >= 90 % of the steps"
lines=$(grep -c '^epoch .* step .*(total' run.log)
[[ $lines -ge 5 ]] || fail "want a progress line every 4 steps ($lines)"
[[ $(grep '^epoch .* step .*(total' run.log | grep -c ' last ') -eq $lines ]] ||
  fail "a progress line lacks its 'last ...' field"
grep -q "last r$slow in " run.log || fail "no progress line names rank $slow"
echo "PASS: train_cnn named its slow rank $slow of $np in its metrics file and progress lines"
