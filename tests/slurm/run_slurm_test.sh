#!/usr/bin/env bash
# The `slurm` test: a real SLURM (Debian slurm-wlm 22.05 + munge) on this machine, one node, and
# the three sbatch templates of cluster/slurm/ submitted to it, each training a tiny job.
#
#   run_slurm_test.sh --templates DIR --train PROGRAM --train-args "ARGS" --hvdrun PATH
#                     --workdir DIR [--timeout SECONDS] [--keep]
#
# What it does:
#  1. Skips (exit 77, the reason on stdout) unless root with slurmctld, slurmd, sbatch, scontrol,
#     munged, mpirun and unshare installed. It installs nothing (scripts/install-deps does).
#  2. Starts a one-node SLURM in private namespaces (slurm_env.sh explains how): re-runs itself
#     inside new PID, mount and network namespaces, writes a fresh munge key and, under --workdir
#     (removed first and at the end), slurm.conf for one node named after this host on 127.0.0.1
#     with 8 CPUs and 8 GPUs declared, starts munged, slurmctld and slurmd, and waits (bounded)
#     until the node is idle.
#  3. Submits every *.sbatch template with `sbatch --nodes=1 --ntasks-per-node=2 --cpus-per-task=1`
#     (flags override the templates' #SBATCH lines) and TRAIN_BIN/TRAIN_ARGS/HVDRUN in the
#     environment, from --workdir/out (the submit directory, where the templates put their
#     checkpoint folders), waits for all of them (bounded by --timeout), and checks each: JobState
#     COMPLETED, ExitCode 0:0, both ranks in one world of 2 (hvd's debug line "initialised: rank
#     R/2" for R = 0 and 1), the trainer's loss lines, and no WARNING from hvd (e.g. a placement
#     that disagrees with SLURM's variables).
#  4. Always (trap): cancels the jobs, stops slurmd, slurmctld and munged, removes --workdir and
#     munged's directory (kept with --keep, for debugging).
# Exit status: 0 all templates pass; 1 a failure (each named); 77 skipped.
set -uo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=slurm_env.sh
source "$(dirname "$SELF")/slurm_env.sh"
TEMPLATES="" TRAIN="" TRAIN_ARGS="" HVDRUN="" WORKDIR="" TIMEOUT=150 KEEP=0 INSIDE=0
ORIG_ARGS=("$@")
while (($#)); do
  case "$1" in
    --templates) TEMPLATES=$2; shift 2 ;;
    --train) TRAIN=$2; shift 2 ;;
    --train-args) TRAIN_ARGS=$2; shift 2 ;;
    --hvdrun) HVDRUN=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --inside) INSIDE=1; shift ;;
    *) echo "run_slurm_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n $TEMPLATES && -n $TRAIN && -n $HVDRUN && -n $WORKDIR ]] || {
  echo "run_slurm_test.sh: needs --templates, --train, --hvdrun and --workdir" >&2
  exit 2
}

if ((!INSIDE)); then
  [[ -x $TRAIN ]] || { echo "FAILED: the trainer '$TRAIN' is not built"; exit 1; }
  slurm_env_enter "$SELF" "${ORIG_ARGS[@]}"
fi

# ---- inside the namespaces: PID 1 is this script ----
slurm_env_start
cd "$WORKDIR/out" || fail "no $WORKDIR/out"   # the submit directory: the templates' checkpoints go here

# Submit every template.
export TRAIN_BIN=$TRAIN TRAIN_ARGS=$TRAIN_ARGS HVDRUN=$HVDRUN HVD_LOG_LEVEL=debug
# The templates add --checkpoint-dir and --checkpoint-every-steps, which only train_cnn takes.
[[ $(basename "$TRAIN") == train_cnn ]] || export CKPT_ARGS=''

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A JOB
for t in "$TEMPLATES"/*.sbatch; do
  name=$(basename "$t" .sbatch)
  id=$(timeout 20 sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
         --chdir="$WORKDIR/out" --output="$WORKDIR/out/$name.out" "$t") || fail "sbatch $t was refused"
  JOB[$name]=${id%%;*}
  echo "# submitted $name: job ${JOB[$name]}"
done
((${#JOB[@]} > 0)) || fail "no *.sbatch template in $TEMPLATES"

deadline=$(($(date +%s) + TIMEOUT))
declare -A INFO
while :; do
  pending=0
  for name in "${!JOB[@]}"; do
    [[ -n ${INFO[$name]:-} ]] && continue
    line=$(timeout 10 scontrol -o show job "${JOB[$name]}" 2>/dev/null)
    st=$(sed -nE 's/.*JobState=([A-Z_]+).*/\1/p' <<<"$line")
    case "$st" in
      PENDING | RUNNING | CONFIGURING | COMPLETING | "") pending=1 ;;
      *) INFO[$name]=$line ;;
    esac
  done
  ((pending)) || break
  if (($(date +%s) > deadline)); then
    for name in "${!JOB[@]}"; do
      [[ -n ${INFO[$name]:-} ]] || { echo "---- $name (job ${JOB[$name]}) output so far:"; cat "$WORKDIR/out/$name.out" 2>/dev/null; }
    done
    fail "jobs still running after $TIMEOUT s (cancelled)"
  fi
  sleep 1
done

failed=0
for name in $(printf '%s\n' "${!JOB[@]}" | sort); do
  out=$WORKDIR/out/$name.out
  echo "==== $name (job ${JOB[$name]}): $(grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+|RunTime=[0-9:]+' <<<"${INFO[$name]}" | tr '\n' ' ')"
  cat "$out" 2>/dev/null
  problems=()
  grep -q 'JobState=COMPLETED ' <<<"${INFO[$name]}" || problems+=("not COMPLETED")
  grep -q ' ExitCode=0:0 ' <<<"${INFO[$name]}" || problems+=("exit code not 0:0")
  [[ -f $out ]] || problems+=("no output file")
  for r in 0 1; do
    grep -q "initialised: rank $r/2, local $r/2" "$out" 2>/dev/null || problems+=("no rank $r of one world of 2 ranks")
  done
  grep -qE 'loss' "$out" 2>/dev/null || problems+=("no loss line from the trainer")
  if grep -E '\] WARNING ' "$out" >/dev/null 2>&1; then problems+=("hvd logged a WARNING"); fi
  if ((${#problems[@]})); then
    failed=1
    echo "---- $name FAILED: $(IFS=';'; echo "${problems[*]}")"
  else
    echo "---- $name PASSED"
  fi
done
((failed)) && fail "some templates failed (above)"
echo "PASSED: ${!JOB[*]}"
