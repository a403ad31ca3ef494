#!/usr/bin/env bash
# The hier backend across two "machines" (network namespaces on one bridge,
# netns_lib.sh): tandemrun --nnodes 2 --nproc-per-node 2 on each, running the collectives
# worker's exact-value `ops` scenario with --backend hier. Each node's ranks share memory;
# the two leaders all-reduce over gloo across the veth. Both namespaces share a host name
# and boot id: NODE_RANK (set by tandemrun) is what tells the nodes apart.
# Usage: netns_hier.sh BIN_DIR COLLECTIVES_WORKER. Skips (exit 0, "SKIP: ...") without netns.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/netns_lib.sh"
BIN="$1"
WORKER="$2"
TANDEMRUN="$BIN/tandemrun"
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

netns_setup

port="$(free_port_in 0)"
for n in 0 1; do
  (in_ns "$n" timeout 200 "$TANDEMRUN" --nnodes 2 --node-rank "$n" --nproc-per-node 2 \
    --master-addr "$ADDR0" --master-port "$port" --rdzv-timeout-s 60 --grace-s 1 -- \
    "$WORKER" --scenario ops --backend hier >"$NETNS_TMP/hier.$n" 2>&1
   echo $? >"$NETNS_TMP/hier.rc.$n") &
done
wait
for n in 0 1; do
  rc="$(cat "$NETNS_TMP/hier.rc.$n")"
  [ "$rc" = 0 ] || { fail "hier: node $n exited $rc"; cat "$NETNS_TMP/hier.$n"; }
  for r in $((2 * n)) $((2 * n + 1)); do
    grep -qE "rank $r: hier world 4: [0-9]+ checks, 0 failed" "$NETNS_TMP/hier.$n" ||
      { fail "hier: rank $r did not pass every check"; cat "$NETNS_TMP/hier.$n"; }
  done
done
grep -qF "collectives: backend hier: 2 nodes x 2 ranks, leaders over gloo" "$NETNS_TMP/hier.0" ||
  fail "hier: rank 0 did not log its 2 nodes x 2 ranks"
[ "$FAILED" = 0 ] && echo "ok: hier ops on 2 nodes x 2 processes across namespaces"
exit "$FAILED"
