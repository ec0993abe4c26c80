#!/usr/bin/env bash
# A real Slurm cluster on one machine, for tests: munged, slurmctld and N slurmd, each
# slurmd in a network namespace of its own (a "test host" with its own address on a
# bridge), so srun, the PMIx wire-up, Gloo and the control channel really cross hosts.
#
#   deploy/slurm/test-cluster.sh up   [--nodes N] [--dir DIR]   (N >= 2, default 2)
#   deploy/slurm/test-cluster.sh down [--dir DIR]
#   deploy/slurm/test-cluster.sh kill-host NAME [--dir DIR]     (kill -9 all in its netns)
#
# Why network namespaces: this Debian Slurm 22.05.8 build does run several slurmd on one
# host (checked: two NodeNames with NodeHostname=<this host> and Port=17001/17002, each
# started as `slurmd -N NAME`, both came up idle and `srun -N2 --mpi=pmix` ran on both),
# but they would share one IP address and loopback, so nothing would show that the
# workers bind Gloo to their own host's address and reach `baton run` over a real route.
# A namespace per test host, joined by veth pairs to a bridge, gives each its own
# address, and "losing a host" is killing everything in its namespace.
#
# Test hosts are bt-n0 .. bt-n<N-1> at 10.77.0.10+i on bridge btbr0 (10.77.0.1, the
# controller and the host that runs srun). Everything lives under DIR (default
# /tmp/baton-slurm-test): slurm.conf, munge key and socket, spool, state, logs. Use it
# with `export SLURM_CONF=DIR/slurm.conf`. Needs root (namespaces, daemons); `up` says why
# it cannot start and exits 77 when the machine cannot host it (not root, no netns,
# Slurm or munge missing). `down` is idempotent and removes everything `up` made.
set -euo pipefail

cmd=${1:-}
shift || true
nodes=2
dir=/tmp/baton-slurm-test
host_to_kill=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -*) echo "test-cluster: unknown option $1" >&2; exit 2 ;;
    *) host_to_kill=$1; shift ;;
  esac
done
bridge=btbr0
net=10.77.0
ctl_port=16817
slurmd_port=16818

skip() { echo "test-cluster: cannot start: $*" >&2; exit 77; }

check() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces and the Slurm daemons)"
  for t in munged slurmctld slurmd srun sbatch scontrol ip nsenter; do
    command -v "$t" >/dev/null || skip "$t is not installed (deploy/install-deps.sh --test)"
  done
  [[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ]] ||
    skip "Slurm's PMIx plugin is missing (slurm-wlm-basic-plugins)"
  [[ "$nodes" =~ ^[0-9]+$ && "$nodes" -ge 2 && "$nodes" -le 16 ]] ||
    { echo "test-cluster: --nodes $nodes: expected 2..16" >&2; exit 2; }
  ip netns add bt-probe 2>/dev/null || skip "cannot create a network namespace (no CAP_SYS_ADMIN?)"
  ip netns del bt-probe
}

write_conf() {
  local names=() i
  for ((i = 0; i < nodes; i++)); do names+=("bt-n$i"); done
  cat >"$dir/slurm.conf" <<CONF
# Written by deploy/slurm/test-cluster.sh: a test cluster on one machine.
ClusterName=baton-test
SlurmctldHost=$(hostname -s)($net.1)
SlurmctldPort=$ctl_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# Per host: Slurm's PMIx plugin makes its client directories under TmpFS, and hosts that
# shared one /tmp would collide on them (spmix_appdir_UID_JOB.STEP).
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=30
MessageTimeout=5
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName=DEFAULT CPUs=4 RealMemory=2000 State=UNKNOWN
CONF
  for ((i = 0; i < nodes; i++)); do
    echo "NodeName=bt-n$i NodeAddr=$net.$((10 + i)) NodeHostname=bt-n$i" >>"$dir/slurm.conf"
  done
  echo "PartitionName=test Nodes=$(IFS=,; echo "${names[*]}") Default=YES OverSubscribe=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
}

start_munge() {
  mkdir -p "$dir/munge"
  chmod 755 "$dir/munge" # munged wants its socket's directory reachable by everyone
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
}

start_network() {
  ip link add "$bridge" type bridge
  ip addr add "$net.1/24" dev "$bridge"
  ip link set "$bridge" up
  local i
  for ((i = 0; i < nodes; i++)); do
    ip netns add "bt-n$i"
    ip link add "btv${i}h" type veth peer name "btv$i"
    ip link set "btv${i}h" master "$bridge" up
    ip link set "btv$i" netns "bt-n$i"
    ip -n "bt-n$i" link set lo up
    ip -n "bt-n$i" addr add "$net.$((10 + i))/24" dev "btv$i"
    ip -n "bt-n$i" link set "btv$i" up
    ip -n "bt-n$i" route add default via "$net.1"
  done
}

wait_idle() {
  local t
  for ((t = 0; t < 60; t++)); do
    local idle
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [[ "$idle" -ge "$nodes" ]] && return 0
    sleep 0.5
  done
  echo "test-cluster: the nodes did not come up; sinfo says:" >&2
  sinfo -N >&2 || true
  tail -n 20 "$dir"/log/*.log >&2 || true
  return 1
}

up() {
  check
  down >/dev/null 2>&1 || true
  mkdir -p "$dir/state" "$dir/log" "$dir/spool"
  write_conf
  start_munge
  start_network
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -f "$SLURM_CONF"
  local i
  for ((i = 0; i < nodes; i++)); do
    mkdir -p "$dir/spool/bt-n$i" "$dir/tmp/bt-n$i"
    # nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroup tree slurmd
    # needs.
    nsenter --net="/var/run/netns/bt-n$i" slurmd -f "$SLURM_CONF" -N "bt-n$i"
  done
  wait_idle || { down; exit 1; }
  echo "test-cluster: up: $nodes test hosts (bt-n0..bt-n$((nodes - 1))); export SLURM_CONF=$SLURM_CONF"
}

kill_host() {
  [[ -n "$host_to_kill" ]] || { echo "test-cluster: kill-host NAME" >&2; exit 2; }
  local pids
  pids=$(ip netns pids "$host_to_kill" 2>/dev/null || true)
  [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
  echo "test-cluster: killed everything on $host_to_kill: ${pids//$'\n'/ }"
}

kill_pidfile() {
  [[ -f "$1" ]] || return 0
  local pid
  pid=$(cat "$1")
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true
}

down() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '/^bt-n[0-9]+/ {print $1}'); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  kill_pidfile "$dir/slurmctld.pid"
  kill_pidfile "$dir/munge/munged.pid"
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$dir"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  kill-host) kill_host ;;
  *) echo "usage: $0 up [--nodes N] [--dir DIR] | down [--dir DIR] | kill-host NAME" >&2; exit 2 ;;
esac
