"""PyTorch peer for scripts/gpu-check's throughput table: the same models, batch sizes,
optimizer (SGD, momentum 0.9, lr 0.01) and data pipeline as
`tandem-train --device cuda --data synthetic`, on one GPU. Strict FP32 by default: both
torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 are set to False
(PyTorch leaves cuDNN's on by default, which would make the CNN row TF32 against Tandem's
strict fp32); --tf32 sets both to True, the peer of `tandem-train --tf32`. Both settings
are set explicitly and reported in every line. Prints one JSON line per configuration.

Two figures per configuration:
  samples_per_s           the pipeline Tandem runs: uint8 images gathered by a shuffled
                          index and normalised on the host, copied to the GPU (pinned,
                          non-blocking), and the loss read back every step (Tandem reads
                          its loss every step too)
  resident_samples_per_s  the GPU alone: the batch already on the device, no per-step
                          read-back (an upper bound, not the comparison)

  python3 scripts/bench/torch_gpu.py --config mlp:1024 --config cnn:1024 [--steps N] [--warmup N] [--tf32]
"""
import argparse
import json
import time

import torch
import torch.nn as nn


def build(model, hidden):
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(),
                             nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 48), nn.ReLU(), nn.Linear(48, 10))


def run(model_name, batch, hidden, steps, warmup, samples, dev):
    torch.manual_seed(0)
    model = build(model_name, hidden).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (samples, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (samples,), generator=g)
    perm = torch.randperm(samples, generator=g)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)

    def step_fn(x, y, read_loss):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item() if read_loss else None

    def host_batch(step):
        lo = (step * batch) % (samples - batch)
        idx = perm[lo:lo + batch]
        x = (pixels[idx].float() / 255.0 - 0.2860) / 0.3530
        return (x.pin_memory().to(dev, non_blocking=True), labels[idx].pin_memory().to(dev, non_blocking=True))

    # The pipeline Tandem runs.
    for step in range(warmup):
        step_fn(*host_batch(step), True)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for step in range(steps):
        step_fn(*host_batch(warmup + step), True)
    torch.cuda.synchronize(dev)
    pipeline_s = time.perf_counter() - t0

    # The GPU alone.
    xs, ys = host_batch(0)
    for _ in range(warmup):
        step_fn(xs, ys, False)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        step_fn(xs, ys, False)
    torch.cuda.synchronize(dev)
    resident_s = time.perf_counter() - t0

    return {
        "model": model_name,
        "hidden": hidden if model_name == "mlp" else None,
        "batch": batch,
        "steps": steps,
        "samples_per_s": steps * batch / pipeline_s,
        "step_ms_mean": 1000.0 * pipeline_s / steps,
        "resident_samples_per_s": steps * batch / resident_s,
        "peak_device_memory_mb": torch.cuda.max_memory_allocated(dev) / 2**20,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", action="append", required=True, help="MODEL:BATCH, e.g. mlp:1024")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--cnn-steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--samples", type=int, default=60000)
    p.add_argument("--tf32", action="store_true",
                   help="allow TF32 in matmuls and cuDNN convolutions (default: strict fp32, as Tandem without --tf32)")
    a = p.parse_args()
    assert torch.cuda.is_available(), "no CUDA device visible to PyTorch"
    # Explicit both ways: PyTorch's own defaults differ (matmul off, cuDNN on) and have changed.
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device("cuda:0")
    for cfg in a.config:
        model, batch = cfg.split(":")
        steps = a.cnn_steps if model == "cnn" else a.steps
        print(json.dumps(run(model, int(batch), a.hidden, steps, a.warmup, a.samples, dev)), flush=True)


if __name__ == "__main__":
    main()
