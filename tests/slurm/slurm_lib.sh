# A Slurm test cluster on one host (sourced by the slurm tests): one munged, one
# slurmctld and two slurmd, each slurmd in one of netns_lib.sh's two network namespaces,
# so that "node0" (10.77.0.1, which also runs slurmctld) and "node1" (10.77.0.2) are two
# machines to Slurm. Everything lives in a temporary directory: slurm.conf (SLURM_CONF
# points there), munged's socket, key copy, pid and log, each daemon's state, spool, pid
# and log. Nothing on the machine is changed and no daemon of the machine's is used.
# Every daemon is started in the foreground (-D, -F) as a child of this shell, so the
# pid the trap kills is the pid that was started.
#
#   slurm_start     starts the cluster and waits (bounded) for both nodes to be idle;
#                   prints "SKIP: ..." and exits 0 where namespaces or a daemon cannot start
#   slurm_test_begin BIN_DIR PROGRAM...   a test's start: BIN (absolute), then a skip
#                   unless each PROGRAM is built there, then slurm_start; D is the
#                   cluster's directory (for the test's files too)
#   on_ctl CMD...   runs a Slurm client command (sbatch, srun, sinfo, ...) on node0,
#                   where the controller's address is reachable
#   slurm_fail MSG / slurm_done   a failed check (the test goes on), the final verdict
#   same_params TAG REF.json GOT.json   GOT must be a 4-rank run with REF's param_checksum
#
# Without cgroups: proctrack/linuxproc (a step's processes are found by parent pid),
# task/none, select/cons_tres. SlurmdParameters=config_overrides lets each node claim
# 2 CPUs whatever the host has. KillOnBadExit=1: a task that dies ends its step.
# cred_expire=20 (default 120): a requeued job waits that long before it may start again,
# and a step must launch within it. sched_interval=2 (default 60): the main scheduler's
# periodic pass, which is what starts a job whose begin time has passed.
#
# Node names resolve as on a real cluster: the test runs in a mount namespace of its own
# (it re-executes itself under `unshare --mount` when sourced), where a private copy of
# /etc/hosts that adds node0 and node1 is bound over the machine's; the machine's file is
# never written. The namespace dies with the test, and with it the network namespaces
# it created.
if [ -z "${TANDEM_SLURM_MOUNT_NS:-}" ]; then
  command -v unshare >/dev/null || { echo "SKIP: unshare (util-linux) is not installed"; exit 0; }
  if ! unshare --mount --propagation private true 2>/dev/null; then
    echo "SKIP: a mount namespace of its own is not permitted here: $(unshare --mount true 2>&1)"
    exit 0
  fi
  TANDEM_SLURM_MOUNT_NS=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../launcher/netns_lib.sh"

SLURM_DIR="$NETNS_TMP/slurm"
SLURM_PIDS=()

