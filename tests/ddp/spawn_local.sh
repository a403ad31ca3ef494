#!/usr/bin/env bash
# spawn_local.sh N -- CMD...: starts N copies of CMD with RANK/WORLD_SIZE/LOCAL_RANK/
# MASTER_ADDR/MASTER_PORT set (rank 0 hosts the store on a free loopback port), waits
# for all of them, and exits non-zero if any failed. Kept for tests that must not
# depend on tandemrun; tandemrun's own tests cover the launcher.
set -uo pipefail
N="$1"; shift; [ "$1" = "--" ] && shift
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
pids=()
for ((r = 0; r < N; r++)); do
  RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT OMP_NUM_THREADS=1 \
    OPENBLAS_NUM_THREADS=1 TANDEM_JOB_ID="spawn-$PORT" "$@" > >(sed "s/^/[$r] /") 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=1
done
exit $rc
