# tandem-train --device cuda on the emulated CUDA device (emulated_cuda.cpp: host memory,
# the CPU kernels), against tandem-train --device cpu with the same flags. Every run must
# end with the CPU run's param_checksum, bit for bit, so the device paths (LOCAL_RANK to
# GPU, DataParallel over two devices, DDP staging GPU buckets through pinned host memory
# for mpi and gloo, checkpoints from a device onto the CPU and back) move the same bytes.
# The CNN agrees within 1e-4 instead: its Conv2d batches images per GEMM on a device and
# takes one image at a time on the CPU, so its sums round differently.
# The GPT runs too, in single, DP(2) and DDP(2), bit for bit with the CPU.
# --prefetch is on by default on the device (batches uploaded by the loader thread) and off on
# the CPU, so every comparison above also holds it against none; and explicitly: the device
# without it, the CPU with it (text windows), DDP with --grad-accum 2 on the device with and
# without. The checkpoints below are written and resumed with it on the device.
# Also: the summary's device figures, traces, AdamW state in checkpoints, two DDP ranks
# sharing one GPU, PowerSGD's factors staged through the host, and the errors for too few
# GPUs and a comm hook the staged path cannot run.
source "$(dirname "$0")/../e2e/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
E="$BIN/tandem-train-emulated"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
MPI=(mpirun --oversubscribe -np 2)
COMMON=(--data synthetic --synthetic-train 4096 --synthetic-test 1024 --model mlp --hidden 64 --batch-size 32
        --lr 0.02 --max-steps 40 --no-progress --threads 1)
GPT=(--model gpt --data shakespeare --n-layer 2 --n-head 2 --n-embd 16 --context 16 --optimizer adamw --lr 3e-3
     --warmup-steps 2 --weight-decay 0.1 --clip-grad-norm 0.5 --max-steps 12 --no-progress --threads 1)
export TANDEM_EMULATED_GPUS=2

# --tf32 reaches the device; the emulated one has no TF32 mode, says so, and stays strict fp32.
expect 0 "no TF32 mode" -- "$E" "${COMMON[@]}" --device cuda --tf32 --max-steps 2 --summary-json "$TMP/tf32-cuda.json"

for dev in cpu cuda; do
  expect 0 "done:" -- "$E" "${COMMON[@]}" --device "$dev" --summary-json "$TMP/single-$dev.json"
  expect 0 "done:" -- "$E" "${COMMON[@]}" --device "$dev" --mode dp --devices 2 --summary-json "$TMP/dp-$dev.json"
  expect 0 "done:" -- "${MPI[@]}" "$E" "${COMMON[@]}" --device "$dev" --mode ddp --backend mpi \
    --summary-json "$TMP/mpi-$dev.json"
  expect 0 "done:" -- "$RUN" --nproc-per-node 2 --master-port 0 -- "$E" "${COMMON[@]}" --device "$dev" --mode ddp \
    --backend gloo --trace "$TMP/trace-$dev.json" --summary-json "$TMP/gloo-$dev.json"
  # Many small buckets, reduced after backward; DP accumulating two micro-batches.
  expect 0 "done:" -- "$RUN" --nproc-per-node 2 --master-port 0 -- "$E" "${COMMON[@]}" --device "$dev" --mode ddp \
    --backend gloo --bucket-cap-mb 0.01 --no-overlap --summary-json "$TMP/buckets-$dev.json"
  expect 0 "done:" -- "$E" "${COMMON[@]}" --device "$dev" --mode dp --devices 2 --grad-accum 2 --batch-size 16 \
    --summary-json "$TMP/dpaccum-$dev.json"
  # PowerSGD's factors from the device, staged through the host for gloo (powersgd.h).
  expect 0 "done:" -- "$RUN" --nproc-per-node 2 --master-port 0 -- "$E" "${COMMON[@]}" --device "$dev" --mode ddp \
    --backend gloo --comm-hook powersgd --powersgd-gate always --powersgd-rank 2 --powersgd-start-step 5 \
    --summary-json "$TMP/powersgd-$dev.json"
  # The CNN through DDP: its conv and pooling buffers on the device, 2 ranks of 16.
  expect 0 "done:" -- "${MPI[@]}" "$E" "${COMMON[@]}" --model cnn --batch-size 16 --max-steps 6 --device "$dev" \
    --mode ddp --backend mpi --grad-accum 2 --summary-json "$TMP/cnn-$dev.json"
  # The GPT: embeddings, attention, the tied LM head and clipping on the device; DP(2) and
  # DDP(2) over mpi (staged) see the same 8 windows a step as one process.
  expect 0 "done:" -- "$E" "${GPT[@]}" --device "$dev" --batch-size 8 --summary-json "$TMP/gpt-$dev.json"
  expect 0 "done:" -- "$E" "${GPT[@]}" --device "$dev" --mode dp --devices 2 --batch-size 4 \
    --summary-json "$TMP/gptdp-$dev.json"
  expect 0 "done:" -- "${MPI[@]}" "$E" "${GPT[@]}" --device "$dev" --mode ddp --backend mpi --batch-size 4 \
    --summary-json "$TMP/gptddp-$dev.json"
  # bf16 matrix products (docs/precision.md): bf16 operand buffers on the device, DP's
  # replicas built with the precision, the GPT's nested layers and tied LM head.
  expect 0 "done:" -- "$E" "${GPT[@]}" --device "$dev" --batch-size 8 --precision bf16 \
    --summary-json "$TMP/gptbf16-$dev.json"
  expect 0 "done:" -- "$E" "${COMMON[@]}" --device "$dev" --mode dp --devices 2 --precision bf16 \
    --summary-json "$TMP/dpbf16-$dev.json"
  # Flash-style attention: transformer.cu's tiled launches, run as the CPU's tiled kernel.
  expect 0 "done:" -- "$E" "${GPT[@]}" --device "$dev" --batch-size 8 --attention tiled \
    --summary-json "$TMP/gpttiled-$dev.json"
  expect 0 "done:" -- "$E" "${GPT[@]}" --device "$dev" --mode dp --devices 2 --batch-size 4 --attention tiled \
    --summary-json "$TMP/gptdptiled-$dev.json"
