"""Checks a tandem-train --summary-json file against docs/reference.md's keys and optional
expectations. Prints 'summary ok' or the first problem and exits 1."""
import argparse
import json
import sys

KEYS = ["mode", "world_size", "replicas", "backend", "device", "model", "parameters", "steps",
        "global_batch", "samples_per_s", "step_ms", "forward_ms", "backward_ms", "comm_ms",
        "exposed_comm_ms", "optimizer_ms", "final_train_loss", "test_loss", "test_accuracy",
        "param_checksum", "replicas_identical", "buckets", "precision", "grad_reduce_dtype", "bf16_gemm",
        "zero", "optimizer_state_mb_per_rank", "buffer_checksum", "sync_batchnorm", "broadcast_buffers",
        "activation_checkpointing", "peak_temporary_bytes", "peak_temporary_bytes_per_rank",
        "process_cpu_ms", "comm_cpu_ms", "pss_mb_per_rank", "cpu_kernels", "stopped_by", "restart_count",
        "slurm_restart_count", "resumed_from_step", "elastic_batch", "base_world_size", "batch_size", "grad_accum",
        "lr", "min_lr", "resumed_from", "commits", "commit_ms", "elastic_history", "grad_ready", "bucket_cap_mb", "first_bucket_mb",
        "bucket_auto", "fp32_math", "prefetch"]


