"""PyTorch DDP peer for scripts/bench-ddp and scripts/bench-powersgd: the same model,
per-rank batch, optimizer and data pipeline as `tandem-train --mode ddp --data synthetic`,
gloo backend, launched by the script with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT. --hook
registers PyTorch's own comm hook (fp16_compress_hook, or powerSGD_hook with the given
rank and start iteration, error feedback and warm start on, as its defaults). Rank 0 prints
one JSON line.
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--samples", type=int, default=60000)
    p.add_argument("--no-comm", action="store_true")
    p.add_argument("--hook", choices=("none", "fp16", "powersgd"), default="none")
    p.add_argument("--powersgd-rank", type=int, default=1)
    p.add_argument("--powersgd-start", type=int, default=10)
    p.add_argument("--one-bucket", action="store_true")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, a.hidden), nn.ReLU(),
                          nn.Linear(a.hidden, a.hidden), nn.ReLU(), nn.Linear(a.hidden, 10))
    if a.one_bucket:
        # PyTorch 1.13's powerSGD_hook over gloo fails with two buckets or more (its second
        # all-reduce, launched from the first's callback, meets another bucket's on the wire:
        # "op.preamble.length <= op.nbytes"); one bucket (a first bucket and a cap beyond the
        # model) keeps every rank's collectives in one order.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
    ddp = DDP(model, bucket_cap_mb=1024) if a.one_bucket else DDP(model)
    if a.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                       start_powerSGD_iter=a.powersgd_start, random_seed=0)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (a.samples, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (a.samples,), generator=g)
    perm = torch.randperm(a.samples, generator=g)

    times = []
    for step in range(a.steps + a.warmup):
        t0 = time.perf_counter()
        lo = (step * a.batch_size * world) % (a.samples - a.batch_size * world)
        idx = perm[lo + rank:lo + a.batch_size * world:world]
        x = (pixels[idx].float() / 255.0 - 0.2860) / 0.3530
        y = labels[idx]
        opt.zero_grad(set_to_none=False)
        if a.no_comm:
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        else:
            loss_fn(ddp(x), y).backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    total = torch.tensor([sum(times)])
    dist.all_reduce(total)  # mean over ranks of the timed wall time
    mean_total = total.item() / world
    if rank == 0:
        print(json.dumps({
            "samples_per_s": len(times) * a.batch_size * world / mean_total,
            "step_ms_mean": 1000 * mean_total / len(times),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "torch": torch.__version__,
        }))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