done
expect 0 "done:" -- "$E" "${GPT[@]}" --device cuda --batch-size 8 --no-prefetch --summary-json "$TMP/gptoff-cuda.json"
expect 0 "done:" -- "$E" "${GPT[@]}" --device cpu --batch-size 8 --prefetch on --summary-json "$TMP/gpton-cpu.json"
for pf in auto off; do
  expect 0 "done:" -- "${MPI[@]}" "$E" "${COMMON[@]}" --device cuda --mode ddp --backend mpi --batch-size 16 \
    --grad-accum 2 --prefetch $pf --summary-json "$TMP/accum-$pf.json"
done
# The plain tandem-train on the CPU agrees with the emulated build's CPU run.
expect 0 "done:" -- "$T" "${COMMON[@]}" --summary-json "$TMP/single-real.json"

# Two ranks on one GPU: the host-staged backends wrap LOCAL_RANK around the visible GPUs.
expect 0 "done:" -- env TANDEM_EMULATED_GPUS=1 "${MPI[@]}" -x TANDEM_EMULATED_GPUS "$E" "${COMMON[@]}" \
  --device cuda --mode ddp --backend mpi --summary-json "$TMP/shared.json"

# Checkpoints: written on the device, resumed on the CPU, and the other way round; each
# resumed run ends where the uninterrupted one did. AdamW's moments travel too.
expect 0 "done:" -- "$E" "${COMMON[@]}" --device cuda --checkpoint-dir "$TMP/ck-cuda" --save-every 20 \
  --summary-json "$TMP/ck-cuda.json"
expect 0 "done:" -- "$E" "${COMMON[@]}" --device cpu --resume "$TMP/ck-cuda/step-00000020" \
  --summary-json "$TMP/from-cuda.json"
ADAMW=(--optimizer adamw --lr 0.001 --weight-decay 0.01)
expect 0 "done:" -- "$E" "${COMMON[@]}" "${ADAMW[@]}" --device cuda --checkpoint-dir "$TMP/ck-adamw" --save-every 20 \
  --summary-json "$TMP/ck-adamw.json"
expect 0 "done:" -- "$E" "${COMMON[@]}" "${ADAMW[@]}" --device cpu --resume "$TMP/ck-adamw/step-00000020" \
  --summary-json "$TMP/from-adamw.json"
expect 0 "done:" -- "$E" "${COMMON[@]}" --device cpu --checkpoint-dir "$TMP/ck-cpu" --save-every 20 \
  --summary-json "$TMP/ck-cpu.json"
expect 0 "done:" -- "$E" "${COMMON[@]}" --device cuda --resume "$TMP/ck-cpu/step-00000020" \
  --summary-json "$TMP/from-cpu.json"
# Into another mode: DDP(2) on the devices and on the CPU from the same CPU checkpoint.
for dev in cpu cuda; do
  expect 0 "done:" -- "${MPI[@]}" "$E" "${COMMON[@]}" --device "$dev" --mode ddp --backend mpi --batch-size 16 \
    --resume "$TMP/ck-cpu/step-00000020" --summary-json "$TMP/from-cpu-ddp-$dev.json"
done

