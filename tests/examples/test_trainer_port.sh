#!/usr/bin/env bash
# Checks the trainer_port example: the distributed trainer under mpirun with NP ranks ends with the
# same weights as the single-process trainer given the same global batch (to float tolerance), and
# a global batch that NP does not divide is refused with a message that says so.
#
# usage: test_trainer_port.sh MODE TRAINER_SINGLE TRAINER_DISTRIBUTED WORKDIR NP MPIEXEC [MPIEXEC_FLAGS...]
#   MODE same-weights:    run both with --global-batch $GLOBAL_BATCH (default 96) and compare
#   MODE reject-batch:    run the distributed trainer with a global batch NP does not divide
# Comparison: |a - b| <= 1e-5 * max(|a|, |b|) + 1e-7 for every weight (relative float tolerance,
# with an absolute floor for weights near zero).
set -euo pipefail

mode=$1 single=$2 distributed=$3 workdir=$4 np=$5
shift 5
mpiexec=("$@")
steps=${STEPS:-300}
global_batch=${GLOBAL_BATCH:-96}
seed=${SEED:-7}

mkdir -p "$workdir"
single_out="$workdir/single.np$np.txt"
dist_out="$workdir/distributed.np$np.txt"
rm -f "$single_out" "$dist_out"

case "$mode" in
  same-weights)
    "$single" --steps "$steps" --global-batch "$global_batch" --seed "$seed" \
      --weights-out "$single_out" >"$workdir/single.np$np.log"
    "${mpiexec[@]}" -np "$np" "$distributed" --steps "$steps" --global-batch "$global_batch" \
      --seed "$seed" --weights-out "$dist_out" >"$workdir/distributed.np$np.log"
    echo "single:";      cat "$workdir/single.np$np.log"
    echo "distributed (np $np):"; cat "$workdir/distributed.np$np.log"
    # The printed losses are means over the same global batches: they must agree too (printed
    # with 6 decimals, so the last digit may differ).
    if [[ $(wc -l <"$workdir/single.np$np.log") -ne $(wc -l <"$workdir/distributed.np$np.log") ]]; then
      echo "FAIL: the two trainers printed a different number of epochs"; exit 1
    fi
    paste "$workdir/single.np$np.log" "$workdir/distributed.np$np.log" | awk '
      { d = $6 - $12; if (d < 0) d = -d
        if ($2 != $8 || $4 != $10 || d > 2e-6) { print "FAIL: loss differs: " $0; bad = 1 } }
      END { exit bad }'
    [[ -s "$single_out" ]] || { echo "FAIL: $single_out was not written"; exit 1; }
    [[ -s "$dist_out" ]] || { echo "FAIL: $dist_out was not written (rank 0 writes it)"; exit 1; }
    awk -v rel=1e-5 -v abs=1e-7 '
      FNR == NR { a[FNR] = $1; n = FNR; next }
      {
        m = FNR; b = $1; d = a[FNR] - b; if (d < 0) d = -d
        x = a[FNR] < 0 ? -a[FNR] : a[FNR]; y = b < 0 ? -b : b; s = x > y ? x : y
        if (s > 0 && d / s > worst) worst = d / s
        if (d > rel * s + abs) { printf "weight %d differs: single %s, distributed %s\n", FNR - 1, a[FNR], b; bad++ }
      }
      END {
        if (m != n) { printf "FAIL: %d weights from single, %d from distributed\n", n, m; exit 1 }
        if (n == 0) { print "FAIL: no weights"; exit 1 }
        printf "%d weights, worst relative difference %.3g\n", n, worst
        if (bad) { printf "FAIL: %d weights differ by more than %g relative\n", bad, rel; exit 1 }
        print "OK"
      }' "$single_out" "$dist_out"
    ;;
  reject-batch)
    bad_batch=$((np * 24 + 1))
    set +e
    "${mpiexec[@]}" -np "$np" "$distributed" --steps 3 --global-batch "$bad_batch" \
      >"$workdir/reject.np$np.log" 2>&1
    rc=$?
    set -e
    cat "$workdir/reject.np$np.log"
    if [[ $rc -eq 0 ]]; then
      echo "FAIL: --global-batch $bad_batch with $np ranks was accepted"
      exit 1
    fi
    grep -q "global-batch $bad_batch is not divisible by the $np workers" "$workdir/reject.np$np.log" ||
      { echo "FAIL: the error does not explain the indivisible batch"; exit 1; }
    echo "OK: refused with exit status $rc"
    ;;
  *)
    echo "unknown mode '$mode'" >&2
    exit 2
    ;;
esac
