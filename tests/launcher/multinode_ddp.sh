#!/usr/bin/env bash
# A 2-node x 2-process DDP job must end with the same parameters as a 4-process job on
# one node (issue 5), launched both ways across two network namespaces (netns_lib.sh):
#   reference   tandemrun --nproc-per-node 4, one node
#   tandemrun   one tandemrun per namespace, 2 x 2
#   mpirun      node 1 entered by a launch agent instead of ssh, 2 x 2
# Every run uses the gloo backend, so the reduction order (and so every bit of the
# parameters) depends only on the world size, not on the layout. A last pair compares
# mpirun's own backend (mpi) 2 x 2 with mpi on one node.
# Usage: multinode_ddp.sh BIN_DIR [WORKER]. Skips (exit 0, "SKIP: ...") without netns,
# without tandem-train, or while tandem-train has no --mode ddp yet.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/netns_lib.sh"
BIN="$1"
TANDEMRUN="$BIN/tandemrun"
TRAIN="$BIN/tandem-train"
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

[ -x "$TRAIN" ] || netns_skip "tandem-train is not built in $BIN"
# DDP is its own issue: until it lands, tandem-train refuses --mode ddp as a usage
# error that says "not built yet".
probe="$(timeout 60 "$TRAIN" --mode ddp --data synthetic --max-steps 0 2>&1)"
if [ $? = 2 ] && grep -q "not built yet" <<<"$probe"; then
  netns_skip "tandem-train has no --mode ddp yet ($(grep -m1 "not built yet" <<<"$probe"))"
fi
netns_setup

TRAIN_ARGS=(--mode ddp --data synthetic --max-steps 20 --seed 7 --collective-timeout-s 120)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

summary_field() {  # FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$1" "$2" 2>/dev/null
}

# run TAG CMD...: runs CMD and keeps its output; a non-zero exit is a failure. Each CMD
# carries a `timeout` against a hang (never an expectation about speed).
run() {
  local tag="$1"
  shift
  local start=$SECONDS
  "$@" >"$NETNS_TMP/$tag.out" 2>&1
  local rc=$?
  echo "($tag ran $((SECONDS - start)) s)"  # information only
  if [ "$rc" != 0 ]; then
    fail "$tag: exit $rc"
    tail -30 "$NETNS_TMP/$tag.out"
  fi
}

# The summary rank 0 wrote for TAG: a 4-rank world with identical replicas.
check_summary() {
  if [ "$(summary_field "$NETNS_TMP/$1.json" world_size)" != 4 ]; then
    fail "$1: summary world_size is not 4"
  elif [ "$(summary_field "$NETNS_TMP/$1.json" replicas_identical)" != True ]; then
    fail "$1: replicas_identical is not true"
  fi
}

checksum() { summary_field "$NETNS_TMP/$1.json" param_checksum; }

# Reference: 4 processes on one node.
run reference timeout 240 "$TANDEMRUN" --nproc-per-node 4 --master-port 0 -- \
  "$TRAIN" "${TRAIN_ARGS[@]}" --backend gloo --summary-json "$NETNS_TMP/reference.json"

# tandemrun: one per namespace.
port="$(free_port_in 0)"
for n in 0 1; do
  (run "tandemrun$n" in_ns "$n" timeout 240 "$TANDEMRUN" --nnodes 2 --node-rank "$n" --nproc-per-node 2 \
     --master-addr "$ADDR0" --master-port "$port" --rdzv-timeout-s 60 -- \
     "$TRAIN" "${TRAIN_ARGS[@]}" --backend gloo --summary-json "$NETNS_TMP/tandemrun.json"
   echo "$FAILED" >"$NETNS_TMP/tandemrun$n.failed") &
done
wait
for n in 0 1; do [ "$(cat "$NETNS_TMP/tandemrun$n.failed")" = 0 ] || FAILED=1; done

# mpirun through the launch agent, gloo backend (its store at node 0's address).
port="$(free_port_in 0)"
run mpirun-gloo mpirun_2x2 -x MASTER_ADDR="$ADDR0" -x MASTER_PORT="$port" \
  "$TRAIN" "${TRAIN_ARGS[@]}" --backend gloo --summary-json "$NETNS_TMP/mpirun-gloo.json"

ref="$(checksum reference)"
check_summary reference
for tag in tandemrun mpirun-gloo; do
  check_summary "$tag"
  got="$(checksum "$tag")"
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then
    echo "ok: $tag 2 x 2 ends with the 4-process parameters ($got)"
  else
    fail "$tag: param_checksum $got differs from the 4-process job's $ref"
  fi
done

# mpirun with its own backend: 2 x 2 across namespaces against 4 on one node.
run mpi-single timeout 240 mpirun --oversubscribe -np 4 --mca btl tcp,self \
  "$TRAIN" "${TRAIN_ARGS[@]}" --backend mpi --summary-json "$NETNS_TMP/mpi-single.json"
port="$(free_port_in 0)"
run mpi-2x2 mpirun_2x2 -x MASTER_ADDR="$ADDR0" -x MASTER_PORT="$port" \
  "$TRAIN" "${TRAIN_ARGS[@]}" --backend mpi --summary-json "$NETNS_TMP/mpi-2x2.json"
check_summary mpi-single
check_summary mpi-2x2
if [ "$(checksum mpi-2x2)" = "$(checksum mpi-single)" ] && [ -n "$(checksum mpi-single)" ]; then
  echo "ok: mpirun (mpi backend) 2 x 2 ends with the 4-process parameters"
else
  fail "mpi backend: 2 x 2 param_checksum $(checksum mpi-2x2) differs from 4 on one node $(checksum mpi-single)"
fi

if [ "$FAILED" != 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
echo "all checks passed"
