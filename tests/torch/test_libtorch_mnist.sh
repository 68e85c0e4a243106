#!/usr/bin/env bash
# Checks examples/libtorch_mnist (real Fashion-MNIST; exit 77 = skipped when it is not installed).
#
# usage: test_libtorch_mnist.sh MODE PLAIN HVD WORKDIR NP MPIEXEC [MPIEXEC_FLAGS...]
#   same-weights  the hvd trainer on 1 rank and on NP ranks, global batch 96 (each of NP ranks
#                 96 / NP), dropout off, 30 steps: the final weights agree to float tolerance
#                 (|a - b| <= 1e-4 * max(|a|, |b|) + 1e-6)
#   resume        on NP ranks: 40 steps in one run, against 20 steps, then a run resumed from the
#                 rank-0 checkpoint to 40: the same weights, bit for bit
#   plain         the plain LibTorch trainer: 10 steps with a checkpoint, resumed to 20
#   repeat        HVD_DETERMINISTIC=1, fusion on: the same command twice on NP ranks ends with the
#                 same weights, bit for bit (docs/determinism.md)
#   precision     --precision bf16 (autocast, hvd::torch::GradScaler) on NP ranks: every rank ends
#                 with the same weights, bit for bit; an Inf in the last rank's loss at step 10 is
#                 skipped by every rank (the scale halves alike) and the ranks still agree; a
#                 run stopped at step 20 and resumed from its checkpoint (scale included) ends with
#                 the uninterrupted run's weights, bit for bit; --precision fp16 on a LibTorch
#                 whose CPU autocast has no fp16 is refused by every rank
set -euo pipefail

mode=$1 plain=$2 hvd=$3 workdir=$4 np=$5
shift 5
mpiexec=("$@")
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data/train-images-idx3-ubyte.gz && ! -e $data/train-images-idx3-ubyte ]]; then
  echo "SKIP: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)"
  exit 77
fi
dir=$workdir/$mode.np$np
rm -rf "$dir"
mkdir -p "$dir"
common=(--data-dir "$data" --threads 1 --no-test --log-interval 10 --seed 3)

compare() {  # compare FILE_A FILE_B REL ABS
  awk -v rel="$3" -v abs="$4" '
    FNR == NR { a[FNR] = $1; n = FNR; next }
    {
      m = FNR; b = $1; d = a[FNR] - b; if (d < 0) d = -d
      x = a[FNR] < 0 ? -a[FNR] : a[FNR]; y = b < 0 ? -b : b; s = x > y ? x : y
      if (d > worst_abs) worst_abs = d
      if (s > 0 && d / s > worst) worst = d / s
      if (d > rel * s + abs) { if (bad < 5) printf "weight %d differs: %s vs %s\n", FNR - 1, a[FNR], b; bad++ }
    }
    END {
      if (m != n || n == 0) { printf "FAIL: %d weights against %d\n", n, m; exit 1 }
      printf "%d weights, worst relative difference %.3g, worst absolute %.3g\n", n, worst, worst_abs
      if (bad) { printf "FAIL: %d weights differ\n", bad; exit 1 }
      print "OK"
    }' "$1" "$2"
}

