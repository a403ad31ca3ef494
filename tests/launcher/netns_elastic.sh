#!/usr/bin/env bash
# An elastic job (tandemrun --nnodes 2:3, docs/elastic.md) on three "machines" (network
# namespaces on a bridge, netns_lib.sh), node 0 hosting the store, one rank per node
# training over gloo. Node 2 leaves in the middle:
#   kill       every process of node 2 gets SIGKILL: its peers' collectives fail at once
#   freeze     every process of node 2 gets SIGSTOP: its peers' collectives time out
#   cut        node 2's link goes down
#   heartbeat  freeze under the default collective timeout: node 2's silent heartbeat
# Each time nodes 0 and 1 form generation 1 of 2 nodes without it and finish, recovered
# in memory, with the parameters of a fixed 2-rank run resumed from the checkpoint of the
# step they rolled back to; node 2 is then ended (freeze: SIGKILL by pid; cut: it ends
# alone once its store is gone) and nothing of the job is left in any namespace. Last, a
# frozen node 2 is resumed (SIGCONT) and joins generation 2 (returns).
# No sleep and no timing: node 0's output goes through a pipe this script stops reading
# at step 150, which holds the job (node 0's rank blocks on its log, the others on their
# next all-reduce) until node 2 is taken away; then the script reads on.
# Usage: netns_elastic.sh BIN_DIR. Skips (exit 0, "SKIP: ...") without netns.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/netns_lib.sh"
BIN="$1"
TANDEMRUN="$BIN/tandemrun"
TRAIN="$BIN/tandem-train"
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

[ -x "$TRAIN" ] || netns_skip "tandem-train is not built in $BIN"
netns_setup 3
STEPS=1000  # node 0's unread fifo (64 KiB of log lines) holds the job well before this
# 4800 samples: 100 steps an epoch at 3 x 16; the global batch 48 is kept (--elastic-batch
# global, the default under an elastic tandemrun), so every commit converts to 2 ranks.
# Commits (recovery in memory, the default) fall on checkpoints, which the reference runs
# resume from.
JOB=(--mode ddp --backend gloo --data synthetic --synthetic-train 4800 --synthetic-test 512 --model mlp --hidden 64
     --batch-size 16 --lr 0.02 --no-progress --threads 1 --epochs 1000 --max-steps "$STEPS" --save-every 50
     --commit-every 50     --keep-last 0 --seed 3 --log-every 1)

# start TAG: the three nodes' tandemrun in the background; node N's output in
# $NETNS_TMP/TAG.N (node 0's read from fd $out), its exit code in TAG.rc.N.
start() {
  local tag="$1" port n
  port="$(free_port_in 0)"
  mkfifo "$NETNS_TMP/$tag.fifo"
  for n in 0 1 2; do
    local sink="$NETNS_TMP/$tag.$n" rank=()
    [ "$n" = 0 ] && sink="$NETNS_TMP/$tag.fifo" && rank=(--node-rank 0)
    (in_ns "$n" timeout 240 "$TANDEMRUN" --nnodes 2:3 "${rank[@]}" --nproc-per-node 1 --master-addr "$ADDR0" \
      --master-port "$port" --job-id "nse-$tag" --rdzv-timeout-s 20 --rdzv-last-call-s 5 --grace-s 1 \
      -- "$TRAIN" "${JOB[@]}" --collective-timeout-s "$COLLECTIVE_TIMEOUT_S" --checkpoint-dir "$NETNS_TMP/$tag-ck" --resume auto \
      --summary-json "$NETNS_TMP/$tag.json" >"$sink" 2>&1
     echo $? >"$NETNS_TMP/$tag.rc.$n") &
  done
  exec {out}<"$NETNS_TMP/$tag.fifo"
}

# underway TAG: reads node 0's output up to its step 150, then leaves it unread.
underway() {
  local line
  while IFS= read -r -u "$out" line; do
    printf '%s\n' "$line" >>"$NETNS_TMP/$1.0"
    [[ "$line" == *" step 150/$STEPS "* ]] && return 0
  done
  fail "$1: node 0 ended before step 150"; tail -20 "$NETNS_TMP/$1.0"
}

# ended TAG N...: waits (bounded) until each node N has exited; false if one did not.
ended() {
  local tag="$1" n i
  shift
  for n in "$@"; do
    for ((i = 0; i < 2400; i++)); do [ -s "$NETNS_TMP/$tag.rc.$n" ] && break; sleep 0.05; done
    [ -s "$NETNS_TMP/$tag.rc.$n" ] || return 1
  done
}

expect_in() {  # FILE TEXT
  grep -qF -- "$2" "$1" && echo "ok: $(basename "$1"): '$2'" || { fail "$(basename "$1") lacks '$2'"; tail -25 "$1"; }
}

