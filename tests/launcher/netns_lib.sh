# N network namespaces (2 to 8) acting as N machines on one host (sourced by the
# multinode tests). Node K is namespace $(ns_name K) at $(node_addr K) = 10.77.0.(K+1)/24;
# its one interface, $(node_if K), is a veth whose other end is a port of a Linux bridge
# (the machines' switch), which lives in a namespace of its own, $NETNS_BR. Nothing is
# added to the host's own namespace. Every name is unique to this shell and the trap
# deletes every namespace by name, so no address or port of the host is used and none is
# left behind. NS0/NS1, ADDR0/ADDR1 and VETH0/VETH1 name nodes 0 and 1 (their namespace,
# address and interface).
#
#   netns_setup [N]        creates N nodes (default 2), NETNS_N says how many; prints
#                          "SKIP: ..." and exits 0 where namespaces are not permitted
#   ns_name K, node_addr K, node_if K     node K's namespace, address, interface
#   in_ns K CMD...         runs CMD on node K
#   free_port_in K         a port free on node K
#   link_node K down|up    cuts node K off from every other node, both ways, or joins it
#                          again; the other nodes still reach each other
#   make_mpi_agent FILE    writes an Open MPI launch agent (plm_rsh_agent) that enters
#                          the namespace of the host address it is given, instead of ssh
#   mpirun_2x2 ARGS...     mpirun, 2 ranks on each of nodes 0 and 1
set -uo pipefail

NETNS_ID="tdm$$"
NETNS_MAX=8
NETNS_N=0
NETNS_BR="${NETNS_ID}br"
# Interface names must stay within 15 characters: "tdm" + a pid (at most 7 digits) + 2.
NETNS_BRIDGE="${NETNS_ID}sw"  # the bridge itself, inside $NETNS_BR
NETNS_TMP="$(mktemp -d)"

netns_skip() {
  echo "SKIP: $1"
  exit 0
}

# netns_node K: true where K is a node number this file can name (0 to NETNS_MAX-1).
netns_node() {
  case "$1" in
    [0-9]) [ "$1" -lt "$NETNS_MAX" ] && return 0 ;;
  esac
  echo "netns_lib: '$1' is no node number (0 to $((NETNS_MAX - 1)))" >&2
  return 1
}
ns_name() { netns_node "$1" && echo "${NETNS_ID}n$1"; }
node_addr() { netns_node "$1" && echo "10.77.0.$(($1 + 1))"; }
node_if() { netns_node "$1" && echo "${NETNS_ID}v$1"; }
netns_port() { netns_node "$1" && echo "${NETNS_ID}p$1"; }  # node K's port on the bridge

NS0="$(ns_name 0)"
NS1="$(ns_name 1)"
VETH0="$(node_if 0)"
VETH1="$(node_if 1)"
ADDR0="$(node_addr 0)"
ADDR1="$(node_addr 1)"

# Every name netns_setup can create, whether or not it did: netns_setup may have run in a
# subshell (scripts/check-torch-jobs does), whose NETNS_N this shell never sees. Deleting
# a namespace deletes the veth ends in it, and with each its peer.
netns_cleanup() {
  local k
  for ((k = 0; k < NETNS_MAX; k++)); do ip netns del "$(ns_name "$k")" 2>/dev/null; done
  ip netns del "$NETNS_BR" 2>/dev/null
  rm -rf "$NETNS_TMP"
}
trap netns_cleanup EXIT

# netns_poll SECONDS CMD...: CMD every 50 ms until it holds; false if it never did.
netns_poll() {
  local i limit=$(($1 * 20))
  shift
  for ((i = 0; i < limit; i++)); do "$@" && return 0; sleep 0.05; done
  return 1
}

# netns_port_is K STATE: node K's bridge port is in STATE (forwarding, disabled, ...).
# The bridge follows a port's carrier asynchronously (the kernel's link watch), so a
# change of link is complete only once the port shows it.
# (No pipe into grep -q: under pipefail, ip killed by SIGPIPE would fail a match.)
netns_port_is() {
  [[ "$(ip -n "$NETNS_BR" -d -o link show dev "$(netns_port "$1")" 2>/dev/null)" == *"bridge_slave state $2 "* ]]
}

