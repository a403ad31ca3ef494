#!/usr/bin/env bash
# Prints how long the Slurm test cluster (slurm_lib.sh) takes to start: from nothing to
# both nodes idle in sinfo, munged and the namespaces included. Not a test (no time is
# asserted); docs/launching.md quotes its output.
# Usage: tests/slurm/startup_time.sh [RUNS (3)]
HERE="$(cd "$(dirname "$0")" && pwd)"
runs="${1:-3}"
case "$runs" in '' | *[!0-9]*) echo "startup_time.sh: RUNS must be a number, not '$runs'" >&2; exit 2 ;; esac
echo "run  start-up (s)"
for i in $(seq 1 "$runs"); do
  # Each run in a shell of its own: its trap tears that cluster down before the next.
  # The mount namespace slurm_lib.sh would re-execute a script in, made here: a bash -c
  # has no script to re-execute.
  TANDEM_SLURM_MOUNT_NS=1 unshare --mount --propagation private -- \
    bash -c 'source "$1/slurm_lib.sh"; t0=$EPOCHREALTIME; slurm_start
             printf "%3d  %.2f\n" "$2" "$(bc <<<"$EPOCHREALTIME - $t0")"' _ "$HERE" "$i" || exit 1
done
