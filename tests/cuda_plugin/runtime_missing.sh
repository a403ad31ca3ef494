# cuda_plugin.runtime_missing: a CUDA build on a machine without the CUDA runtime. In a
# private mount namespace (unshare -m) an empty tmpfs covers the directory the plugin finds
# libcudart in, so the plugin's dependencies are missing just as on a CPU machine. There:
#   a 2-rank CPU DDP run under tandemrun exits 0;
#   tandem-train --device cuda exits 1 naming the missing library (the dynamic loader's words);
#   tandem-bench-collectives --backend nccl under tandemrun fails the same way;
# and, outside the namespace, a plugin of another Tandem version and a TANDEM_CUDA_PLUGIN
# that names no file are refused, saying so, with exit 1.
#   tests/cuda_plugin/runtime_missing.sh BIN_DIR LIB_DIR TANDEM_CUDA [--hidden]
source "$(dirname "$0")/../e2e/lib.sh"
LIB="$2"
if [ "$3" != ON ]; then echo "SKIP: this build has no CUDA (TANDEM_CUDA=$3): there is no plugin"; exit 77; fi
PLUGIN="$LIB/libtandem_cuda.so"
TRAIN=(--data synthetic --synthetic-train 512 --synthetic-test 128 --batch-size 64 --max-steps 4)
RUN2=("$BIN/tandemrun" --nproc-per-node 2 --master-port 0 --)

# Runs inside the namespace (the script calls itself with --hidden).
if [ "${4:-}" = --hidden ]; then
  resolved="$(ldd "$PLUGIN" 2>&1)"
  if grep -q 'libcudart.*not found' <<<"$resolved"; then
    echo "ok: hidden: ldd says the plugin's libcudart is not found"
  else
    echo "FAIL: libcudart is still visible to the plugin: $(grep libcudart <<<"$resolved")"; exit 1
  fi
  expect 0 "done:" -- "${RUN2[@]}" "$BIN/tandem-train" --mode ddp --model mlp "${TRAIN[@]}"
  expect 1 "libcudart.so" -- "$BIN/tandem-train" --device cuda "${TRAIN[@]}"
  expect 1 "cannot open shared object file" -- "$BIN/tandem-train" --device cuda "${TRAIN[@]}"
  expect 1 "no CUDA GPU is visible to this process (cannot load the CUDA plugin" -- \
    "$BIN/tandem-train" --device cuda "${TRAIN[@]}"
  expect 1 "the nccl backend cannot start: cannot load the CUDA plugin" -- \
    "${RUN2[@]}" "$BIN/tandem-bench-collectives" --backend nccl -b 8 -e 8 -n 1 -w 0
  expect 0 "--device" -- "$BIN/tandem-train" --help
  finish
  exit 0  # finish returns on success
fi

# --- outside: the plugin's version and path -------------------------------------------------
expect 1 "refusing the CUDA plugin $LIB/libtandem_cuda_fake_version.so: it is Tandem 0.0.0-fake's" -- \
  env TANDEM_CUDA_PLUGIN="$LIB/libtandem_cuda_fake_version.so" "$BIN/tandem-train" --device cuda "${TRAIN[@]}"
expect 1 "TANDEM_CUDA_PLUGIN=$TMP/none.so: no such file" -- \
  env TANDEM_CUDA_PLUGIN="$TMP/none.so" "$BIN/tandem-train" --device cuda "${TRAIN[@]}"
# A CPU run never looks for the plugin, so a wrong TANDEM_CUDA_PLUGIN does not matter to it.
expect 0 "done:" -- env TANDEM_CUDA_PLUGIN="$TMP/none.so" "$BIN/tandem-train" "${TRAIN[@]}"

# --- inside: the CUDA runtime hidden ----------------------------------------------------
resolved="$(ldd "$PLUGIN" 2>&1)"
cudart="$(awk '/libcudart/ && $3 ~ /^\// {print $3}' <<<"$resolved" | head -1)"
if [ -z "$cudart" ]; then
  echo "note: this machine has no CUDA runtime for the plugin already: checking without hiding it"
  bash "$0" "$BIN" "$LIB" ON --hidden || FAILED=1
  finish
  exit 0
fi
dir="$(dirname "$(readlink -f "$cudart")")"
if ! unshare -m true 2>"$TMP/unshare.err"; then
  echo "SKIP: cannot hide $dir: unshare -m is not permitted here ($(head -1 "$TMP/unshare.err")); run as root"
  [ "$FAILED" -ne 0 ] && finish
  exit 77
fi
echo "hiding $dir (where the plugin finds $(basename "$cudart")) in a private mount namespace"
# The tmpfs is private to the namespace and goes with it.
unshare -m bash -c 'mount -t tmpfs tandem-hide-cuda "$1" && shift && exec bash "$@"' _ "$dir" \
  "$0" "$BIN" "$LIB" ON --hidden || FAILED=1
finish
exit 0
