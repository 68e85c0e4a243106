#!/usr/bin/env bash
# Kill test for crash-safe checkpoints: ROUNDS times, start TOOL in save mode (it resumes from the
# newest checkpoint and saves ~6 MiB checkpoints in a loop), wait for its first save, SIGKILL rank 0
# after a random delay, then run TOOL in check mode: restore_latest must find a checkpoint at least
# as new as the last one reported saved, with the right values, and no visible file may be torn.
#
# usage: test_checkpoint_kill.sh TOOL NP [LAUNCHER...]
#   NP ranks started by LAUNCHER (e.g. mpirun --oversubscribe); with no LAUNCHER, TOOL runs
#   directly (a singleton MPI process) and NP must be 1.
# HVD_KILL_TEST_ROUNDS (default 20) and HVD_KILL_TEST_SEED (default: from the clock; printed)
# make a failure reproducible.
set -u
tool=$1
np=$2
shift 2
launcher=("$@")
rounds=${HVD_KILL_TEST_ROUNDS:-20}
seed=${HVD_KILL_TEST_SEED:-$(($(date +%s%N) / 1000 % 32768))}
RANDOM=$seed

run() {
  if ((${#launcher[@]})); then "${launcher[@]}" -np "$np" "$tool" "$@"; else "$tool" "$@"; fi
}

dir=$(mktemp -d /tmp/hvd_ckpt_kill_XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "kill test: $rounds rounds, $np rank(s), seed $seed (HVD_KILL_TEST_SEED=$seed reproduces the delays)"

fail() {
  echo "FAIL (round $round, seed $seed): $*"
  for f in "$dir"/save."$round".*; do echo "--- $f"; tail -n 20 "$f"; done
  ls -la "$dir/ckpt" 2>/dev/null
  exit 1
}

for ((round = 1; round <= rounds; ++round)); do
  out=$dir/save.$round.out
  run save "$dir/ckpt" >"$out" 2>"$dir/save.$round.err" &
  bg=$!
  deadline=$((SECONDS + 30))
  until grep -q '^saved ' "$out"; do
    kill -0 "$bg" 2>/dev/null || fail "the save run exited before its first save"
    if ((SECONDS > deadline)); then
      kill -9 "$bg"
      fail "no save within 30 s"
    fi
    sleep 0.01
  done
  delay_ms=$((RANDOM % 300))
  sleep "$(printf '0.%03d' "$delay_ms")"
  pid=$(awk '/^pid /{print $2; exit}' "$out")
  [[ -n $pid ]] || fail "no pid line"
  kill -9 "$pid"
  wait "$bg" 2>/dev/null
  saved=$(awk '/^saved /{s = $2} END{print s + 0}' "$out")
  tmp_files=$(find "$dir/ckpt" -name '.ckpt-*.tmp' | wc -l)
  if ! result=$(run check "$dir/ckpt" "$saved" 2>&1); then
    echo "$result"
    fail "check after killing at +${delay_ms} ms (last reported save: step $saved)"
  fi
  echo "round $round: killed +${delay_ms} ms after the first save, last reported save $saved, " \
    "torn temporaries $tmp_files; check: $(echo "$result" | grep '^restored' | head -n 1)"
done
echo "PASS: $rounds kills, every restore found a good checkpoint and no visible file was torn"