# Errors that name the problem.
expect 1 "no CUDA GPU is visible" -- env TANDEM_EMULATED_GPUS=0 "$E" "${COMMON[@]}" --device cuda
expect 1 "--devices 3 needs 3 GPUs but 2 are visible" -- "$E" "${COMMON[@]}" --device cuda --mode dp --devices 3
expect 2 "--comm-hook bf16 with --device cuda needs --backend nccl" -- "$E" "${COMMON[@]}" --device cuda \
  --mode ddp --backend gloo --comm-hook bf16

expect 0 "emulated ok" -- python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
s = lambda k: json.load(open(f"{d}/{k}.json"))
for k in ("single", "dp", "mpi", "gloo", "buckets", "dpaccum", "cnn", "gpt", "gptdp", "gptddp", "gptbf16", "dpbf16",
          "powersgd", "gpttiled", "gptdptiled"):
    cpu, gpu = s(f"{k}-cpu"), s(f"{k}-cuda")
    if k == "cnn":  # Conv2d batches images per GEMM on a GPU, one image on the CPU: other roundings
        for f in ("final_train_loss", "test_loss"):
            assert abs(gpu[f] - cpu[f]) <= 1e-4 * abs(cpu[f]), (k, f, gpu[f], cpu[f])
    else:
        assert gpu["param_checksum"] == cpu["param_checksum"], (k, gpu["param_checksum"], cpu["param_checksum"])
    assert gpu["device"] == "cuda:0" and cpu["device"] == "cpu", (k, gpu["device"], cpu["device"])
    assert gpu["fp32_math"] == "fp32" and cpu["fp32_math"] == "fp32", (k, gpu["fp32_math"], cpu["fp32_math"])
    assert gpu["peak_device_memory_mb"] > 0, (k, gpu.get("peak_device_memory_mb"))
    assert cpu.get("peak_device_memory_mb") in (None, 0), (k, cpu.get("peak_device_memory_mb"))
for k in ("mpi", "gloo", "buckets", "cnn", "gptddp", "powersgd"):
    assert s(f"{k}-cuda")["replicas_identical"] is True, k
assert s("powersgd-cuda")["powersgd"]["compressed_params"] == 3
assert s("powersgd-cuda")["param_checksum"] != s("gloo-cuda")["param_checksum"], "compressed"
for k in ("gptbf16", "dpbf16"):
    assert s(f"{k}-cuda")["bf16_gemm"] == "cublas" and s(f"{k}-cpu")["bf16_gemm"] in ("native", "fallback"), k
    assert s(f"{k}-cpu")["param_checksum"] != s(k.replace("bf16", "") + "-cpu")["param_checksum"], k
assert s("tf32-cuda")["fp32_math"] == "fp32", "the emulated GPU has no TF32 mode"
for k in ("gpttiled", "gptdptiled"):
    assert s(f"{k}-cuda")["attention"] == "tiled" and s(f"{k}-cpu")["attention"] == "tiled", k
assert s("gpt-cuda")["attention"] == "materialized" and s("single-cpu")["attention"] is None
assert len(s("buckets-cuda")["buckets"]) > len(s("gloo-cuda")["buckets"]), "a smaller cap, more buckets"
assert s("single-real")["param_checksum"] == s("single-cpu")["param_checksum"]
# Prefetch: on by default on the device only; the same parameters with and without it.
assert s("gpt-cuda")["prefetch"] is True and s("gpt-cpu")["prefetch"] is False
assert s("gptoff-cuda")["prefetch"] is False and s("gpton-cpu")["prefetch"] is True
assert s("accum-auto")["prefetch"] is True and s("accum-off")["prefetch"] is False
for a, b in (("gptoff-cuda", "gpt-cuda"), ("gpton-cpu", "gpt-cpu"), ("accum-auto", "accum-off")):
    assert s(a)["param_checksum"] == s(b)["param_checksum"], (a, b)
# DDP(2) with batch 32 per rank sees what DP(2) over 64 does; the shared GPU changes nothing.
assert s("shared")["param_checksum"] == s("mpi-cuda")["param_checksum"]
for a, b in (("from-cuda", "ck-cuda"), ("from-cpu", "ck-cpu"), ("ck-cuda", "single-cpu"), ("from-adamw", "ck-adamw"),
             ("from-cpu-ddp-cuda", "from-cpu-ddp-cpu")):
    assert s(a)["param_checksum"] == s(b)["param_checksum"], (a, b)
# Traces from the device: per-rank files with bucket spans, as on the CPU.
for r in (0, 1):
    events = json.load(open(f"{d}/trace-cuda.rank{r}.json"))["traceEvents"]
    assert any(e.get("name", "").startswith("allreduce bucket") for e in events), r
print("emulated ok")
PY
finish
