# DDP's buckets in shared memory on shm (collectives/shm/peer_buffers.h), through the real
# programs at 2 ranks:
#  1. with them (the default), without them (TANDEM_SHM_BUFFERS=0) and with a /dev/shm too
#     small for them (a 6 MiB tmpfs mounted over it in a mount namespace of the test's own:
#     the segment fits, the 2.6 MB bucket does not): the same parameters bit for bit; the
#     small one says why it fell back, naming /dev/shm, and still trains;
#  2. nothing of the job is left in /dev/shm afterwards;
#  3. a malformed TANDEM_SHM_BUFFERS fails cleanly, naming the variable.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
JOB="shmbuf-$$"
ARGS=(--mode ddp --backend shm --model mlp --hidden 512 --data synthetic --synthetic-train 2048 --synthetic-test 256
      --batch-size 32 --threads 1 --max-steps 30 --epochs 100 --no-progress)
ddp() { "$RUN" --nproc-per-node 2 --master-port 0 --job-id "$JOB" -- "$T" "${ARGS[@]}" "$@"; }

expect 0 "done:" -- ddp --summary-json "$TMP/shared.json"
expect 0 "" -- test -z "$(ls /dev/shm | grep -F -- "$JOB")"
TANDEM_SHM_BUFFERS=0 expect 0 "done:" -- ddp --summary-json "$TMP/copying.json"
# The whole job inside one mount namespace whose /dev/shm holds 6 MiB.
small() {
  unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=6m tmpfs /dev/shm && exec "$@"' sh \
    "$RUN" --nproc-per-node 2 --master-port 0 --job-id "$JOB" -- "$T" "${ARGS[@]}" "$@"
}
expect 0 "is /dev/shm large enough?" -- small --summary-json "$TMP/small.json"
for s in copying small; do
  expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/$s.json" --mode ddp --steps 30 \
    --same-checksum "$TMP/shared.json"
done
TANDEM_SHM_BUFFERS=yes expect 1 "TANDEM_SHM_BUFFERS must be 0 or 1, not 'yes'" -- ddp
finish