# same_as_checkpoint_run TAG: the job's end equals a fixed 2-rank run resumed from the
# checkpoint generation 1 resumed from.
same_as_checkpoint_run() {
  local tag="$1"
  local step
  step="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["resumed_from_step"])' "$NETNS_TMP/$tag.json")"
  [ "$step" != None ] || { fail "$tag: generation 1 did not resume from a checkpoint"; return; }
  mkdir -p "$NETNS_TMP/$tag-ref-ck"
  cp -r "$(printf '%s/step-%08d' "$NETNS_TMP/$tag-ck" "$step")" "$NETNS_TMP/$tag-ref-ck/"
  in_ns 0 timeout 120 "$TANDEMRUN" --nproc-per-node 2 --master-port 0 -- "$TRAIN" "${JOB[@]}" \
    --checkpoint-dir "$NETNS_TMP/$tag-ref-ck" --resume auto --summary-json "$NETNS_TMP/$tag-ref.json" \
    --elastic-batch global \
    >"$NETNS_TMP/$tag-ref.log" 2>&1 || { fail "$tag: the reference run failed"; tail -20 "$NETNS_TMP/$tag-ref.log"; }
  python3 - "$NETNS_TMP/$tag.json" "$NETNS_TMP/$tag-ref.json" "$step" <<'EOF' || FAILED=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
if a["steps"] != b["steps"] or a["param_checksum"] != b["param_checksum"]:
    sys.exit(f"FAIL: the elastic job ends at step {a['steps']} with {a['param_checksum']}, the checkpoint run at "
             f"step {b['steps']} with {b['param_checksum']}")
print(f"ok: 3 -> 2 nodes at step {sys.argv[3]}, the checkpoint run's parameters {a['param_checksum']}")
EOF
}

no_survivors() {  # TAG: no process in any node's namespace, none of the job's anywhere
  local k
  for k in 0 1 2; do
    [ -z "$(ip netns pids "$(ns_name "$k")")" ] || fail "$1: processes left on node $k: $(ip netns pids "$(ns_name "$k")")"
  done
  pgrep -f -- "$NETNS_TMP/$1-ck" >/dev/null && fail "$1: processes left: $(pgrep -af -- "$NETNS_TMP/$1-ck")"
  # Commit directories (recovery in memory): each tandemrun removes its own; one killed
  # outright (the frozen node 2) leaves its own for the next tandemrun on the machine to
  # sweep, which this test does in its place.
  local d
  for d in /dev/shm/tandem-commit-nse-"$1"-*; do
    [ -e "$d" ] || continue
    if [ "${d##*-}" = "${KILLED_LAUNCHER:-none}" ]; then rm -rf "$d"; else fail "$1: commit directory left: $d"; fi
  done
  echo "ok: $1: no process or commit directory left"
}

# node2_launcher TAG: the pid of node 2's tandemrun.
node2_launcher() {
  pgrep -f -- "--job-id nse-$1" | while read -r p; do
    [ "$(ip netns identify "$p")" = "$(ns_name 2)" ] && [ "$(ps -o comm= -p "$p")" = tandemrun ] && echo "$p"
  done
}