netns_setup() {
  local n="${1:-2}" k ns dev
  case "$n" in
    [2-8]) ;;
    *) echo "netns_setup: N must be 2 to $NETNS_MAX, not '$n'" >&2; exit 2 ;;
  esac
  command -v ip >/dev/null || netns_skip "the ip command (iproute2) is not installed"
  ip netns add "$NETNS_BR" 2>"$NETNS_TMP/err" || netns_skip "ip netns add is not permitted here: $(cat "$NETNS_TMP/err")"
  # No STP and no forwarding delay: a port forwards as soon as it has a carrier.
  ip -n "$NETNS_BR" link add "$NETNS_BRIDGE" type bridge stp_state 0 forward_delay 0 2>"$NETNS_TMP/err" ||
    netns_skip "cannot create a Linux bridge in a network namespace: $(cat "$NETNS_TMP/err")"
  ip -n "$NETNS_BR" link set "$NETNS_BRIDGE" up || { echo "FAIL: could not bring up the bridge"; exit 1; }
  for ((k = 0; k < n; k++)); do
    ns="$(ns_name "$k")"
    dev="$(node_if "$k")"
    ip netns add "$ns" 2>"$NETNS_TMP/err" || netns_skip "ip netns add failed: $(cat "$NETNS_TMP/err")"
    # Created in place, both ends: the host's namespace never holds either.
    ip -n "$ns" link add "$dev" type veth peer name "$(netns_port "$k")" netns "$NETNS_BR" 2>"$NETNS_TMP/err" ||
      netns_skip "cannot create a veth pair: $(cat "$NETNS_TMP/err")"
    ip -n "$NETNS_BR" link set "$(netns_port "$k")" master "$NETNS_BRIDGE" &&
      ip -n "$NETNS_BR" link set "$(netns_port "$k")" up &&
      ip -n "$ns" addr add "$(node_addr "$k")/24" dev "$dev" && ip -n "$ns" link set "$dev" up &&
      ip -n "$ns" link set lo up ||
      { echo "FAIL: could not configure node $k's namespace $ns"; exit 1; }
  done
  NETNS_N="$n"
  for ((k = 0; k < n; k++)); do
    netns_poll 10 netns_port_is "$k" forwarding ||
      { echo "FAIL: node $k's bridge port is not forwarding within 10 s"; exit 1; }
  done
}

# Gloo finds its own address by interface: each node has one besides lo, node_if K.
in_ns() {
  local ns
  ns="$(ns_name "$1")" || return 2
  shift
  ip netns exec "$ns" "$@"
}

free_port_in() {
  in_ns "$1" python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])'
}

# Node K's own interface goes down, as if K's machine took it down: K's connects fail at
# once ("Network is unreachable") but K still reaches its own address; its bridge port
# loses the carrier, so the bridge drops what the others send to K, which they see as
# timeouts. The other ports, and so the other nodes, are untouched.
link_node() {
  local k="$1" state="${2:-}" ns want
  case "$state" in
    down) want=disabled ;;
    up) want=forwarding ;;
    *) echo "link_node $k: say down or up, not '$state'" >&2; return 2 ;;
  esac
  ns="$(ns_name "$k")" || return 2
  ip -n "$ns" link set "$(node_if "$k")" "$state" || return 1
  netns_poll 10 netns_port_is "$k" "$want" ||
    { echo "link_node $k $state: its bridge port is not $want within 10 s" >&2; return 1; }
}

# Open MPI calls the agent as `AGENT HOST CMD...` where it would call ssh; the command
# arrives as words of one shell command line, so it is handed to sh -c whole.
make_mpi_agent() {
  local k
  {
    echo '#!/usr/bin/env bash'
    echo 'host="$1"; shift'
    echo 'case "$host" in'
    for ((k = 0; k < NETNS_N; k++)); do echo "  $(node_addr "$k")) ns=$(ns_name "$k") ;;"; done
    echo '  *) echo "netns agent: unknown host $host" >&2; exit 255 ;;'
    echo 'esac'
    echo 'exec ip netns exec "$ns" sh -c "$*"'
  } >"$1"
  chmod +x "$1"
}

# mpirun across nodes 0 and 1: node 0 runs mpirun, node 1 is reached by the agent
# (hang-guarded by timeout).
# The namespaces share one hostname, so Open MPI's shared-memory transport would
# treat them as one machine and crash: only tcp and self, on the nodes' subnet.
mpirun_2x2() {
  local agent="$NETNS_TMP/agent"
  make_mpi_agent "$agent"
  in_ns 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 300 mpirun --oversubscribe -np 4 --host "$ADDR0:2,$ADDR1:2" \
    --mca plm_rsh_agent "$agent" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    "$@"
}
