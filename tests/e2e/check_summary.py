"""Checks a tandem-train --summary-json file against docs/reference.md's keys and optional
expectations. Prints 'summary ok' or the first problem and exits 1."""
import argparse
import json
import sys

KEYS = ["mode", "world_size", "replicas", "backend", "device", "model", "parameters", "steps",
        "global_batch", "samples_per_s", "step_ms", "forward_ms", "backward_ms", "comm_ms",
        "exposed_comm_ms", "optimizer_ms", "final_train_loss", "test_loss", "test_accuracy",
        "param_checksum", "replicas_identical", "buckets"]


def fail(msg):
    print("summary check failed:", msg)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("summary")
    p.add_argument("--min-accuracy", type=float)
    p.add_argument("--same-checksum")
    p.add_argument("--other-checksum")
    p.add_argument("--mode")
    p.add_argument("--steps", type=int)
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
    if a.mode and s["mode"] != a.mode:
        fail(f"mode {s['mode']} != {a.mode}")
    if a.steps is not None and s["steps"] != a.steps:
        fail(f"steps {s['steps']} != {a.steps}")
    if a.min_accuracy is not None and not (s["test_accuracy"] or 0) >= a.min_accuracy:
        fail(f"test_accuracy {s['test_accuracy']} < {a.min_accuracy}")
    if a.same_checksum:
        other = json.load(open(a.same_checksum))["param_checksum"]
        if other != s["param_checksum"]:
            fail(f"checksum {s['param_checksum']} != {other} (same seed must give identical parameters)")
    if a.other_checksum:
        other = json.load(open(a.other_checksum))["param_checksum"]
        if other == s["param_checksum"]:
            fail("a different seed gave identical parameters")
    print("summary ok")


if __name__ == "__main__":
    main()
