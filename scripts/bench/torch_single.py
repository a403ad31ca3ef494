"""PyTorch peer for scripts/bench-single: the same model, batch, optimizer and data
pipeline as `tandem-train --data synthetic`, one process. Prints one JSON line.

Data: uint8 images gathered by a shuffled index and normalised per batch, as Tandem's
loader does, so both sides pay for batch assembly.
"""
import argparse
import json
import resource
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="mlp")
    p.add_argument("--samples", type=int, default=60000)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, a.hidden), nn.ReLU(),
                              nn.Linear(a.hidden, a.hidden), nn.ReLU(), nn.Linear(a.hidden, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(3136, 48), nn.ReLU(), nn.Linear(48, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (a.samples, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (a.samples,), generator=g)
    perm = torch.randperm(a.samples, generator=g)

    times = []
    for step in range(a.steps + a.warmup):
        t0 = time.perf_counter()
        lo = (step * a.batch_size) % (a.samples - a.batch_size)
        idx = perm[lo:lo + a.batch_size]
        x = (pixels[idx].float() / 255.0 - 0.2860) / 0.3530
        y = labels[idx]
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    total = sum(times)
    print(json.dumps({
        "samples_per_s": len(times) * a.batch_size / total,
        "step_ms_mean": 1000 * total / len(times),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
