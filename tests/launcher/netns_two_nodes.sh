#!/usr/bin/env bash
# tandemrun across two "machines" (network namespaces on one bridge, netns_lib.sh):
#   1. 2 nodes x 2 processes, a real gloo all-reduce over the veth: both nodes exit 0
#      and every rank sees the exact sum;
#   2. a rank failing on node 1 stops node 0's workers too, and both nodes report it;
#   3. the same all-reduce under mpirun, node 1 entered by a launch agent instead of ssh;
#   4. the job's MASTER_PORT (not tandemrun's store) is free on node 0: rank 0 serves it,
#      and the ranks of node 1 reach it at 10.77.0.1 while Tandem's store works.
#   5. with the same --job-secret-file on both nodes: the all-reduce, and no warning
#      (case 1, without one, warns on each node that the store lets anyone in);
#   6. with different secrets: node 1 is refused with a message saying so, node 0 logs
#      the refusal with node 1's address, and both exit 1.
# Usage: netns_two_nodes.sh BIN_DIR WORKER. Skips (exit 0, "SKIP: ...") without netns.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/netns_lib.sh"
BIN="$1"
WORKER="$2"
TANDEMRUN="$BIN/tandemrun"
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

netns_setup

# tandemrun on both nodes; node N's output in $NETNS_TMP/<tag>.N, exit code in .rc.N;
# FLAGS0 / FLAGS1 (arrays) add flags for node 0 / node 1; RDZV: --rdzv-timeout-s (default 60).
FLAGS0=()
FLAGS1=()
two_tandemruns() {
  local tag="$1"
  shift
  local port
  port="$(free_port_in 0)"
  for n in 0 1; do
    local -n extra="FLAGS$n"
    (in_ns "$n" timeout 120 "$TANDEMRUN" --nnodes 2 --node-rank "$n" --nproc-per-node 2 \
      --master-addr "$ADDR0" --master-port "$port" --rdzv-timeout-s "${RDZV:-60}" --grace-s 1 "${extra[@]}" -- "$@" \
      >"$NETNS_TMP/$tag.$n" 2>&1
     echo $? >"$NETNS_TMP/$tag.rc.$n") &
  done
  wait
}

# expect_exits RUN CODE WHAT: both nodes of two_tandemruns RUN exited CODE.
expect_exits() {
  local n rc
  for n in 0 1; do
    rc="$(cat "$NETNS_TMP/$1.rc.$n")"
    [ "$rc" = "$2" ] || { fail "$3: node $n exited $rc, expected $2"; cat "$NETNS_TMP/$1.$n"; }
  done
}
# expect_allreduce RUN WHAT: both nodes of RUN exited 0 and every rank printed the exact sum.
expect_allreduce() {
  expect_exits "$1" 0 "$2"
  local n r
  for n in 0 1; do
    for r in $((2 * n)) $((2 * n + 1)); do
      grep -qF "[$n:$r] allreduce ok sum=10 world=4 rank=$r backend=gloo" "$NETNS_TMP/$1.$n" ||
        fail "$2: rank $r did not report the exact sum"
    done
  done
}

# 1. all-reduce through tandemrun
two_tandemruns allreduce "$WORKER" --mode allreduce
expect_allreduce allreduce allreduce
for n in 0 1; do
  grep -q "no job secret (--job-secret-file or TANDEM_JOB_SECRET_FILE)" "$NETNS_TMP/allreduce.$n" ||
    fail "allreduce: node $n did not warn that the job has no secret"
done
[ "$FAILED" = 0 ] && echo "ok: 2 nodes x 2 processes all-reduce across namespaces"

# 2. a failure on node 1 ends the job on node 0
mkdir -p "$NETNS_TMP/pids"
two_tandemruns teardown "$WORKER" --pid-dir "$NETNS_TMP/pids" --mode pause --mode-for 3=exit:3:2
for n in 0 1; do
  rc="$(cat "$NETNS_TMP/teardown.rc.$n")"
  [ "$rc" = 1 ] || { fail "teardown: node $n exited $rc, expected 1"; cat "$NETNS_TMP/teardown.$n"; }
  grep -q "rank 3 (node 1, .*) exited with code 3" "$NETNS_TMP/teardown.$n" ||
    { fail "teardown: node $n did not report rank 3's failure"; cat "$NETNS_TMP/teardown.$n"; }
