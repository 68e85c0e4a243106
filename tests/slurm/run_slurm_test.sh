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
#  2. Re-runs itself inside new PID, mount and network namespaces (unshare --kill-child): every
#     daemon and job process lives in them, and the kernel kills them all when this script ends,
#     even if it is killed itself; slurmctld and slurmd listen only on the namespace's own
#     loopback, so nothing clashes with, or reaches, a SLURM of the machine.
#  3. Writes a munge key (new, 1 KiB random) in munged's socket directory, owned by the munge user
#     (its own /tmp/hvd-slurm-munge.* directory, which that user can reach wherever the build tree
#     is), and, under --workdir (removed first and at the end), slurm.conf for one node named after this
#     host on 127.0.0.1 with 8 CPUs and 4 GPUs declared (SlurmdParameters=config_overrides lets it
#     declare more than the machine has; the GPUs are a GRES count without device files, so the
#     templates' --gpus-per-task=1 is accepted), state, spool and log directories.
#  4. Starts munged (as the munge user), slurmctld and slurmd in the foreground as background
#     jobs of this script, and waits (bounded) until the node is idle.
#  5. Submits every *.sbatch template with `sbatch --nodes=1 --ntasks-per-node=2 --cpus-per-task=1`
#     (flags override the templates' #SBATCH lines) and TRAIN_BIN/TRAIN_ARGS/HVDRUN in the
#     environment, waits for all of them (bounded by --timeout), and checks each: JobState
#     COMPLETED, ExitCode 0:0, both ranks in one world of 2 (hvd's debug line "initialised: rank
#     R/2" for R = 0 and 1), the trainer's loss lines, and no WARNING from hvd (e.g. a placement
#     that disagrees with SLURM's variables).
#  6. Always (trap): cancels the jobs, stops slurmd, slurmctld and munged, removes --workdir and
#     munged's directory (kept with --keep, for debugging).
# Exit status: 0 all templates pass; 1 a failure (each named); 77 skipped.
set -uo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
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
  skip() { echo "SKIPPED: $*"; exit 77; }
  [[ $(id -u) -eq 0 ]] || skip "a local SLURM needs root (daemons, munge, namespaces); run ctest -L slurm as root"
  for t in slurmctld slurmd sbatch scontrol munged mpirun unshare runuser ip; do
    command -v "$t" >/dev/null ||
      skip "'$t' is not installed: scripts/install-deps installs slurm-wlm and munge (Debian), with openmpi-bin, util-linux and iproute2"
  done
  id munge >/dev/null 2>&1 || skip "there is no 'munge' user (the munge package creates it)"
  [[ -x $TRAIN ]] || { echo "FAILED: the trainer '$TRAIN' is not built"; exit 1; }
  unshare --pid --fork --kill-child --mount-proc --net true 2>/dev/null ||
    skip "PID/network namespaces cannot be created here (unshare --pid --net failed)"
  exec unshare --pid --fork --kill-child --mount-proc --net "$SELF" --inside "${ORIG_ARGS[@]}"
fi

# ---- inside the namespaces: PID 1 is this script ----
ip link set lo up
# A private IPv4 address besides loopback: SLURM resolves with AI_ADDRCONFIG, which returns no
# IPv4 address at all (not even 127.0.0.1) while only loopback has one. Nothing routes anywhere.
ip link add hvd0 type veth peer name hvd1 && ip addr add 10.213.255.1/24 dev hvd0 &&
  ip link set hvd0 up && ip link set hvd1 up || { echo "FAILED: cannot add an interface in the test's network namespace"; exit 1; }
HOST=$(hostname -s)
CONF=$WORKDIR/etc/slurm.conf
export SLURM_CONF=$CONF
PIDS=()
MUNGE_DIR=