# The processes of this cluster that outlived their daemons: slurmd hands each step to a
# slurmstepd that is not its child, and every process of a job inherits this cluster's own
# SLURM_CONF (a path in this test's temporary directory), so that variable names them.
# Bash builtins only: a tr or grep started here would carry that SLURM_CONF too.
slurm_leftovers() {
  local p vars
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" != $$ ] && [ "${p#/proc/}" != "$BASHPID" ] || continue
    mapfile -d '' vars 2>/dev/null <"$p/environ" || continue
    [[ " ${vars[*]} " == *" SLURM_CONF=$SLURM_DIR/slurm.conf "* ]] && echo "${p#/proc/}"
  done
}

slurm_cleanup() {
  local pid
  # Jobs first, while slurmd is there to end their steps.
  if [ -n "${SLURM_CONF:-}" ] && [ ${#SLURM_PIDS[@]} -gt 1 ]; then
    on_ctl timeout 20 scancel --quiet --user="$(id -un)" 2>/dev/null
    poll_until 30 slurm_queue_empty
  fi
  for pid in "${SLURM_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  # A daemon that ignores TERM past its deadline is killed; every one is reaped.
  for pid in "${SLURM_PIDS[@]}"; do
    timeout 20 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for pid in $(slurm_leftovers); do
    echo "teardown: killing pid $pid, left by the test cluster: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")"
    kill -KILL "$pid" 2>/dev/null
  done
  netns_cleanup
}
trap slurm_cleanup EXIT

slurm_fail_start() {  # WHAT LOG
  echo "SKIP: $1 could not start here; the end of its log ($2):"
  tail -15 "$2" 2>/dev/null
  exit 0
}

# Runs CMD in node N's network namespace. Unlike `ip netns exec`, nsenter keeps the
# host's /sys mounts (slurmd needs /sys/fs/cgroup even with proctrack/linuxproc) and
# does not fork.
on_node() {
  local ns
  ns="$(ns_name "$1")" || return 2
  shift
  nsenter --net="/run/netns/$ns" "$@"
}
on_ctl() { on_node 0 "$@"; }

# start_daemon N LOG CMD...: CMD in the background on node N, its stderr to LOG. The `&`
# is on nsenter itself (never on a function, whose subshell would get the pid), and
# nsenter execs CMD, so the recorded pid is the daemon's.
start_daemon() {
  local ns log="$2"
  ns="$(ns_name "$1")" || return 2
  shift 2
  nsenter --net="/run/netns/$ns" "$@" 2>>"$log" &
  SLURM_PIDS+=($!)
}

# Polls CMD (every 0.2 s) until it succeeds or SECONDS pass; returns 1 at the deadline.
poll_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

slurm_test_begin() {
  [ -n "${1:-}" ] && BIN="$(cd "$1" 2>/dev/null && pwd)" || { echo "usage: $0 BIN_DIR: '${1:-}' is no directory" >&2; exit 2; }
  shift
  local p
  for p in "$@"; do [ -x "$BIN/$p" ] || netns_skip "$p is not built in $BIN"; done
  slurm_start
  D="$SLURM_DIR"
}

slurm_queue_empty() { [ -z "$(on_ctl timeout 20 squeue -h 2>&1)" ]; }

slurm_nodes_idle() {
  [ "$(on_ctl timeout 20 sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ')" = "node0 idle node1 idle " ]
}

slurm_start() {
  for c in slurmctld slurmd sinfo sbatch srun scontrol munged nsenter; do
    command -v "$c" >/dev/null || netns_skip "$c is not installed (scripts/setup-deps installs slurmctld, slurmd, slurm-client and munge)"
  done
  [ -r /etc/munge/munge.key ] || netns_skip "/etc/munge/munge.key is missing or unreadable (the munge package creates it)"
  netns_setup
  local d="$SLURM_DIR" host
  mkdir -p "$d"
  { cat /etc/hosts; printf '%s node0\n%s node1\n' "$ADDR0" "$ADDR1"; } >"$d/hosts"
  mount --bind "$d/hosts" /etc/hosts 2>"$d/mount.err" ||
    netns_skip "cannot bind a private /etc/hosts in this mount namespace: $(cat "$d/mount.err")"
  [ "$(getent hosts node1 | cut -d' ' -f1)" = "$ADDR1" ] || netns_skip "node1 does not resolve through the private /etc/hosts"
  host="$(hostname -s)"
  mkdir -p "$d/state" "$d/node0/spool" "$d/node0/tmp" "$d/node1/spool" "$d/node1/tmp"
  # munged: the package's key, copied so that it is owned by the user running the test.
  install -m 0400 /etc/munge/munge.key "$d/munge.key"
  munged -F --force --socket="$d/munge.socket" --key-file="$d/munge.key" --pid-file="$d/munged.pid" \
    --log-file="$d/munged.log" --seed-file="$d/munged.seed" 2>>"$d/munged.log" &
  SLURM_PIDS+=($!)
  poll_until 20 test -S "$d/munge.socket" || slurm_fail_start munged "$d/munged.log"

  local ctld_port node_port0 node_port1
  ctld_port="$(free_port_in 0)"
  node_port0="$(free_port_in 0)"
  node_port1="$(free_port_in 1)"
  cat >"$d/slurm.conf" <<CONF
ClusterName=tandemtest
SlurmctldHost=$host($ADDR0)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.socket,cred_expire=20
StateSaveLocation=$d/state
SlurmctldPidFile=$d/slurmctld.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdSpoolDir=$d/%n/spool
SlurmdPidFile=$d/%n/slurmd.pid
SlurmdLogFile=$d/%n/slurmd.log
TmpFS=$d/%n/tmp
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
KillOnBadExit=1
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=10
NodeName=node0 NodeAddr=$ADDR0 Port=$node_port0 CPUs=2 State=UNKNOWN
NodeName=node1 NodeAddr=$ADDR1 Port=$node_port1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=node0,node1 Default=YES MaxTime=30 State=UP
CONF
  export SLURM_CONF="$d/slurm.conf"
  # -i: ignore any state (there is none: a fresh directory).
  start_daemon 0 "$d/slurmctld.log" slurmctld -D -i
  start_daemon 0 "$d/node0/slurmd.log" slurmd -D -N node0
  start_daemon 1 "$d/node1/slurmd.log" slurmd -D -N node1
  if ! poll_until 60 slurm_nodes_idle; then
    echo "SKIP: the test cluster's nodes were not idle within 60 s: sinfo says"
    on_ctl sinfo -N 2>&1
    for log in "$d/slurmctld.log" "$d/node0/slurmd.log" "$d/node1/slurmd.log"; do
      echo "--- $log"; tail -10 "$log"
    done
    exit 0
  fi
}

SLURM_FAILED=0
slurm_fail() { echo "FAIL: $*"; SLURM_FAILED=1; }
slurm_done() {
  if [ "$SLURM_FAILED" != 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
  echo "all checks passed"
}

summary_field() {  # FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$1" "$2" 2>/dev/null
}

same_params() {  # TAG REF.json GOT.json
  local ref got
  ref="$(summary_field "$2" param_checksum)"
  got="$(summary_field "$3" param_checksum)"
  if [ "$(summary_field "$3" world_size)" != 4 ] || [ "$(summary_field "$3" replicas_identical)" != True ]; then
    slurm_fail "$1: the summary $3 is missing, or not of 4 identical replicas"
  elif [ -z "$ref" ] || [ "$ref" = None ] || [ "$got" != "$ref" ]; then
    slurm_fail "$1: param_checksum $got differs from the reference's $ref"
  else
    echo "ok: $1 ends with the reference's parameters ($got)"
  fi
}
