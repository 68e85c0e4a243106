#!/usr/bin/env bash
# The `slurm` requeue tests: a template of cluster/slurm/ submitted to a real one-node SLURM is
# interrupted mid-epoch, saves, requeues itself and runs to the end with nobody touching it, and
# its final weights are bitwise those of the same training uninterrupted.
#
#   run_requeue_test.sh --scenario signal|one-rank|time-limit --template FILE [--template FILE...]
#                       --train TRAIN_CNN --train-args "ARGS" --hvdrun PATH --workdir DIR
#                       [--job-args "ARGS"] [--ranks N] [--ckpt-every N] [--signal-at-step S]
#                       [--time-limit MINUTES] [--signal-spec SPEC] [--cred-expire S]
#                       [--sched-interval S] [--timeout SECONDS] [--keep]
#
# Scenarios (each template is submitted once; several templates run side by side):
#   signal      once the job's log shows a checkpoint at step >= --signal-at-step, the harness runs
#               `scancel --signal=USR1 --batch JOB`: what SLURM does at --signal time, on demand.
#   one-rank    the same moment, SIGUSR1 to ONE train_cnn process only (rank 1, found in this PID
#               namespace by its SLURM_JOB_ID and rank variables); the ranks must still agree.
#   time-limit  nothing from the harness: the job runs with --time=--time-limit and
#               --signal=--signal-spec, so SLURM itself signals it before its limit, every run.
#
# What it does:
#  1. Skips (77) like run_slurm_test.sh: root, slurm-wlm, munge, Open MPI, namespaces.
#  2. Starts the one-node SLURM of slurm_env.sh, with AuthInfo cred_expire=--cred-expire
#     (default 10 s; SLURM's own default is 120 s): SLURM holds a requeued job back for that long
#     (Reason=BeginTime), and SchedulerParameters=sched_interval=--sched-interval (default 2 s;
#     SLURM's 60 s): the main scheduling pass that then starts it.
#  3. The reference: `mpirun -np N train_cnn ARGS --checkpoint-dir ... --dump-weights ref.bin`,
#     uninterrupted, HVD_DETERMINISTIC=1 (bitwise reproducible with fusion on).
#  4. Submits each template (sbatch --nodes=1 --ntasks-per-node=N, TRAIN_ARGS = ARGS + --job-args
#     + --dump-weights, CKPT_EVERY, HVD_DETERMINISTIC=1), delivers the scenario's signal, and
#     follows each job's log every 0.25 s (bounded by --timeout), timing its events.
#  5. Checks each job: JobState COMPLETED, ExitCode 0:0, Restarts >= 1; its log shows the stop
#     line (for one-rank: the signal seen on that rank alone), the exit 75, `scontrol requeue`, the
#     second run and its "resumed from ... (step S" line at the stop step; the final weights
#     `cmp`-equal to the reference. Prints each job's timeline: signal to exit 75, requeue to
#     resumed step, total.
#  6. Always: cancels the jobs, stops the daemons, removes --workdir (kept with --keep).
# Exit status: 0 pass; 1 a failure (each named); 77 skipped.
set -uo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=slurm_env.sh
source "$(dirname "$SELF")/slurm_env.sh"
SCENARIO="" TEMPLATES=() TRAIN="" TRAIN_ARGS="" JOB_ARGS="" HVDRUN="" WORKDIR="" RANKS=2
CKPT_EVERY=10 SIGNAL_AT_STEP=40 TIME_LIMIT=2 SIGNAL_SPEC=B:USR1@60 CRED_EXPIRE=10 SCHED_INTERVAL=2
TIMEOUT=240
KEEP=0 INSIDE=0
ORIG_ARGS=("$@")
while (($#)); do
  case "$1" in
    --scenario) SCENARIO=$2; shift 2 ;;
    --template) TEMPLATES+=("$2"); shift 2 ;;
    --train) TRAIN=$2; shift 2 ;;
    --train-args) TRAIN_ARGS=$2; shift 2 ;;
    --job-args) JOB_ARGS=$2; shift 2 ;;
    --hvdrun) HVDRUN=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --ckpt-every) CKPT_EVERY=$2; shift 2 ;;
    --signal-at-step) SIGNAL_AT_STEP=$2; shift 2 ;;
    --time-limit) TIME_LIMIT=$2; shift 2 ;;
    --signal-spec) SIGNAL_SPEC=$2; shift 2 ;;
    --cred-expire) CRED_EXPIRE=$2; shift 2 ;;
    --sched-interval) SCHED_INTERVAL=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --inside) INSIDE=1; shift ;;
    *) echo "run_requeue_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $SCENARIO =~ ^(signal|one-rank|time-limit)$ && ${#TEMPLATES[@]} -gt 0 && -n $TRAIN && -n $HVDRUN &&
  -n $WORKDIR ]] || {
  echo "run_requeue_test.sh: needs --scenario signal|one-rank|time-limit, --template, --train," \
    "--hvdrun and --workdir" >&2
  exit 2
}