case "$mode" in
  same-weights)
    args=("${common[@]}" --batch-size 96 --max-steps 30 --dropout 0)
    "${mpiexec[@]}" -np 1 "$hvd" "${args[@]}" --weights-out "$dir/w1.txt" | tee "$dir/np1.log"
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --weights-out "$dir/w$np.txt" | tee "$dir/np$np.log"
    compare "$dir/w1.txt" "$dir/w$np.txt" 1e-4 1e-6
    ;;
  resume)
    args=("${common[@]}" --batch-size 64 --dropout 0)
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --max-steps 40 --checkpoint-dir "$dir/a" \
      --weights-out "$dir/uninterrupted.txt" | tee "$dir/a.log"
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --max-steps 20 --checkpoint-dir "$dir/b" | tee "$dir/b1.log"
    ls "$dir/b"
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --max-steps 40 --checkpoint-dir "$dir/b" \
      --weights-out "$dir/resumed.txt" | tee "$dir/b2.log"
    grep -q "starting at step 20" "$dir/b2.log" || { echo "FAIL: the second run did not resume at step 20"; exit 1; }
    if cmp -s "$dir/uninterrupted.txt" "$dir/resumed.txt"; then
      echo "OK: the resumed run ends with the uninterrupted run's weights, bit for bit"
    else
      compare "$dir/uninterrupted.txt" "$dir/resumed.txt" 0 0 || true
      echo "FAIL: the resumed run's weights differ"
      exit 1
    fi
    ;;
  repeat)
    args=("${common[@]}" --batch-size 96 --max-steps 30 --dropout 0)
    for run in 1 2; do
      HVD_DETERMINISTIC=1 "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" \
        --weights-out "$dir/run$run.txt" | tee "$dir/run$run.log"
    done
    if cmp -s "$dir/run1.txt" "$dir/run2.txt"; then
      echo "OK: two deterministic runs on $np ranks end with the same weights, bit for bit"
    else
      compare "$dir/run1.txt" "$dir/run2.txt" 0 0 || true
      echo "FAIL: two runs of the same command differ (HVD_DETERMINISTIC=1)"
      exit 1
    fi
    ;;
  precision)
    args=("${common[@]}" --batch-size 64 --dropout 0 --precision bf16 --max-steps 30)
    last=$((np - 1))
    ranks_agree() {  # ranks_agree RUN: every rank's weights are rank 0's, bit for bit
      for ((r = 1; r < np; r++)); do
        cmp -s "$dir/$1.0.txt" "$dir/$1.$r.txt" || { echo "FAIL: $1: rank $r's weights differ from rank 0's"; exit 1; }
      done
    }
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --weights-out "$dir/a.{rank}.txt" | tee "$dir/a.log"
    ranks_agree a
    grep -q "precision bf16: loss scale 65536, 0 steps skipped" "$dir/a.log" || { echo "FAIL: no final scale line"; exit 1; }
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --test-overflow "10:$last" \
      --weights-out "$dir/b.{rank}.txt" | tee "$dir/b.log"
    ranks_agree b
    grep -q "precision bf16: loss scale 32768, 1 steps skipped" "$dir/b.log" ||
      { echo "FAIL: the overflow in rank $last's step 10 was not skipped with the scale halved"; exit 1; }
    ! cmp -s "$dir/a.0.txt" "$dir/b.0.txt" || { echo "FAIL: skipping step 10 changed nothing"; exit 1; }
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --test-overflow "10:$last" --max-steps 20 \
      --checkpoint-dir "$dir/ck" | tee "$dir/c1.log"
    "${mpiexec[@]}" -np "$np" "$hvd" "${args[@]}" --test-overflow "10:$last" \
      --checkpoint-dir "$dir/ck" --weights-out "$dir/c.{rank}.txt" | tee "$dir/c2.log"
    grep -q "starting at step 20" "$dir/c2.log" || { echo "FAIL: the second run did not resume at step 20"; exit 1; }
    grep -q "precision bf16: loss scale 32768, 0 steps skipped" "$dir/c2.log" ||
      { echo "FAIL: the resumed run did not continue with the checkpoint's scale 32768"; exit 1; }
    cmp -s "$dir/b.0.txt" "$dir/c.0.txt" || { echo "FAIL: the resumed run's weights differ from the uninterrupted run's"; exit 1; }
    ranks_agree c
    set +e
    out=$("${mpiexec[@]}" -np "$np" "$hvd" "${common[@]}" --precision fp16 --max-steps 1 2>&1)
    rc=$?
    set -e
    if [[ $out == *"needs LibTorch 2.5"* ]]; then
      [[ $rc -ne 0 && $(grep -c "precision fp16: LibTorch .* bfloat16 only" <<<"$out") -eq $np ]] ||
        { echo "$out"; echo "FAIL: --precision fp16 was not refused by every rank"; exit 1; }
    else
      [[ $rc -eq 0 ]] || { echo "$out"; echo "FAIL: --precision fp16 failed"; exit 1; }
    fi
    echo "OK: bf16 with the grad scaler on $np ranks: ranks agree bit for bit, an overflow on rank $last skipped everywhere, resume exact"
    ;;
  plain)
    args=("${common[@]}" --batch-size 64)
    "$plain" "${args[@]}" --max-steps 10 --checkpoint-dir "$dir/ck" | tee "$dir/p1.log"
    "$plain" "${args[@]}" --max-steps 20 --checkpoint-dir "$dir/ck" --weights-out "$dir/w.txt" | tee "$dir/p2.log"
    grep -q "starting at step 10" "$dir/p2.log" || { echo "FAIL: the plain trainer did not resume at step 10"; exit 1; }
    [[ $(wc -l <"$dir/w.txt") -eq 21840 ]] || { echo "FAIL: expected 21840 weights"; exit 1; }
    echo "OK"
    ;;
  *)
    echo "unknown mode '$mode'" >&2
    exit 2
    ;;
esac