# leaves TAG HOW [COLLECTIVE_TIMEOUT_S]: node 2 leaves by HOW (kill | freeze | cut); the other two
# go on. With the collective timeout (default 5 s) longer than tandemrun's node heartbeat
# timeout (10 s), the heartbeat finds the node first.
leaves() {
  local tag="$1" how="$2"
  COLLECTIVE_TIMEOUT_S="${3:-5}"
  start "$tag"
  underway "$tag"
  local taken_at
  taken_at="$(date +%s.%N)"
  KILLED_LAUNCHER=none
  if [ "$how" = freeze ]; then
    # shellcheck disable=SC2046
    kill -STOP $(ip netns pids "$(ns_name 2)")
  elif [ "$how" = kill ]; then
    KILLED_LAUNCHER="$(node2_launcher "$tag")"
    # shellcheck disable=SC2046
    kill -KILL $(ip netns pids "$(ns_name 2)")
  else
    link_node 2 down
  fi
  cat <&"$out" >>"$NETNS_TMP/$tag.0" &
  local drain=$!
  ended "$tag" 0 1 || fail "$tag: nodes 0 and 1 did not end"
  wait "$drain"
  exec {out}<&-
  for n in 0 1; do
    [ "$(cat "$NETNS_TMP/$tag.rc.$n")" = 0 ] || { fail "$tag: node $n exited $(cat "$NETNS_TMP/$tag.rc.$n")"; tail -30 "$NETNS_TMP/$tag.$n"; }
    expect_in "$NETNS_TMP/$tag.$n" "generation 1: 2 node(s)"
    if [ "$COLLECTIVE_TIMEOUT_S" -le 5 ]; then
      # The collectives fail first: the ranks say "lost" and are kept.
      expect_in "$NETNS_TMP/$tag.$n" "1 of this node's 1 worker(s) kept from the generation before"
    else
      # The heartbeat: the ranks, still blocked in their collective, are restarted and take
      # the commit from RAM all the same.
      expect_in "$NETNS_TMP/$tag.$n" "stopped writing its heartbeat to the store"
    fi
    expect_in "$NETNS_TMP/$tag.$n" ") left"
  done
  if [ "$how" = freeze ]; then
    KILLED_LAUNCHER="$(node2_launcher "$tag")"
    # shellcheck disable=SC2046
    kill -KILL $(ip netns pids "$(ns_name 2)")
  elif [ "$how" = cut ]; then
    link_node 2 up
  fi
  ended "$tag" 2 || fail "$tag: node 2 did not end"
  [ "$(cat "$NETNS_TMP/$tag.rc.2")" != 0 ] || fail "$tag: node 2 exited 0"
  grep -h "formed" "$NETNS_TMP/$tag.0" | sed 's/^/(information only) /'
  # From node 2's removal to generation 1's first step (the last time node 0 logged the
  # step after the one it resumed from; generation 0 logged it too). Reported, not asserted.
  python3 - "$NETNS_TMP/$tag.0" "$NETNS_TMP/$tag.json" "$taken_at" "$how" "$COLLECTIVE_TIMEOUT_S" <<'EOF' || FAILED=1
import datetime, json, re, sys
log, summary, taken, how, timeout = sys.argv[1:]
s = json.load(open(summary))
step = s["resumed_from_step"]
if s["resumed_from"] != "commit":
    sys.exit(f"FAIL: generation 1 resumed from {s['resumed_from']}, not from the commit in RAM")
lines = [l for l in open(log, errors="replace") if f" step {step + 1}/" in l]
m = re.search(r"\[(\d\d):(\d\d):(\d\d\.\d+)\]", lines[-1]) if lines else None
if m:
    t0 = datetime.datetime.fromtimestamp(float(taken))
    at = t0.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0) + \
        datetime.timedelta(seconds=float(m.group(3)))
    print(f"(information only) recovery, node 2 {how}: {(at - t0).total_seconds():.2f} s from its removal to "
          f"generation 1's first step (collective timeout {timeout} s, node heartbeat timeout 10 s, last call 5 s; "
          "recovery in memory)")
EOF
  same_as_checkpoint_run "$tag"
  no_survivors "$tag"
}

# returns TAG: node 2 is frozen, the other two go on without it; resumed (SIGCONT), it finds
# its generation over, asks to join, and the job grows back to three nodes at a commit.
returns() {
  local tag="$1" line n
  COLLECTIVE_TIMEOUT_S=5
  KILLED_LAUNCHER=none
  start "$tag"
  underway "$tag"
  # shellcheck disable=SC2046
  kill -STOP $(ip netns pids "$(ns_name 2)")
  while IFS= read -r -u "$out" line; do
    printf '%s\n' "$line" >>"$NETNS_TMP/$tag.0"
    [[ "$line" == *"generation 1: 2 node(s)"* ]] && break
  done
  # shellcheck disable=SC2046
  kill -CONT $(ip netns pids "$(ns_name 2)")
  cat <&"$out" >>"$NETNS_TMP/$tag.0" &
  local drain=$!
  ended "$tag" 0 1 2 || fail "$tag: the three nodes did not end"
  wait "$drain"
  exec {out}<&-
  for n in 0 1 2; do
    [ "$(cat "$NETNS_TMP/$tag.rc.$n")" = 0 ] || { fail "$tag: node $n exited $(cat "$NETNS_TMP/$tag.rc.$n")"; tail -30 "$NETNS_TMP/$tag.$n"; }
    expect_in "$NETNS_TMP/$tag.$n" "generation 2: 3 node(s)"
  done
  expect_in "$NETNS_TMP/$tag.0" ") joined"
  # Node 2 came back as a joiner. It says "waiting to be admitted" only when generation 1 is
  # still running at its first poll; when its arrival ends generation 1 inside that poll it
  # goes straight in; either way its generation-2 line names the node that joined.
  grep -q "generation 2: 3 node(s).*) joined" "$NETNS_TMP/$tag.2" \
    || fail "$tag: node 2 did not rejoin generation 2 as a joiner"
  python3 - "$NETNS_TMP/$tag.json" "$STEPS" <<'EOF' || FAILED=1
import json, sys
s = json.load(open(sys.argv[1]))
worlds = [g["world_size"] for g in s["elastic_history"] or []]
if s["steps"] != int(sys.argv[2]) or worlds != [3, 2, 3] or s["resumed_from"] != "commit":
    sys.exit(f"FAIL: steps {s['steps']}, world sizes {worlds}, resumed_from {s['resumed_from']}")
print(f"ok: 3 -> 2 -> 3 nodes, the returning node admitted at a commit; {s['steps']} steps")
EOF
  no_survivors "$tag"
}

leaves killed kill
leaves frozen freeze
leaves cut cut
returns returns
# tandem-train's default collective timeout (600 s): the frozen node is found by its silent
# heartbeat, not by its peers' collectives.
leaves heartbeat freeze 600

if [ "$FAILED" != 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
echo "all checks passed"