if ((!INSIDE)); then
  [[ -x $TRAIN ]] || { echo "FAILED: the trainer '$TRAIN' is not built"; exit 1; }
  slurm_env_enter "$SELF" "${ORIG_ARGS[@]}"
fi

# ---- inside the namespaces: PID 1 is this script ----
SLURM_AUTH_EXTRA=",cred_expire=$CRED_EXPIRE"
# A requeued job whose BeginTime has come starts at the next pass of the main scheduling loop;
# nothing else here would trigger one.
SLURM_CONF_EXTRA="SchedulerParameters=sched_interval=$SCHED_INTERVAL"
slurm_env_start
OUT=$WORKDIR/out
cd "$OUT" || fail "no $OUT" # the submit directory: the templates' checkpoint folders go here
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HVD_DETERMINISTIC=1
T0=$(date +%s.%N)
now() { echo "$(date +%s.%N) - $T0" | bc; }
since() { printf '%.1f' "$(echo "$2 - $1" | bc)"; }

# 3. The uninterrupted reference (no --job-args: those only pace the job).
echo "# reference: mpirun -np $RANKS $TRAIN $TRAIN_ARGS --checkpoint-every-steps $CKPT_EVERY"
# shellcheck disable=SC2086
timeout 300 mpirun -np "$RANKS" --bind-to none "$TRAIN" $TRAIN_ARGS \
  --checkpoint-dir "$OUT/ref-ckpt" --checkpoint-every-steps "$CKPT_EVERY" \
  --dump-weights "$OUT/ref.bin" </dev/null >"$OUT/ref.out" 2>&1 || {
  tail -n 30 "$OUT/ref.out"
  fail "the uninterrupted reference run failed (exit $?)"
}
echo "# reference done at t=$(printf '%.1f' "$(now)") s: $(grep -E '^train_cnn: done' "$OUT/ref.out")"

# 4. Submit.
export TRAIN_BIN=$TRAIN HVDRUN=$HVDRUN CKPT_EVERY
limits=(--time=10)
[[ $SCENARIO == time-limit ]] && limits=(--time="$TIME_LIMIT" --signal="$SIGNAL_SPEC")
declare -A JOB LOG ENDED SIGNALLED SEEN EVENTS TSIG TSUB STATE
names=()
for t in "${TEMPLATES[@]}"; do
  name=$(basename "$t" .sbatch)
  names+=("$name")
  LOG[$name]=$OUT/$name.out
  id=$(TRAIN_ARGS="$TRAIN_ARGS $JOB_ARGS --dump-weights $OUT/$name.bin" \
       timeout 20 sbatch --parsable --nodes=1 --ntasks-per-node="$RANKS" --cpus-per-task=1 \
       "${limits[@]}" --output="${LOG[$name]}" "$t") || fail "sbatch $t was refused"
  JOB[$name]=${id%%;*}
  SEEN[$name]=0 SIGNALLED[$name]=0 EVENTS[$name]="" TSUB[$name]=$(now)
  echo "# t=$(printf '%.1f' "$(now)") s: submitted $name: job ${JOB[$name]} (${limits[*]})"
