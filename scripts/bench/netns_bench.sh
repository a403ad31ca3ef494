# shellcheck shell=bash
# Emulated clusters for the benchmarks (bench-plan, bench-powersgd): NODES network
# namespaces (tests/launcher/netns_lib.sh) of RANKS processes each, the nodes' veths limited
# by tc tbf. The caller sets NODES, RANKS, BIN, BENCH_NAME and die(), sources this, and calls
# netns_setup "$NODES". Processes are stopped by the pids started here, namespaces removed,
# on exit.
# shellcheck source=tests/launcher/netns_lib.sh
source "$ROOT/tests/launcher/netns_lib.sh"
netns_skip() { die "$1"; }
PIDS=()
bench_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  netns_cleanup
}
trap bench_cleanup EXIT
trap 'echo "$BENCH_NAME: interrupted" >&2; exit 130' INT TERM

# wait_nodes TAG: waits for PIDS (process K's log in $NETNS_TMP/TAG.K.log). The first to fail
# has its log's tail printed, the others are stopped, and the script exits 1.
wait_nodes() {
  local tag="$1" done_pid rc i p running=("${PIDS[@]}")
  while [ ${#running[@]} -gt 0 ]; do
    wait -n -p done_pid "${running[@]}"
    rc=$?
    if [ -z "${done_pid:-}" ]; then
      # Bash already moved a finished job out of its job table (it does so when a later
      # command substitution forks), where wait -n no longer sees it: wait for it by pid.
      for done_pid in "${running[@]}"; do break; done
      wait "$done_pid"
      rc=$?
    fi
    for i in "${!running[@]}"; do [ "${running[$i]}" = "$done_pid" ] && unset 'running[i]'; done
    [ "$rc" = 0 ] && continue
    for i in "${!PIDS[@]}"; do [ "${PIDS[$i]}" = "$done_pid" ] && break; done
    echo "$BENCH_NAME: $tag: process $i exited $rc; its log:" >&2
    tail -n 20 "$NETNS_TMP/$tag.$i.log" >&2
    for p in "${running[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${running[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
    exit 1
  done
  PIDS=()
}

# on_nodes TAG CMD...: CMD under tandemrun on every node (RANKS each); each node's log in
# $NETNS_TMP/TAG.K.log.
on_nodes() {
  local tag="$1"; shift
  local port n
  port="$(free_port_in 0)" || die "no free port on node 0"
  PIDS=()
  for ((n = 0; n < NODES; n++)); do
    ip netns exec "$(ns_name "$n")" timeout 300 "$BIN/tandemrun" --nnodes "$NODES" --node-rank "$n" \
      --nproc-per-node "$RANKS" --master-addr "$ADDR0" --master-port "$port" --rdzv-timeout-s 60 --grace-s 1 -- "$@" \
      >"$NETNS_TMP/$tag.$n.log" 2>&1 &
    PIDS+=("$!")
  done
  wait_nodes "$tag"
}

# on_nodes_env TAG CMD...: CMD once per rank, RANKS per node, with torchrun's environment
# (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and GLOO_SOCKET_IFNAME naming the
# node's veth (else gloo binds the address its host name resolves to: loopback); rank R's log
# in $NETNS_TMP/TAG.R.log.
on_nodes_env() {
  local tag="$1"; shift
  local port n l r
  port="$(free_port_in 0)" || die "no free port on node 0"
  PIDS=()
  for ((n = 0; n < NODES; n++)); do
    for ((l = 0; l < RANKS; l++)); do
      r=$((n * RANKS + l))
      ip netns exec "$(ns_name "$n")" env RANK="$r" WORLD_SIZE="$((NODES * RANKS))" LOCAL_RANK="$l" \
        MASTER_ADDR="$ADDR0" MASTER_PORT="$port" GLOO_SOCKET_IFNAME="$(node_if "$n")" timeout 300 "$@" \
        >"$NETNS_TMP/$tag.$r.log" 2>&1 &
      PIDS+=("$!")
    done
  done
  wait_nodes "$tag"
}

# set_rate RATE: every node's veth shaped to RATE (tc tbf; netem is not available here).
set_rate() {
  local n dev
  for ((n = 0; n < NODES; n++)); do
    dev="$(node_if "$n")"
    in_ns "$n" tc qdisc replace dev "$dev" root tbf rate "$1" burst 256kb latency 50ms 2>"$NETNS_TMP/err" ||
      die "tc tbf $1 on $dev failed: $(cat "$NETNS_TMP/err")"
  done
}