def fail(msg):
    print("summary check failed:", msg)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("summary")
    p.add_argument("--min-accuracy", type=float)
    p.add_argument("--same-checksum")
    p.add_argument("--other-checksum")
    p.add_argument("--same-buffers", metavar="SUMMARY", help="buffer_checksum equals SUMMARY's")
    p.add_argument("--mode")
    p.add_argument("--steps", type=int)
    # mixed precision (docs/precision.md); --bf16-gemm none: the key is null (fp32 runs)
    p.add_argument("--precision")
    p.add_argument("--grad-reduce-dtype")
    p.add_argument("--bf16-gemm")
    # runtime/cpu/cpu_isa.h: the CPU kernel set the run dispatched to
    p.add_argument("--cpu-kernels")
    p.add_argument("--max-test-loss", type=float)
    p.add_argument("--replicas-identical", action="store_true")
    p.add_argument("--accuracy-near", nargs=2, metavar=("SUMMARY", "TOL"))
    p.add_argument("--loss-near", nargs=2, metavar=("SUMMARY", "TOL"))
    a = p.parse_args()
    s = json.load(open(a.summary))
    for k in KEYS:
        if k not in s:
            fail(f"key '{k}' missing")
    for k in ("mean", "p50", "p90"):
        if k not in s["step_ms"]:
            fail(f"step_ms.{k} missing")
    if not s["samples_per_s"] > 0:
        fail("samples_per_s not positive")
    if len(s["param_checksum"]) != 16:
        fail("param_checksum is not 16 hex digits")
    ready = s["grad_ready"]
    if s["mode"] != "ddp" and ready:
        fail(f"grad_ready outside DDP: {ready[:2]}")
    if ready and sum(g["bytes"] for g in ready) != sum(b["bytes"] for b in s["buckets"]):
        fail("grad_ready's bytes do not add up to the buckets'")
    if any(not g["ready_ms"] > 0 for g in ready):
        fail("a gradient's ready_ms is not positive")
    if s["zero"] not in (0, 1) or (s["zero"] == 1 and s["mode"] != "ddp"):
        fail(f"zero {s['zero']} in mode {s['mode']}")
    state = s["optimizer_state_mb_per_rank"]
    if len(state) != s["world_size"] or not all(v >= 0 for v in state):
        fail(f"optimizer_state_mb_per_rank {state} is not one size per rank of {s['world_size']}")
    if s["zero"] == 0 and len(set(state)) > 1:
        fail(f"optimizer_state_mb_per_rank {state}: every rank of a plain run holds the whole state")
    pss = s["pss_mb_per_rank"]
    if len(pss) != s["world_size"] or not all(v is None or v > 0 for v in pss):
        fail(f"pss_mb_per_rank {pss} is not one positive size (or null) per rank of {s['world_size']}")
    temporary = s["peak_temporary_bytes_per_rank"]
    if len(temporary) != s["world_size"] or not all(isinstance(v, int) and v >= 0 for v in temporary):
        fail(f"peak_temporary_bytes_per_rank {temporary} is not one byte count per rank of {s['world_size']}")
    if s["peak_temporary_bytes"] != max(temporary):
        fail(f"peak_temporary_bytes {s['peak_temporary_bytes']} is not the largest of {temporary}")
    if not s["process_cpu_ms"] > 0:
        fail(f"process_cpu_ms {s['process_cpu_ms']} is not positive")
    comm_cpu = s["comm_cpu_ms"]
    if s["mode"] == "ddp" and s["device"] == "cpu" and not (isinstance(comm_cpu, (int, float)) and comm_cpu >= 0):
        fail(f"comm_cpu_ms {comm_cpu}: a CPU DDP run's comm thread has a CPU time")
    if s["mode"] != "ddp" and comm_cpu is not None:
        fail(f"comm_cpu_ms {comm_cpu} in mode {s['mode']}, which has no comm thread")
    if a.mode and s["mode"] != a.mode:
        fail(f"mode {s['mode']} != {a.mode}")
    if a.steps is not None and s["steps"] != a.steps:
        fail(f"steps {s['steps']} != {a.steps}")
    if a.min_accuracy is not None and not (s["test_accuracy"] or 0) >= a.min_accuracy:
        fail(f"test_accuracy {s['test_accuracy']} < {a.min_accuracy}")
    if a.precision and s["precision"] != a.precision:
        fail(f"precision {s['precision']} != {a.precision}")
    if a.grad_reduce_dtype and s["grad_reduce_dtype"] != a.grad_reduce_dtype:
        fail(f"grad_reduce_dtype {s['grad_reduce_dtype']} != {a.grad_reduce_dtype}")
    if a.bf16_gemm and s["bf16_gemm"] != (None if a.bf16_gemm == "none" else a.bf16_gemm):
        fail(f"bf16_gemm {s['bf16_gemm']} != {a.bf16_gemm}")
    if s["cpu_kernels"] not in ("baseline", "avx2", "avx512", "avx512-bf16"):
        fail(f"cpu_kernels {s['cpu_kernels']!r} is not a kernel set (baseline, avx2, avx512, avx512-bf16)")
    if a.cpu_kernels and s["cpu_kernels"] != a.cpu_kernels:
        fail(f"cpu_kernels {s['cpu_kernels']} != {a.cpu_kernels}")
    if a.max_test_loss is not None and not (s["test_loss"] is not None and s["test_loss"] <= a.max_test_loss):
        fail(f"test_loss {s['test_loss']} > {a.max_test_loss}")
    for opt, key in ((a.accuracy_near, "test_accuracy"), (a.loss_near, "test_loss")):
        if opt:
            other = json.load(open(opt[0]))[key]
            if s[key] is None or other is None or abs(s[key] - other) > float(opt[1]):
                fail(f"{key} {s[key]} is not within {opt[1]} of {other} ({opt[0]})")
    if a.replicas_identical and not s["replicas_identical"]:
        fail("DDP replicas are not identical")
    if a.same_checksum:
        other = json.load(open(a.same_checksum))["param_checksum"]
        if other != s["param_checksum"]:
            fail(f"checksum {s['param_checksum']} != {other} (same seed must give identical parameters)")
    if a.same_buffers:
        other = json.load(open(a.same_buffers))["buffer_checksum"]
        if other != s["buffer_checksum"]:
            fail(f"buffer_checksum {s['buffer_checksum']} != {other} ({a.same_buffers})")
    if a.other_checksum:
        other = json.load(open(a.other_checksum))["param_checksum"]
        if other == s["param_checksum"]:
            fail("a different seed gave identical parameters")
    print("summary ok")


if __name__ == "__main__":
    main()