done
for f in "$NETNS_TMP"/pids/*.pid; do
  [ -e "$f" ] || continue
  pid="$(cat "$f")"
  # A zombie (state Z) is dead; only a running process is a survivor.
  if [ -e "/proc/$pid/stat" ] && [ "$(awk '{print $3}' "/proc/$pid/stat")" != Z ]; then
    fail "teardown: worker pid $pid ($(basename "$f")) outlived the job"
    kill -9 "$pid"
  fi
done
[ "$FAILED" = 0 ] && echo "ok: a failure on node 1 stopped both nodes"

# 3. mpirun with a launch agent that enters node 1's namespace
if command -v mpirun >/dev/null; then
  port="$(free_port_in 0)"
  mpirun_2x2 -x MASTER_ADDR="$ADDR0" -x MASTER_PORT="$port" timeout 120 "$WORKER" --mode allreduce:auto \
    >"$NETNS_TMP/mpirun.out" 2>&1
  rc=$?
  [ "$rc" = 0 ] || { fail "mpirun: exit $rc"; tail -30 "$NETNS_TMP/mpirun.out"; }
  for r in 0 1 2 3; do
    grep -qF "allreduce ok sum=10 world=4 rank=$r backend=mpi" "$NETNS_TMP/mpirun.out" ||
      fail "mpirun: rank $r did not report the exact sum"
  done
  [ "$FAILED" = 0 ] && echo "ok: mpirun 2 x 2 across namespaces through the launch agent"
else
  echo "SKIP (part 3): mpirun is not installed"
fi

# 4. rank 0 serves MASTER_PORT across the namespaces; every rank saw the same one
two_tandemruns master "$WORKER" --mode serve-master-port
expect_exits master 0 "master port"
grep -qE '^\[0:0\] master port [0-9]+ served ranks 1,2,3$' "$NETNS_TMP/master.0" ||
  { fail "master port: rank 0 did not serve ranks 1, 2 and 3"; cat "$NETNS_TMP/master.0"; }
[ "$FAILED" = 0 ] && echo "ok: rank 0 served MASTER_PORT to both nodes' ranks"

# 5. the same secret file on both nodes: authenticated, and no warning
umask 077
printf '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n' >"$NETNS_TMP/secret.a"
printf '60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752\n' >"$NETNS_TMP/secret.b"
FLAGS0=(--job-secret-file "$NETNS_TMP/secret.a")
FLAGS1=(--job-secret-file "$NETNS_TMP/secret.a")
two_tandemruns secret "$WORKER" --mode allreduce
expect_allreduce secret secret
for n in 0 1; do
  grep -q "no job secret" "$NETNS_TMP/secret.$n" && fail "secret: node $n warned of no secret though it had one"
done
[ "$FAILED" = 0 ] && echo "ok: 2 nodes with one --job-secret-file all-reduce, no warning"

# 6. different secrets: node 1 is refused, node 0 logs it with node 1's address
RDZV=5
FLAGS0=(--job-secret-file "$NETNS_TMP/secret.a")
FLAGS1=(--job-secret-file "$NETNS_TMP/secret.b")
two_tandemruns mismatch "$WORKER" --mode allreduce
expect_exits mismatch 1 mismatch
grep -q "the store refused this process's proof of the job secret" "$NETNS_TMP/mismatch.1" ||
  { fail "mismatch: node 1 did not say the secrets differ"; cat "$NETNS_TMP/mismatch.1"; }
grep -qF "refused connection from $ADDR1:" "$NETNS_TMP/mismatch.0" ||
  { fail "mismatch: node 0 did not log the refusal with node 1's address"; cat "$NETNS_TMP/mismatch.0"; }
[ "$FAILED" = 0 ] && echo "ok: a node with another secret is refused, and node 0 names its address"

if [ "$FAILED" != 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
echo "all checks passed"
