#!/usr/bin/env bash
# train_cnn's input pipeline under mpirun: --prefetch must not change what is trained.
#
# usage: test_train_cnn_prefetch.sh NP TRAIN_CNN COMPARE WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
#
# On NP ranks, a synthetic set, 2 epochs stopped by --max-steps in the middle of the second (so a
# loader is destroyed with batches in flight, and another one starts at an epoch boundary):
#   (a) --prefetch 0                                          the batches loaded by the step itself
#   (b) --prefetch 3 --loader-threads 2 --data-delay-ms 3     loaded ahead, out of order, slowly
#   (c) --prefetch 1 --data-delay-ms 1
# Every step's loss line (global-batch loss, accuracy, learning rate, printed to 9 digits) and the
# final weights (--dump-weights, compared byte for byte by COMPARE) must be identical. Each run's
# done line must report a data-wait share. Then a bad --prefetch value must fail fast with the
# flag's message.
#
# HVD_DETERMINISTIC=1: which gradients the runtime fuses into one all-reduce depends on when they
# become ready, and on 3 or more ranks MPI's summation order depends on the message size, so by
# default two runs of the very same command differ in the last bits (measured: three --prefetch 0
# runs on 3 ranks, three different weight files). Deterministic reductions make runs bitwise
# repeatable with fusion on (docs/determinism.md), so any difference left is the pipeline's.
set -uo pipefail
export HVD_DETERMINISTIC=1

np=$1 train_cnn=$2 compare=$3 workdir=$4
shift 4
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"

size=$((np * 16 * 12))  # 12 steps per epoch with 16 images per rank
steps=18                # stops in the middle of epoch 2
common=(--synthetic --synthetic-size "$size" --batch-size 16 --epochs 2 --max-steps "$steps" --seed 9
  --lr 0.02 --log-steps --test-limit 0 --metrics-csv none --progress lines)

run() {  # run NAME ARGS...
  local name=$1
  shift
  timeout 300 "${mpiexec[@]}" -np "$np" "$train_cnn" "${common[@]}" --dump-weights "$name.bin" "$@" \
    >"$name.log" 2>&1 || { cat "$name.log"; fail "run $name ($*) failed"; }
  grep '^step ' "$name.log" >"$name.steps"
  [[ $(wc -l <"$name.steps") -eq $steps ]] ||
    { cat "$name.log"; fail "run $name printed $(wc -l <"$name.steps") step lines, expected $steps"; }
  grep -q 'waiting for communication [0-9.]*% and for data [0-9.]*% of step time' "$name.log" ||
    { cat "$name.log"; fail "run $name does not report the data-wait share"; }
  grep -q 'input: ' "$name.log" || { cat "$name.log"; fail "run $name does not describe its input"; }
}

run a --prefetch 0
run b --prefetch 3 --loader-threads 2 --data-delay-ms 3
run c --prefetch 1 --data-delay-ms 1
grep -m1 'input: ' a.log
grep -m1 'input: ' b.log
for x in b c; do
  diff a.steps $x.steps >/dev/null || { diff a.steps $x.steps; fail "run $x's losses differ from --prefetch 0"; }
  "$compare" a.bin $x.bin bitwise || fail "run $x's weights differ from --prefetch 0"
done
echo "same losses and weights for --prefetch 0, 3 (2 loader threads) and 1 on $np ranks:"
tail -n 2 a.steps

# A bad value: every rank rejects it before any communication, naming the flag.
timeout 60 "${mpiexec[@]}" -np "$np" "$train_cnn" --synthetic --prefetch -1 >bad.log 2>&1
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat bad.log; fail "--prefetch -1: exit status $rc"; }
# Every rank rejects it alike; mpirun may end the job before a slower rank has printed its line, so
# at least one line, and no other error.
lines=$(grep -c -- 'train_cnn: error: --prefetch is -1: it must be from 0 (no prefetch) to 64 batches' bad.log)
others=$(grep 'train_cnn: error' bad.log | grep -vc -- '--prefetch is -1')
[[ $lines -ge 1 && $others -eq 0 ]] ||
  { cat bad.log; fail "--prefetch -1: expected the flag's message (got $lines) and no other error (got $others)"; }
echo "PASS: --prefetch trains bit for bit what --prefetch 0 trains on $np ranks; bad values refused"
