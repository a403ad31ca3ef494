# Two network namespaces joined by a veth pair, acting as two machines on one host
# (sourced by the multinode tests). Node 0 is $NS0 at $ADDR0, node 1 is $NS1 at $ADDR1.
# The addresses live only inside these namespaces, which this file creates with
# unique names and always deletes (trap), so no address or port of the host is used.
#
#   netns_setup            creates both; prints "SKIP: ..." and exits 0 where not permitted
#   in_ns N CMD...         runs CMD on node N (0 or 1)
#   free_port_in N         a port free on node N
#   make_mpi_agent FILE    writes an Open MPI launch agent (plm_rsh_agent) that enters
#                          the namespace of the host address it is given, instead of ssh
set -uo pipefail

NETNS_ID="tdm$$"
NS0="${NETNS_ID}n0"
NS1="${NETNS_ID}n1"
VETH0="${NETNS_ID}v0"  # interface names must stay within 15 characters
VETH1="${NETNS_ID}v1"
ADDR0=10.77.0.1
ADDR1=10.77.0.2
NETNS_TMP="$(mktemp -d)"

netns_cleanup() {
  ip netns del "$NS0" 2>/dev/null
  ip netns del "$NS1" 2>/dev/null
  rm -rf "$NETNS_TMP"
}
trap netns_cleanup EXIT

netns_skip() {
  echo "SKIP: $1"
  exit 0
}

netns_setup() {
  command -v ip >/dev/null || netns_skip "the ip command (iproute2) is not installed"
  ip netns add "$NS0" 2>"$NETNS_TMP/err" || netns_skip "ip netns add is not permitted here: $(cat "$NETNS_TMP/err")"
  ip netns add "$NS1" 2>"$NETNS_TMP/err" || netns_skip "ip netns add failed: $(cat "$NETNS_TMP/err")"
  ip link add "$VETH0" type veth peer name "$VETH1" 2>"$NETNS_TMP/err" ||
    netns_skip "cannot create a veth pair: $(cat "$NETNS_TMP/err")"
  ip link set "$VETH0" netns "$NS0" && ip link set "$VETH1" netns "$NS1" &&
    ip -n "$NS0" addr add "$ADDR0/24" dev "$VETH0" && ip -n "$NS1" addr add "$ADDR1/24" dev "$VETH1" &&
    ip -n "$NS0" link set "$VETH0" up && ip -n "$NS1" link set "$VETH1" up &&
    ip -n "$NS0" link set lo up && ip -n "$NS1" link set lo up ||
    { echo "FAIL: could not configure the namespaces"; exit 1; }
}

# Gloo finds its own address by interface: each node names its end of the veth.
in_ns() {
  local n="$1"
  shift
  if [ "$n" = 0 ]; then
    ip netns exec "$NS0" "$@"
  else
    ip netns exec "$NS1" "$@"
  fi
}

free_port_in() {
  in_ns "$1" python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])'
}

# Open MPI calls the agent as `AGENT HOST CMD...` where it would call ssh; the command
# arrives as words of one shell command line, so it is handed to sh -c whole.
make_mpi_agent() {
  cat >"$1" <<EOF
#!/usr/bin/env bash
host="\$1"; shift
case "\$host" in
  $ADDR0) ns=$NS0 ;;
  $ADDR1) ns=$NS1 ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
  chmod +x "$1"
}

# mpirun across the two namespaces: node 0 runs mpirun, node 1 is reached by the agent
# (hang-guarded by timeout).
# Both namespaces share one hostname, so Open MPI's shared-memory transport would
# treat them as one machine and crash: only tcp and self, on the veth subnet.
mpirun_2x2() {
  local agent="$NETNS_TMP/agent"
  make_mpi_agent "$agent"
  in_ns 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 300 mpirun --oversubscribe -np 4 --host "$ADDR0:2,$ADDR1:2" \
    --mca plm_rsh_agent "$agent" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    "$@"
}