stop_all() {
  local rc=$?
  set +e
  if [[ -f $CONF ]] && ((${#PIDS[@]})); then timeout 10 scancel --quiet --user=root >/dev/null 2>&1; sleep 0.5; fi
  # Children in reverse order of start: slurmd, slurmctld, munged; TERM then KILL.
  local i p
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.3
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # Anything else in this PID namespace (job steps): the kernel ends it when PID 1 exits; do it now.
  for p in $(ls /proc | grep -E '^[0-9]+$'); do
    ((p != 1 && p != $$ && p != BASHPID)) && kill -KILL "$p" 2>/dev/null
  done
  if ((rc != 0)) && [[ -d $WORKDIR/log ]]; then
    for f in "$WORKDIR"/log/*.log; do echo "---- $f (last 30 lines)"; tail -n 30 "$f"; done
  fi
  ((KEEP)) || rm -rf "$WORKDIR" "$MUNGE_DIR"
  exit "$rc"
}
trap stop_all EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
fail() { echo "FAILED: $*"; exit 1; }

rm -rf "$WORKDIR"
mkdir -p "$WORKDIR"/{etc,state,spool,log,out}
chmod 755 "$WORKDIR"

# munge: a fresh key and a socket directory owned by the munge user. munged runs as that user, so
# its directory is not under --workdir: a build tree inside a clone in a private directory (a
# `mktemp -d` folder is mode 700) cannot be traversed by it (munged then never creates its socket).
MUNGE_DIR=$(mktemp -d /tmp/hvd-slurm-munge.XXXXXX)
head -c 1024 /dev/urandom >"$MUNGE_DIR/munge.key"
chown -R munge:munge "$MUNGE_DIR"
chmod 755 "$MUNGE_DIR"   # as /run/munge: munged wants the socket directory searchable by all
chmod 400 "$MUNGE_DIR/munge.key"
SOCK=$MUNGE_DIR/munge.socket
runuser -u munge -- munged --foreground --socket="$SOCK" --key-file="$MUNGE_DIR/munge.key" \
  --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
  --seed-file="$MUNGE_DIR/munged.seed" >"$MUNGE_DIR/munged.stdout" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { cat "$MUNGE_DIR/munged.log" 2>/dev/null; fail "munged did not create its socket $SOCK within 5 s"; }

cat >"$CONF" <<EOF
# Generated by $SELF: one node on loopback, for hvd's slurm test.
ClusterName=hvdtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$WORKDIR/state
SlurmdSpoolDir=$WORKDIR/spool
SlurmctldPidFile=$WORKDIR/slurmctld.pid
SlurmdPidFile=$WORKDIR/slurmd.pid
SlurmctldLogFile=$WORKDIR/log/slurmctld.log
SlurmdLogFile=$WORKDIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=600
GresTypes=gpu
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=8 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=2000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
# Four "GPUs": SLURM's gpu GRES needs a character device per GPU; these are copies of /dev/null
# (nothing opens them: no task/cgroup plugin), enough for --gpus-per-task=1 to be scheduled.
mkdir -p "$WORKDIR/dev"
gpus="$WORKDIR/dev/gpu[0-3]"
for g in 0 1 2 3; do mknod "$WORKDIR/dev/gpu$g" c 1 3 2>/dev/null || gpus=/dev/null,/dev/zero,/dev/full,/dev/urandom; done
cat >"$WORKDIR/etc/gres.conf" <<EOF
NodeName=$HOST Name=gpu File=$gpus
EOF

slurmctld -D -f "$CONF" >"$WORKDIR/log/slurmctld.stdout" 2>&1 &
PIDS+=($!)
slurmd -D -f "$CONF" -N "$HOST" >"$WORKDIR/log/slurmd.stdout" 2>&1 &
PIDS+=($!)

state=""
for _ in $(seq 60); do
  state=$(timeout 10 sinfo -h -n "$HOST" -o %T 2>/dev/null)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || {
  cat "$WORKDIR"/log/*.stdout
  fail "the node $HOST is '${state:-unknown}', not idle, 30 s after starting slurmctld and slurmd"
}
echo "# SLURM up: node $HOST idle ($(timeout 10 sinfo -h -o '%c CPUs, gres %G')); srun --mpi=list: $(timeout 10 srun --mpi=list 2>&1 | tr '\n' ' ')"

# Submit every template.
export TRAIN_BIN=$TRAIN TRAIN_ARGS=$TRAIN_ARGS HVDRUN=$HVDRUN HVD_LOG_LEVEL=debug
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