done

# one_rank_pid JOB RANK: the pid of train_cnn's rank RANK of job JOB (in this PID namespace).
one_rank_pid() {
  local p env comm
  comm=$(basename "$TRAIN" | cut -c1-15)
  for p in $(pgrep -x "$comm"); do
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
    grep -qx "SLURM_JOB_ID=$1" <<<"$env" || continue
    grep -qxE "(OMPI_COMM_WORLD_RANK|PMIX_RANK|SLURM_PROCID)=$2" <<<"$env" && { echo "$p"; return; }
  done
}

# Follow the logs: time-stamp the lines that matter (not the periodic checkpoints), deliver the
# signal, until every job has ended.
PATTERN='^hvd job [0-9]+, run|^train_cnn: (stopping|resumed|done)|SIGUSR1|SIGTERM|exit 75|error'
deadline=$(($(date +%s) + TIMEOUT))
while :; do
  pending=0
  for name in "${names[@]}"; do
    [[ -n ${ENDED[$name]:-} ]] && continue
    pending=1
    t=$(now)
    if [[ -f ${LOG[$name]} ]]; then
      n=$(wc -l <"${LOG[$name]}")
      if ((n > SEEN[$name])); then
        while IFS= read -r line; do
          [[ $line =~ $PATTERN ]] && EVENTS[$name]+=$(printf '%7.1f s  %s' "$t" "$line")$'\n'
        done < <(sed -n "$((SEEN[$name] + 1)),${n}p" "${LOG[$name]}")
        SEEN[$name]=$n
      fi
      if [[ $SCENARIO != time-limit ]] && ((!SIGNALLED[$name])); then
        last=$(grep -oE 'checkpoint: saved step [0-9]+' "${LOG[$name]}" | tail -n 1 |
                 grep -oE '[0-9]+$')
        if ((${last:-0} >= SIGNAL_AT_STEP)); then
          if [[ $SCENARIO == signal ]]; then
            what="scancel --signal=USR1 --batch ${JOB[$name]}"
            timeout 10 scancel --signal=USR1 --batch "${JOB[$name]}" || fail "$what failed"
          else
            pid=$(one_rank_pid "${JOB[$name]}" 1)
            [[ -n $pid ]] || fail "$name: no process of rank 1 of job ${JOB[$name]} found"
            kill -USR1 "$pid"
            what="kill -USR1 $pid (rank 1 of job ${JOB[$name]} only)"
          fi
          SIGNALLED[$name]=1 TSIG[$name]=$t
          EVENTS[$name]+=$(printf '%7.1f s  ** harness: %s (checkpoint at step %s seen)' \
                             "$t" "$what" "$last")$'\n'
        fi
      fi
    fi
    st=$(job_field "${JOB[$name]}" JobState)
    if [[ -n $st && $st != "${STATE[$name]:-}" ]]; then
      extra=""
      [[ $st == PENDING ]] &&
        extra=" Reason=$(job_field "${JOB[$name]}" Reason) EligibleTime=$(job_field "${JOB[$name]}" EligibleTime)"
      EVENTS[$name]+=$(printf '%7.1f s  ** SLURM: JobState=%s%s' "$t" "$st" "$extra")$'\n'
      STATE[$name]=$st
    fi
    # Only a final state ends the watch: SLURM passes through others on the way (SIGNALING while
    # it delivers --signal, REQUEUED, REQUEUE_HOLD, ...), and the deadline bounds the wait.
    case "$st" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | \
        PREEMPTED) ENDED[$name]=$t ;;
    esac
  done
  ((pending)) || break
  if (($(date +%s) > deadline)); then
    for name in "${names[@]}"; do
      [[ -n ${ENDED[$name]:-} ]] && continue
      echo "---- $name (job ${JOB[$name]}, $(job_field "${JOB[$name]}" JobState)," \
        "Reason=$(job_field "${JOB[$name]}" Reason)) output so far:"
      cat "${LOG[$name]}" 2>/dev/null
    done
    fail "jobs still unfinished after $TIMEOUT s (cancelled)"
  fi
  sleep 0.25
