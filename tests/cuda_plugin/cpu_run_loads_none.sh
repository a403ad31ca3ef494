# cuda_plugin.cpu_run_loads_none: a 2-rank CPU DDP run of a CUDA build's tandem-train under
# tandemrun never loads the plugin nor any CUDA, cuBLAS or NCCL library. The dynamic loader
# itself reports every object it maps, dlopen'ed ones included (LD_DEBUG=files, one file
# per process), so nothing is sampled and nothing waits. The control: tandem-train
# --device cuda, traced the same way, does show the plugin loaded, so the check can fail.
#   tests/cuda_plugin/cpu_run_loads_none.sh BIN_DIR LIB_DIR TANDEM_CUDA
source "$(dirname "$0")/../e2e/lib.sh"
if [ "$3" != ON ]; then echo "SKIP: this build has no CUDA (TANDEM_CUDA=$3): there is no plugin"; exit 77; fi
CUDA_OBJECTS='libtandem_cuda|libcudart|libcublas|libnccl|libcuda\.'
TRAIN=(--data synthetic --synthetic-train 512 --synthetic-test 128 --batch-size 64 --max-steps 4)

mkdir -p "$TMP/cpu" "$TMP/cuda"
LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/cpu/ld" "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- \
  "$BIN/tandem-train" --mode ddp --model mlp "${TRAIN[@]}" >"$TMP/cpu.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then echo "FAIL: the CPU run exited $rc"; tail -8 "$TMP/cpu.log"; exit 1; fi
echo "ok: the 2-rank CPU DDP run exited 0"
# Each rank's trace names tandem-train as the program that needs its libraries.
ranks="$(grep -l 'needed by .*/tandem-train' "$TMP"/cpu/ld.* | wc -l)"
if [ "$ranks" -ge 2 ]; then echo "ok: $ranks tandem-train processes traced"; else
  echo "FAIL: $ranks tandem-train traces in $TMP/cpu (want 2): LD_DEBUG_OUTPUT not honoured?"; FAILED=1; fi
if grep -hE "file=[^ ]*($CUDA_OBJECTS)" "$TMP"/cpu/ld.* >"$TMP/cpu.found"; then
  echo "FAIL: the CPU run loaded a CUDA object:"; sort -u "$TMP/cpu.found" | head -5; FAILED=1
else
  echo "ok: no process of the CPU run loaded the plugin or a CUDA, cuBLAS or NCCL library ($(cat "$TMP"/cpu/ld.* | grep -c 'file=') loads traced)"
fi

# The control. Without a GPU (or without the CUDA runtime) it fails after loading; either way
# the plugin must appear, as dynamically loaded.
LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/cuda/ld" "$BIN/tandem-train" --device cuda "${TRAIN[@]}" >"$TMP/cuda.log" 2>&1
if grep -qhE 'file=[^ ]*libtandem_cuda\.so.*dynamically loaded by' "$TMP"/cuda/ld.*; then
  echo "ok: control: tandem-train --device cuda loads the plugin ($(grep -hoE "file=[^ ]*($CUDA_OBJECTS)[^ ]*" "$TMP"/cuda/ld.* | sort -u | sed 's/file=//' | tr '\n' ' '))"
else
  echo "FAIL: control: tandem-train --device cuda did not load libtandem_cuda.so:"; tail -3 "$TMP/cuda.log"; FAILED=1
fi
finish
