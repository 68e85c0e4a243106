#!/usr/bin/env bash
# train_cnn with HVD_DETERMINISTIC=1 and fusion on (the default threshold): the same command run
# twice on NP ranks ends with the same weights, bit for bit; and so does a third run with other
# fusion settings (every gradient reduced alone, a shorter cycle): an element's sum does not depend
# on the layout. Without the mode, 3 and 4 ranks differ in the last bits from run to run (a
# gradient's sum depends on its place in the fused buffer, which depends on timing:
# docs/determinism.md).
#
# usage: test_train_cnn_repeat.sh TRAIN_CNN WORKDIR NP MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
train_cnn=$1 workdir=$2 np=$3
shift 3
mpiexec=("$@")
source "$(dirname "${BASH_SOURCE[0]}")/../examples/train_cnn/preamble.sh"
args=(--synthetic --synthetic-size 3072 --epochs 1 --seed 5 --batch-size 16 --test-limit 0
  --log-every 16 --metrics-csv none)
run() {  # run N [VAR=VALUE...]
  local n=$1
  shift
  env HVD_DETERMINISTIC=1 "$@" "${mpiexec[@]}" -np "$np" "$train_cnn" "${args[@]}" \
    --dump-weights "run$n.bin" >"run$n.log" 2>&1 || { cat "run$n.log"; echo "FAIL: run $n failed"; exit 1; }
}
run 1
run 2
run 3 HVD_FUSION_THRESHOLD=0 HVD_CYCLE_TIME=0.2
[[ -s run1.bin ]] || { cat run1.log; echo "FAIL: no weights written"; exit 1; }
if ! cmp -s run1.bin run2.bin; then
  echo "FAIL: two runs of the same command on $np ranks differ (HVD_DETERMINISTIC=1): $(cmp run1.bin run2.bin | head -1)"
  exit 1
fi
if ! cmp -s run1.bin run3.bin; then
  echo "FAIL: unfused (HVD_FUSION_THRESHOLD=0) differs from fused on $np ranks (HVD_DETERMINISTIC=1): $(cmp run1.bin run3.bin | head -1)"
  exit 1
fi
echo "PASS: two deterministic runs on $np ranks end with the same weights, bit for bit, and an unfused run too ($(stat -c %s run1.bin) bytes)"