done

# 5. Check.
failed=0
for name in "${names[@]}"; do
  id=${JOB[$name]} log=${LOG[$name]}
  info=$(timeout 10 scontrol -o show job "$id" 2>/dev/null)
  restarts=$(job_field "$id" Restarts)
  echo "==== $name (job $id): $(grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+|Restarts=[0-9]+' <<<"$info" | tr '\n' ' ')"
  printf '%s' "${EVENTS[$name]}"
  problems=()
  grep -q 'JobState=COMPLETED ' <<<"$info" || problems+=("not COMPLETED")
  grep -q ' ExitCode=0:0 ' <<<"$info" || problems+=("exit code not 0:0")
  ((${restarts:-0} >= 1)) || problems+=("never requeued (Restarts=${restarts:-?})")
  stops=$(grep -E '^train_cnn: stopping after step [0-9]+' "$log")
  resumes=$(grep -E '^train_cnn: resumed from' "$log")
  [[ -n $stops ]] || problems+=("no 'train_cnn: stopping after step' line")
  grep -q 'exit 75' "$log" || problems+=("no exit 75 in the log")
  grep -q "scontrol requeue $id" "$log" || problems+=("the template did not run scontrol requeue")
  grep -qE "^hvd job $id, run 2:" "$log" || problems+=("no second run of the batch script")
  # Each stop at step S is followed by a resume at step S.
  while read -r s; do
    [[ -n $s ]] || continue
    grep -qE "^train_cnn: resumed from .*\(step $s," <<<"$resumes" ||
      problems+=("stopped after step $s but no 'resumed from ... (step $s,' line")
  done < <(sed -nE 's/^train_cnn: stopping after step ([0-9]+).*/\1/p' <<<"$stops")
  if [[ $SCENARIO == one-rank ]]; then
    grep -qE 'SIGUSR1 on ranks? 1\)' <<<"$stops" ||
      problems+=("the stop line does not name rank 1 alone as the one signalled")
  fi
  [[ $SCENARIO == time-limit ]] || ((SIGNALLED[$name])) ||
    problems+=("never reached a checkpoint at step $SIGNAL_AT_STEP to signal at")
  if [[ ! -f $OUT/$name.bin ]]; then
    problems+=("no final weights ($OUT/$name.bin)")
  elif ! cmp -s "$OUT/ref.bin" "$OUT/$name.bin"; then
    problems+=("final weights differ from the uninterrupted run's: $(cmp "$OUT/ref.bin" "$OUT/$name.bin" 2>&1 | head -n 1)")
  fi
  # Figures from the timeline: first signal -> first exit 75 -> run 2 -> first resumed line.
  ev=${EVENTS[$name]}
  t_first() { grep -E -- "$1" <<<"$ev" | head -n 1 | awk '{print $1}'; }
  t_sig=${TSIG[$name]:-$(t_first 'SIGUSR1: the ranks save')}
  t_exit=$(t_first 'exit 75\): scontrol requeue')
  t_run2=$(t_first ', run 2:')
  t_res=$(t_first 'train_cnn: resumed')
  if [[ -n $t_sig && -n $t_exit && -n $t_run2 && -n $t_res ]]; then
    echo "---- $name figures: signal to the step's exit 75: $(since "$t_sig" "$t_exit") s;" \
      "requeue to run 2: $(since "$t_exit" "$t_run2") s; to resumed step: $(since "$t_exit" "$t_res") s;" \
      "submit to end: $(since "${TSUB[$name]}" "${ENDED[$name]}") s; runs: $((restarts + 1))"
  fi
  if ((${#problems[@]})); then
    failed=1
    echo "---- $name FAILED: $(IFS=';'; echo "${problems[*]}")"
    echo "---- $name log:"
    cat "$log"
  else
    echo "---- $name PASSED"
  fi
done
((failed)) && fail "some jobs failed (above)"
echo "PASSED ($SCENARIO): ${names[*]}"
