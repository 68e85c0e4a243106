#!/usr/bin/env bash
# train_cnn --recompute (activation recomputation, examples/train_cnn/model/recompute.h) under
# mpirun: the same training, bitwise, with less activation memory.
#
# usage: test_train_cnn_recompute.sh TRAIN_CNN COMPARE WORKDIR MPIEXEC [MPIEXEC_FLAGS...]
#   NP ranks (TRAIN_CNN_NP, default 1) x batch B (TRAIN_CNN_BATCH, 16) for STEPS steps
#   (TRAIN_CNN_STEPS, 12), real Fashion-MNIST when installed (else --synthetic), three runs with
#   the same seed: --recompute none (the default), --recompute (all blocks), --recompute conv1.
#   Every step's global-batch loss and accuracy (--log-steps, printed to 9 digits) and the final
#   weights (--dump-weights, compared with COMPARE ... bitwise) must be identical; the peak
#   activation bytes the model counted ("activations: ..." line of --benchmark) must be those the
#   shapes give for the batch and fall with recomputation. Then a bad --recompute value must stop
#   every rank at once with a message naming it. On 3 or more ranks without fusion (see below).
set -uo pipefail

train_cnn=$1 compare=$2 workdir=$3
shift 3
mpiexec=("$@")
np=${TRAIN_CNN_NP:-1} b=${TRAIN_CNN_BATCH:-16} steps=${TRAIN_CNN_STEPS:-12}
source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"
# On 3 or more ranks the sum of a gradient over ranks depends on the order MPI adds the ranks'
# terms, which depends on the tensor's place in a fused buffer, which depends on timing (which
# gradients are ready at a negotiation cycle): by default two runs of the same command then differ
# in the last bits, recomputation or not (on 1 and 2 ranks a + b == b + a). Deterministic
# reductions add every gradient's terms in rank order, fused or not (docs/determinism.md), so the
# runs are reproducible and comparable bit for bit.
if ((np >= 3)); then
  export HVD_DETERMINISTIC=1
  echo "HVD_DETERMINISTIC=1: every gradient's terms added in rank order, fusion on"
fi
# --benchmark: no evaluation, and the "activations:" line; --benchmark-warmup 0 so that every step
# counts (the figures are not used here).
common=(--max-steps "$steps" --batch-size "$b" --seed 3 --log-steps --benchmark --benchmark-warmup 0
  --metrics-csv none "${data[@]}")

run() {  # run NAME ARGS...: train_cnn on np ranks, the steps in NAME.steps, weights in NAME.bin
  local name=$1
  shift
  "${mpiexec[@]}" -np "$np" "$train_cnn" "${common[@]}" --dump-weights "$name.bin" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "the run '$name' ($*) failed"; }
  grep '^step ' "$name.log" >"$name.steps"
  [[ $(wc -l <"$name.steps") -eq $steps ]] ||
    { cat "$name.log"; fail "'$name' printed $(wc -l <"$name.steps") step lines, expected $steps"; }
}
peak() {  # peak NAME: the activation bytes of NAME's "activations:" line
  sed -n 's/^activations: at most \([0-9]*\) bytes .*/\1/p' "$1.log"
}

run kept
run all --recompute
run conv1 --recompute conv1
grep -q -- '; recompute all$' all.log || { cat all.log; fail "the banner does not name --recompute all"; }
grep '^train_cnn: [0-9]* replica' kept.log | grep -q recompute &&
  fail "the banner of the run without --recompute mentions recompute"

for r in all conv1; do
  if ! diff kept.steps "$r.steps" >/dev/null; then
    paste -d'|' kept.steps "$r.steps" | head -n "$steps"
    fail "--recompute $r changed the losses of $np rank(s) x $b"
  fi
  "$compare" kept.bin "$r.bin" bitwise || fail "--recompute $r changed the weights after $steps steps"
done
echo "the $steps steps' losses and the weights are bitwise equal with --recompute none, all, conv1"

# Per image, from the shapes (28x28x1 input, conv 32 and 64 channels, hidden 512, 10 classes):
# kept: input 784 + a1 25088 + p1 6272 + a2 12544 + p2 3136 + h 512 + logits 10 = 48346 floats;
# recomputed (all, or conv1 alone): input + a1 + p1 + logits = 32154 floats, held while conv1's
# block re-runs in the backward pass.
[[ -n $(peak kept) && -n $(peak all) && -n $(peak conv1) ]] ||
  { cat kept.log all.log conv1.log; fail "a run printed no 'activations:' line"; }
want_kept=$((48346 * 4 * b)) want_recomputed=$((32154 * 4 * b))
echo "peak activation bytes per replica: kept $(peak kept) (expected $want_kept), all $(peak all)," \
  "conv1 $(peak conv1) (expected $want_recomputed)"
[[ $(peak kept) -eq $want_kept ]] || fail "the kept peak is $(peak kept), expected $want_kept"
[[ $(peak all) -eq $want_recomputed && $(peak conv1) -eq $want_recomputed ]] ||
  fail "the recomputed peaks are $(peak all) and $(peak conv1), expected $want_recomputed"

# A bad value: every rank refuses it before any communication (exit 2), naming the value. mpirun
# ends the job when the first rank exits non-zero, maybe before another has printed its line, so
# each rank runs under a shell that records its own exit status and message and exits 0.
timeout 60 "${mpiexec[@]}" -np "$np" bash -c \
  'r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}; "$@" 2>"bad.$r.err" >/dev/null; echo $? >"bad.$r.rc"' \
  rank "$train_cnn" --recompute conv1,conv3 "${data[@]}" >bad.log 2>&1 ||
  { cat bad.log; fail "the job of --recompute conv1,conv3 did not end cleanly"; }
for ((r = 0; r < np; ++r)); do
  [[ $(cat "bad.$r.rc" 2>/dev/null) == 2 ]] ||
    { cat bad.log bad.*.err; fail "--recompute conv1,conv3: rank $r exited with '$(cat "bad.$r.rc" 2>/dev/null)', expected 2"; }
  grep -q -- "train_cnn: error: --recompute is 'conv1,conv3': no block 'conv3'" "bad.$r.err" ||
    { cat "bad.$r.err"; fail "--recompute conv1,conv3: rank $r did not name the bad value"; }
done
echo "PASS: --recompute on $np rank(s) x $b: bitwise the same training, peak activations" \
  "$(peak kept) -> $(peak all) bytes; a bad value is refused by every rank"
