# shellcheck shell=bash
# A real SLURM (Debian slurm-wlm 22.05 + munge) on this machine, one node, for the `slurm` tests;
# sourced by run_slurm_test.sh and run_requeue_test.sh, which call, in order:
#
#   slurm_env_enter SCRIPT ARGS...   outside: skip (exit 77, the reason on stdout) unless root with
#                                    the tools, then re-exec SCRIPT --inside ARGS... in new PID,
#                                    mount and network namespaces; returns only inside
#   slurm_env_start                  inside: munged, slurmctld and slurmd up, the node idle
#
# Inside, the caller sets WORKDIR (removed first and at the end unless KEEP=1) and may set
# SLURM_CONF_EXTRA (lines appended to slurm.conf) and SLURM_AUTH_EXTRA (",opt=value" appended to
# AuthInfo) before slurm_env_start. The EXIT trap (slurm_env_stop) cancels every job, stops the
# daemons, kills whatever is left in the PID namespace and removes the directories.
#
# Why namespaces: every daemon and job process lives in them, and the kernel kills them all when
# the script (PID 1 there) ends, even if it is killed itself; slurmctld and slurmd listen only on
# the namespace's own loopback, so nothing clashes with, or reaches, a SLURM of the machine.

slurm_env_enter() {
  local self=$1
  shift
  skip() { echo "SKIPPED: $*"; exit 77; }
  [[ $(id -u) -eq 0 ]] || skip "a local SLURM needs root (daemons, munge, namespaces); run ctest -L slurm as root"
  local t
  for t in slurmctld slurmd sbatch scontrol scancel munged mpirun unshare runuser ip; do
    command -v "$t" >/dev/null ||
      skip "'$t' is not installed: scripts/install-deps installs slurm-wlm and munge (Debian), with openmpi-bin, util-linux and iproute2"
  done
  id munge >/dev/null 2>&1 || skip "there is no 'munge' user (the munge package creates it)"
  unshare --pid --fork --kill-child --mount-proc --net true 2>/dev/null ||
    skip "PID/network namespaces cannot be created here (unshare --pid --net failed)"
  exec unshare --pid --fork --kill-child --mount-proc --net "$self" --inside "$@"
}

fail() { echo "FAILED: $*"; exit 1; }

slurm_env_stop() {
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

slurm_env_start() {
  PIDS=()
  MUNGE_DIR=
  HOST=$(hostname -s)
  CONF=$WORKDIR/etc/slurm.conf
  export SLURM_CONF=$CONF
  trap slurm_env_stop EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT

  ip link set lo up
  # A private IPv4 address besides loopback: SLURM resolves with AI_ADDRCONFIG, which returns no
  # IPv4 address at all (not even 127.0.0.1) while only loopback has one. Nothing routes anywhere.
  ip link add hvd0 type veth peer name hvd1 && ip addr add 10.213.255.1/24 dev hvd0 &&
    ip link set hvd0 up && ip link set hvd1 up || fail "cannot add an interface in the test's network namespace"

  rm -rf "$WORKDIR"
  mkdir -p "$WORKDIR"/{etc,state,spool,log,out}
  chmod 755 "$WORKDIR"

  # munge: a fresh key and a socket directory owned by the munge user. munged runs as that user,
  # so its directory is not under WORKDIR: a build tree inside a clone in a private directory (a
  # `mktemp -d` folder is mode 700) cannot be traversed by it (munged never creates its socket).
  MUNGE_DIR=$(mktemp -d /tmp/hvd-slurm-munge.XXXXXX)
  head -c 1024 /dev/urandom >"$MUNGE_DIR/munge.key"
  chown -R munge:munge "$MUNGE_DIR"
  chmod 755 "$MUNGE_DIR" # as /run/munge: munged wants the socket directory searchable by all
  chmod 400 "$MUNGE_DIR/munge.key"
  local sock=$MUNGE_DIR/munge.socket
  runuser -u munge -- munged --foreground --socket="$sock" --key-file="$MUNGE_DIR/munge.key" \
    --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" >"$MUNGE_DIR/munged.stdout" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
  [[ -S $sock ]] || { cat "$MUNGE_DIR/munged.log" 2>/dev/null; fail "munged did not create its socket $sock within 5 s"; }

  # Eight "GPUs" (three jobs of two ranks with --gpus-per-task=1 side by side): SLURM's gpu GRES
  # needs a character device per GPU; these are copies of /dev/null (nothing opens them: no
  # task/cgroup plugin), enough for --gpus-per-task=1 to be scheduled. Where mknod is refused,
  # four existing devices stand in.
  mkdir -p "$WORKDIR/dev"
  local ngpus=8 gpus="$WORKDIR/dev/gpu[0-7]" g
  for g in 0 1 2 3 4 5 6 7; do
    mknod "$WORKDIR/dev/gpu$g" c 1 3 2>/dev/null ||
      { ngpus=4 gpus=/dev/null,/dev/zero,/dev/full,/dev/urandom; }
  done
  cat >"$WORKDIR/etc/gres.conf" <<GRES
NodeName=$HOST Name=gpu File=$gpus
GRES

  cat >"$CONF" <<CONF
# Generated by tests/slurm/slurm_env.sh: one node on loopback, for hvd's slurm tests.
ClusterName=hvdtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$sock${SLURM_AUTH_EXTRA:-}
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
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=8 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=2000 Gres=gpu:$ngpus State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
${SLURM_CONF_EXTRA:-}
CONF

  slurmctld -D -f "$CONF" >"$WORKDIR/log/slurmctld.stdout" 2>&1 &
  PIDS+=($!)
  slurmd -D -f "$CONF" -N "$HOST" >"$WORKDIR/log/slurmd.stdout" 2>&1 &
  PIDS+=($!)

  local state=""
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
}

# job_field JOB FIELD: FIELD's value in `scontrol show job JOB` (empty when the job is unknown).
job_field() {
  timeout 10 scontrol -o show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -n 1 | sed -E "s/^ ?$2=//"
}
