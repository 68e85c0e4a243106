#!/usr/bin/env bash
# One `cluster` test: builds a simulated cluster (cluster/sim/hvd-sim), runs one job on it, checks
# the job's exit status (and optionally its output), and removes the cluster whatever happens.
#
#   run_sim_test.sh --sim PATH --name NAME --subnet S --nodes N [--rate R] [--timeout SECONDS]
#                   [--expect REGEX]... [--hvdrun PATH]
#                   [--link-down-on REGEX --link-down-node I --exit-within SECONDS] -- JOB-ARGS...
#
# Without --hvdrun the job is `hvd-sim mpirun JOB-ARGS` (Open MPI with the simulator's agent,
# interfaces and --bind-to none). With --hvdrun it is
#   hvdrun --network-interface 10.213.S.0/24 --mpi-args '--mca plm_rsh_agent AGENT --mca pml ob1
#          --mca btl self,vader,tcp' JOB-ARGS
# i.e. hvd's own launcher reaching the simulated nodes with -H in JOB-ARGS.
# Each --expect REGEX must match a line of the job's output (grep -E).
# With --link-down-on, the moment a line of the job's output matches REGEX the link of node I goes
# down (`ip link set NAME-vI down`: the bridge side of that node's only interface, so nothing
# reaches it or leaves it any more); the job must then end with a non-zero status within
# --exit-within seconds (default 30), and the time is printed.
#
# Exit status: 0 pass; 1 fail (the job failed, timed out, or an expected line is missing);
# 77 skipped (not root, or no ip/tc/unshare, or network namespaces cannot be created here), with
# the reason on stdout. The job runs under `timeout` (--timeout, default 120 s) so the cleanup runs
# before ctest's own TIMEOUT would kill this script.
set -uo pipefail

SIM="" NAME="" SUBNET="" NODES="" RATE=2gbit TIMEOUT=120 HVDRUN="" LINK_RE="" LINK_NODE="" WITHIN=30
EXPECT=()
while (($#)); do
  case "$1" in
    --sim) SIM=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    --subnet) SUBNET=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --expect) EXPECT+=("$2"); shift 2 ;;
    --hvdrun) HVDRUN=$2; shift 2 ;;
    --link-down-on) LINK_RE=$2; shift 2 ;;
    --link-down-node) LINK_NODE=$2; shift 2 ;;
    --exit-within) WITHIN=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run_sim_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n $SIM && -n $NAME && -n $SUBNET && -n $NODES && $# -gt 0 ]] || {
  echo "run_sim_test.sh: needs --sim, --name, --subnet, --nodes and a job after --" >&2
  exit 2
}

skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "the cluster simulator needs root (network namespaces, a bridge, tc); run ctest -L cluster as root"
for t in ip tc unshare timeout; do
  command -v "$t" >/dev/null || skip "'$t' is not installed (packages iproute2, util-linux, coreutils)"
done
probe=$NAME-probe$$
if ! ip netns add "$probe" 2>/dev/null; then
  skip "network namespaces cannot be created here (ip netns add failed: no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
fi
ip netns del "$probe" 2>/dev/null

LOG=$(mktemp "/tmp/hvd-cluster-test-$NAME.XXXXXX")
cleanup() {
  "$SIM" down --name "$NAME" >/dev/null 2>&1 || echo "run_sim_test.sh: removing the simulated cluster '$NAME' failed" >&2
  rm -f "$LOG"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

"$SIM" up --replace --name "$NAME" --subnet "$SUBNET" --nodes "$NODES" --rate "$RATE" || {
  echo "FAILED: could not build the simulated cluster"
  exit 1
}

if [[ -n $HVDRUN ]]; then
  DIR=/tmp/hvd-sim-$NAME
  job=("$HVDRUN" --network-interface "10.213.$SUBNET.0/24"
       --mpi-args "--mca plm_rsh_agent $DIR/rsh-agent --mca pml ob1 --mca btl self,vader,tcp" "$@")
else
  job=("$SIM" mpirun --name "$NAME" "$@")
fi
echo "+ ${job[*]}"
start=$(date +%s)
if [[ -n $LINK_RE ]]; then
  timeout -k 10 "$TIMEOUT" "${job[@]}" >"$LOG" 2>&1 &
  pid=$!
  down_ns=""
  while kill -0 "$pid" 2>/dev/null; do
    if grep -Eq -- "$LINK_RE" "$LOG"; then
      ip link set "$NAME-v$LINK_NODE" down
      down_ns=$(date +%s%N)
      echo "# $(date -u +%T.%N | cut -c1-12) link of node$LINK_NODE down"
      break
    fi
    sleep 0.05
  done
  wait "$pid"
  rc=$?
  end_ns=$(date +%s%N)
  cat "$LOG"
  [[ -n $down_ns ]] || { echo "FAILED: the job ended (status $rc) before printing a line matching '$LINK_RE'"; exit 1; }
  ms=$(( (end_ns - down_ns) / 1000000 ))
  echo "# job exit status $rc, $((ms / 1000)).$((ms % 1000 / 100)) s after the link went down"
  ((rc != 0)) || { echo "FAILED: the job exited 0 after losing a node"; exit 1; }
  ((rc != 124 && rc != 137)) || { echo "FAILED: the job hung after the link went down (killed after $TIMEOUT s)"; exit 1; }
  ((ms <= WITHIN * 1000)) || { echo "FAILED: the job took more than $WITHIN s to end after the link went down"; exit 1; }
  for re in "${EXPECT[@]}"; do
    grep -Eq -- "$re" "$LOG" || { echo "FAILED: no line of the job's output matches '$re'"; exit 1; }
  done
  echo "PASSED"
  exit 0
fi
start=$(date +%s)
timeout -k 10 "$TIMEOUT" "${job[@]}" >"$LOG" 2>&1
rc=$?
cat "$LOG"
echo "# job exit status $rc after $(($(date +%s) - start)) s"
if ((rc == 124 || rc == 137)); then
  echo "FAILED: the job did not finish within $TIMEOUT s (killed; the cluster is removed)"
  exit 1
fi
((rc == 0)) || { echo "FAILED: the job exited with status $rc"; exit 1; }
for re in "${EXPECT[@]}"; do
  grep -Eq -- "$re" "$LOG" || { echo "FAILED: no line of the job's output matches '$re'"; exit 1; }
done
echo "PASSED"
