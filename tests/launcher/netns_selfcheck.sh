#!/usr/bin/env bash
# netns_lib.sh on its own, without Tandem's programs: 3 nodes on the bridge.
#   1. every node reaches every other;
#   2. link_node 2 down: nodes 0 and 1 still reach each other, neither reaches node 2
#      nor node 2 them, and node 2 still reaches its own address;
#   3. link_node 2 up: every node reaches every other again;
#   4. no namespace is left behind by a script that fails after netns_setup, by a
#      netns_setup that fails half-way, by a script killed with SIGTERM, nor by the
#      cleanup of this one.
# "Reaches" is a TCP connect to a port free on the other node: an answer, even a
# refusal (a reset), proves that packets went both ways; a cut link gives an error or
# no answer within the bound.
# Usage: netns_selfcheck.sh. Skips (exit 0, "SKIP: ...") without netns.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/netns_lib.sh"
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

netns_setup 3
# A port free on each node: nothing listens in these namespaces but what this script
# starts, so it stays free.
PORT=()
for n in 0 1 2; do PORT[n]="$(free_port_in "$n")" || fail "no free port on node $n"; done

# reaches A B: node A's connect to node B gets an answer within 3 s (a bound against a
# cut link, which never answers; a working one answers at once).
reaches() {
  in_ns "$1" python3 - "$(node_addr "$2")" "${PORT[$2]}" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except ConnectionRefusedError:
    pass  # the SYN arrived and the reset came back
except OSError as e:
    print(f"{sys.argv[1]}:{sys.argv[2]}: {e}")
    sys.exit(1)
EOF
}
# expect A B yes|no
expect() {
  local out
  out="$(reaches "$1" "$2" 2>&1)"
  local rc=$?
  if [ "$3" = yes ] && [ "$rc" != 0 ]; then
    fail "$WHEN: node $1 does not reach node $2 ($out)"
  elif [ "$3" = no ] && [ "$rc" = 0 ]; then
    fail "$WHEN: node $1 reaches node $2 though node 2 is cut off"
  fi
}
all_pairs() {
  local a b
  for a in 0 1 2; do for b in 0 1 2; do [ "$a" = "$b" ] || expect "$a" "$b" yes; done; done
}

# 1.
WHEN="3 nodes up"
all_pairs
[ "$FAILED" = 0 ] && echo "ok: 3 nodes, every one reaches every other"

# 2.
WHEN="node 2 cut"
link_node 2 down || fail "link_node 2 down failed"
expect 0 1 yes
expect 1 0 yes
for n in 0 1; do
  expect "$n" 2 no
  expect 2 "$n" no
done
expect 2 2 yes
[ "$FAILED" = 0 ] && echo "ok: node 2 cut off both ways, nodes 0 and 1 still reach each other"

# 3.
WHEN="node 2 back"
link_node 2 up || fail "link_node 2 up failed"
all_pairs
[ "$FAILED" = 0 ] && echo "ok: node 2 back, every node reaches every other"

# 4. Each case is a script that sources netns_lib.sh and writes its NETNS_ID first.
# left IDS...: the namespaces of those IDs that still exist.
left() {
  local id
  for id in "$@"; do ip netns list | awk '{print $1}' | grep -E "^${id}(n[0-9]|br)\$"; done
}
# case_script NAME BODY: a script that sources the library, records its ID, then runs BODY.
case_script() {
  printf 'source "%s/netns_lib.sh"\necho "$NETNS_ID" >"%s/%s.id"\n%s\n' "$HERE" "$NETNS_TMP" "$1" "$2" \
    >"$NETNS_TMP/$1.sh"
}
# expect_clean NAME RC [OUT_PATTERN]: the case exited RC, printed OUT_PATTERN (when one
# is given) and left no namespace. A case's output is shown with its "SKIP: " reworded,
# lest ctest take this test's failure for a skip.
show() { sed 's/SKIP: /SKIP (of the case) /' "$NETNS_TMP/$1.out"; }
expect_clean() {
  local rc="$2" out="$NETNS_TMP/$1.out" id
  id="$(cat "$NETNS_TMP/$1.id" 2>/dev/null)"
  [ "$(cat "$NETNS_TMP/$1.rc")" = "$rc" ] || { fail "$1: exited $(cat "$NETNS_TMP/$1.rc"), expected $rc"; show "$1"; }
  [ -z "${3:-}" ] || grep -qE -- "$3" "$out" || { fail "$1: did not print '$3'"; show "$1"; }
  if [ -z "$id" ]; then
    fail "$1: wrote no NETNS_ID"
  elif [ -n "$(left "$id")" ]; then
    fail "$1: left namespaces $(left "$id" | tr '\n' ' ')"
    for ns in $(left "$id"); do ip netns del "$ns"; done
  else
    echo "ok: $1 left no namespace"
  fi
}

case_script failing 'netns_setup 3; echo "FAIL: on purpose"; exit 1'
bash "$NETNS_TMP/failing.sh" >"$NETNS_TMP/failing.out" 2>&1
echo $? >"$NETNS_TMP/failing.rc"
expect_clean failing 1 "FAIL: on purpose"

# Node 2's name is taken before netns_setup 3 gets to it (the bridge and nodes 0 and 1
# exist by then): the setup skips, and the cleanup deletes all four by name.
case_script halfway 'ip netns add "$(ns_name 2)"; netns_setup 3'
bash "$NETNS_TMP/halfway.sh" >"$NETNS_TMP/halfway.out" 2>&1
echo $? >"$NETNS_TMP/halfway.rc"
expect_clean halfway 0 "^SKIP: ip netns add failed"

# SIGTERM while the script waits for a job, as the multinode tests wait for their nodes.
case_script killed "netns_setup 3; sleep 120 & echo \$! >'$NETNS_TMP/sleeper'; echo ready >'$NETNS_TMP/ready'; wait"
bash "$NETNS_TMP/killed.sh" >"$NETNS_TMP/killed.out" 2>&1 &
killed=$!
netns_poll 30 test -s "$NETNS_TMP/ready" || fail "killed: never got ready"
kill -TERM "$killed"
wait "$killed"
echo $? >"$NETNS_TMP/killed.rc"
[ -s "$NETNS_TMP/sleeper" ] && kill "$(cat "$NETNS_TMP/sleeper")" 2>/dev/null
expect_clean killed 143

# This script's own namespaces, deleted by the same cleanup its trap runs at exit.
ids="$NETNS_ID"
netns_cleanup
if [ -n "$(left "$ids")" ]; then
  fail "netns_cleanup left $(left "$ids" | tr '\n' ' ')"
else
  echo "ok: netns_cleanup left no namespace (ip netns list)"
fi

if [ "$FAILED" != 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
echo "all checks passed"
