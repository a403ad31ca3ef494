#!/usr/bin/env bash
# Network faults between two "machines" (network namespaces on one bridge, netns_lib.sh)
# in the middle of a 2 x 2 DDP job over gloo, node 0 hosting the store:
#   1. the link goes down: node 0's ranks name node 1 as unreachable, node 1 says the
#      store is unreachable and at which address; both nodes end (bounded by this
#      script's timeouts), no process is left, every checkpoint still verifies;
#   2. the same under --max-restarts 1, the link coming back once node 0 has seen the
#      failure: node 1 rejoins (reconnecting if it lost the store), the job resumes from its last checkpoint and ends with
#      the same parameters as an uninterrupted run.
# The cut takes down both nodes' links, as a cut cable between two machines would; it cuts
# node 1 off from the store's node, so case 1 shows both messages: "node 1 unreachable"
# (seen from node 0) and "store unreachable" (from node 1).
# Usage: netns_link_faults.sh BIN_DIR. Skips (exit 0, "SKIP: ...") without netns.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/netns_lib.sh"
BIN="$1"
TANDEMRUN="$BIN/tandemrun"
TRAIN="$BIN/tandem-train"
CKPT="$BIN/tandem-ckpt"
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

[ -x "$TRAIN" ] || netns_skip "tandem-train is not built in $BIN"
netns_setup
export TANDEM_HEARTBEAT_MS=250
JOB=(--mode ddp --backend gloo --data synthetic --synthetic-train 4096 --synthetic-test 512 --model mlp --hidden 64
     --batch-size 16 --lr 0.02 --no-progress --threads 1 --epochs 1000 --collective-timeout-s 5 --save-every 20
     --seed 3)

# start TAG LAUNCHER_FLAGS... -- TRAIN_FLAGS...: both nodes' tandemrun in the background;
# node N's output in $NETNS_TMP/TAG.N, its exit code in TAG.rc.N once it ends.
start() {
  local tag="$1"
  shift
  local lflags=()
  while [ "$1" != "--" ]; do lflags+=("$1"); shift; done
  shift
  local port
  port="$(free_port_in 0)"
  for n in 0 1; do
    (in_ns "$n" timeout 240 "$TANDEMRUN" --nnodes 2 --node-rank "$n" --nproc-per-node 2 --master-addr "$ADDR0" \
      --master-port "$port" --rdzv-timeout-s 60 --grace-s 1 --log-dir "$NETNS_TMP/$tag-logs$n" "${lflags[@]}" \
      -- "$TRAIN" "${JOB[@]}" \
      --checkpoint-dir "$NETNS_TMP/$tag-ck" "$@" >"$NETNS_TMP/$tag.$n" 2>&1
     echo $? >"$NETNS_TMP/$tag.rc.$n") &
  done
}

# until_true SECONDS CMD...: polls CMD every 50 ms, for at most SECONDS; false if it never held.
until_true() {
  local limit=$(( $1 * 20 )); shift
  for _ in $(seq 1 "$limit"); do "$@" && return 0; sleep 0.05; done
  return 1
}
have_checkpoint() { compgen -G "$1/step-*" >/dev/null; }
link() { link_node 1 "$1"; link_node 0 "$1"; }
expect_in() {  # FILE TEXT
  grep -qF -- "$2" "$1" && echo "ok: '$2'" || { fail "$(basename "$1") lacks '$2'"; tail -25 "$1"; }
}
no_survivors() {
  if pgrep -f -- "$NETNS_TMP/$1-ck" >/dev/null; then
    fail "$1: processes left behind: $(pgrep -af -- "$NETNS_TMP/$1-ck")"
    pkill -9 -f -- "$NETNS_TMP/$1-ck"
  else
    echo "ok: no process of $1 left"
  fi
}
checkpoints_verify() {
  local n=0
  for ck in "$NETNS_TMP/$1-ck"/step-*; do
    [ -d "$ck" ] || continue
    n=$((n + 1))
    "$CKPT" verify "$ck" >/dev/null 2>&1 || fail "$1: checkpoint $ck does not verify"
  done
  [ "$n" -gt 0 ] && echo "ok: $n checkpoint(s) of $1 verify" || fail "$1: no checkpoint"
}

# 1. The link goes down for good.
start down -- --max-steps 1000000
until_true 60 have_checkpoint "$NETNS_TMP/down-ck" || fail "down: no checkpoint appeared"
link down
t0=$SECONDS
wait
echo "(both nodes ended $((SECONDS - t0)) s after the link went down)"  # information only
link up
for n in 0 1; do
  rc="$(cat "$NETNS_TMP/down.rc.$n")"
  [ "$rc" = 1 ] || { fail "down: node $n exited $rc, expected 1"; tail -20 "$NETNS_TMP/down.$n"; }
done
expect_in "$NETNS_TMP/down.0" "ranks 2, 3 on node 1 are unreachable: node 1 has not been heard from for"
expect_in "$NETNS_TMP/down.1" "the store is unreachable: store at $ADDR0:"
expect_in "$NETNS_TMP/down.1" "node 1 lost the job's store at $ADDR0:"
no_survivors down
checkpoints_verify down

# 2. Down, then back: the restart resumes and ends where an uninterrupted run does.
start ref -- --max-steps 800 --summary-json "$NETNS_TMP/ref.json"
wait
for n in 0 1; do [ "$(cat "$NETNS_TMP/ref.rc.$n")" = 0 ] || { fail "ref: node $n failed"; tail -20 "$NETNS_TMP/ref.$n"; }; done
start back --max-restarts 1 -- --max-steps 800 --resume auto --summary-json "$NETNS_TMP/back.json"
until_true 60 have_checkpoint "$NETNS_TMP/back-ck" || fail "back: no checkpoint appeared"
link down
until_true 120 grep -qF "attempt 0 failed" "$NETNS_TMP/back.0" || fail "back: node 0 never saw attempt 0 fail"
link up
wait
for n in 0 1; do
  rc="$(cat "$NETNS_TMP/back.rc.$n")"
  [ "$rc" = 0 ] || { fail "back: node $n exited $rc, expected 0"; tail -30 "$NETNS_TMP/back.$n"; }
done
# Node 1 restarts either way: through a reconnect if it noticed the lost store before the
# link came back, or directly if it could still read the failure.
expect_in "$NETNS_TMP/back.1" "restarting the whole job: attempt 1"
expect_in "$NETNS_TMP/back.0" "checkpoint: loaded"
python3 - "$NETNS_TMP/ref.json" "$NETNS_TMP/back.json" <<'EOF' || FAILED=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
if a["param_checksum"] != b["param_checksum"]:
    sys.exit(f"FAIL: resumed job ends at {b['param_checksum']}, uninterrupted at {a['param_checksum']}")
print("ok: resumed job ends with the uninterrupted run's parameters:", a["param_checksum"])
EOF
no_survivors back

if [ "$FAILED" != 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
echo "all checks passed"
