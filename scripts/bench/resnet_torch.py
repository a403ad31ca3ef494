"""PyTorch twin of Tandem's ResNet (`tandem-train --model resnet`, zoo/resnet.h): the CIFAR
ResNet of He et al. (2016) with option-B projection shortcuts, in plain torch.nn modules named
as Tandem names its parameters and buffers (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0,
..., fc), so Tandem's model.safetensors loads with load_state_dict(strict=True).

  resnet_torch.py --load-safetensors PATH [--data-dir DIR] [--batch-size N]
      evaluates a Tandem checkpoint's model.safetensors on the Fashion-MNIST test set (eval
      mode: BatchNorm's running statistics), pixels normalised exactly as Tandem's loader
      does; prints the test accuracy and loss. Depth, width, channels and classes are read
      off the tensors' names and shapes.
  resnet_torch.py [--depth 20] [--width 16] [--batch-size 128] [--steps N] [--warmup N] ...
      timed training (SGD with momentum, cross-entropy) on uint8 images gathered by a
      shuffled index and normalised per batch, as torch_single.py / torch_ddp.py do for the
      mlp and cnn; one process, or DDP over gloo when RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
      are set (scripts/bench-resnet starts the ranks). --batch-size is per rank; rank 0
      prints one JSON line, samples/s global.

Run it with /usr/bin/python3 (Debian's python3-torch), from the repository root.
"""
import argparse
import gzip
import json
import os
import resource
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# Tandem's normalisation (runtime/data/dataset.h): (p / 255 - mean) / std, each step in float32.
FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530


# ---- model ---------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out_channels))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, depth=20, width=16, in_channels=1, classes=10):
        super().__init__()
        if depth < 8 or (depth - 2) % 6 != 0:
            raise SystemExit(f"resnet_torch: --depth must be 6n + 2 (8, 14, 20, 32, ...), got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._stage(n, width, width, 1)
        self.layer2 = self._stage(n, width, 2 * width, 2)
        self.layer3 = self._stage(n, 2 * width, 4 * width, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, classes)
        # torchvision's init (Tandem's too, with its own random streams).
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    @staticmethod
    def _stage(blocks, in_channels, out_channels, stride):
        return nn.Sequential(*[BasicBlock(in_channels if i == 0 else out_channels, out_channels,
                                          stride if i == 0 else 1) for i in range(blocks)])

    def forward(self, x):  # (N, C, H, W) -> logits (N, classes)
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def shape_of(state):
    """(depth, width, in_channels, classes) of a ResNet state dict, from its names and shapes."""
    width, in_channels = state["conv1.weight"].shape[:2]
    blocks = len({k.split(".")[1] for k in state if k.startswith("layer1.")})
    return 6 * blocks + 2, width, in_channels, state["fc.weight"].shape[0]


# ---- safetensors (by hand: Debian packages no safetensors module) ---------------------

_DTYPES = {"F32": torch.float32, "I64": torch.int64, "I32": torch.int32}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        if h["dtype"] not in _DTYPES:
            raise SystemExit(f"resnet_torch: {path}: tensor {name} has dtype {h['dtype']}, expected one of {list(_DTYPES)}")
        lo, hi = h["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + lo:8 + n + hi]), dtype=_DTYPES[h["dtype"]]) if hi > lo else \
            torch.zeros(0, dtype=_DTYPES[h["dtype"]])
        out[name] = t.reshape(h["shape"])
    return out


# ---- data ----------------------------------------------------------------------------

def _f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def pixel_table():
    """float32 of (p / 255 - mean) / std for every byte, each operation rounded to float32 as
    Tandem's loader does (runtime/data/loader.cpp): the same bits as Tandem's batches."""
    mean, std = _f32(FASHION_MNIST_MEAN), _f32(FASHION_MNIST_STD)
    return torch.tensor([_f32(_f32(_f32(p / 255.0) - mean) / std) for p in range(256)], dtype=torch.float32)


def read_idx(path):
    raw = gzip.open(path, "rb").read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise SystemExit(f"resnet_torch: {path} is not a uint8 IDX file")
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def fashion_mnist_test(data_dir):
    images = os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")
    labels = os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")
    for f in (images, labels):
        if not os.path.exists(f):
            raise SystemExit(f"resnet_torch: {f} not found (install the Debian package dataset-fashion-mnist, "
                             "or pass --data-dir)")
    x, y = read_idx(images), read_idx(labels)
    return x.reshape(x.shape[0], 1, x.shape[1], x.shape[2]), y.long()


# ---- threads and OpenBLAS (as gpt_torch.py) -------------------------------------------

from torch_threads import openblas_core, set_threads  # noqa: E402  (shared with the other peer)


# ---- the two uses --------------------------------------------------------------------

@torch.no_grad()
def evaluate(a):
    set_threads(a.threads)
    state = read_safetensors(a.load_safetensors)
    depth, width, in_channels, classes = shape_of(state)
    model = ResNet(depth, width, in_channels, classes)
    model.load_state_dict(state, strict=True)
    model.eval()
    pixels, labels = fashion_mnist_test(a.data_dir)
    table = pixel_table()
    correct, loss = 0, 0.0
    for lo in range(0, len(labels), a.batch_size):
        x = table[pixels[lo:lo + a.batch_size].long()]
        logits = model(x)
        y = labels[lo:lo + a.batch_size]
        correct += (logits.argmax(1) == y).sum().item()
        loss += F.cross_entropy(logits, y, reduction="sum").item()
    n = len(labels)
    print(json.dumps({"test_accuracy": correct / n, "test_loss": loss / n, "correct": correct, "samples": n,
                      "model": f"resnet depth {depth} width {width}", "parameters": sum(p.numel() for p in model.parameters()),
                      "torch": torch.__version__}))


def bench(a):
    set_threads(a.threads)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    torch.manual_seed(0)
    model = ResNet(a.depth, a.width, 1, 10)
    model.train()
    net = nn.parallel.DistributedDataParallel(model) if distributed else model
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (a.samples, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (a.samples,), generator=g)
    perm = torch.randperm(a.samples, generator=g)
    global_batch = a.batch_size * world
    times = []
    for step in range(a.steps + a.warmup):
        t0 = time.perf_counter()
        lo = (step * global_batch) % (a.samples - global_batch)
        idx = perm[lo + rank:lo + global_batch:world]
        x = (pixels[idx].float() / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
        y = labels[idx]
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(net(x), y).backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    total = torch.tensor([sum(times)], dtype=torch.float64)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0], dtype=torch.float64)
    rss_all = [rss]
    if distributed:
        dist.all_reduce(total)  # mean over ranks of the timed wall time
        total /= world
        rss_all = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(rss_all, rss)
    if rank == 0:
        print(json.dumps({
            "samples_per_s": len(times) * global_batch / total.item(),
            "step_ms_mean": 1000 * total.item() / len(times),
            "timed_steps": len(times), "world_size": world, "batch_per_rank": a.batch_size,
            "peak_rss_mb": max(r.item() for r in rss_all), "peak_rss_mb_per_rank": [r.item() for r in rss_all],
            "parameters": sum(p.numel() for p in model.parameters()),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "openblas_core": openblas_core(),
        }))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load-safetensors", metavar="PATH", help="evaluate this model.safetensors instead of training")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST's gzip IDX files")
    p.add_argument("--depth", type=int, default=20, help="6n + 2 (training only: evaluation reads it off the file)")
    p.add_argument("--width", type=int, default=16, help="channels of the first stage (training only)")
    p.add_argument("--batch-size", type=int, default=128, help="per rank (evaluation: images per forward)")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--samples", type=int, default=60000)
    a = p.parse_args()
    if a.batch_size <= 0 or a.steps <= 0 or a.warmup < 0 or a.threads <= 0:
        raise SystemExit("resnet_torch: --batch-size, --steps and --threads must be positive, --warmup >= 0")
    if a.load_safetensors:
        evaluate(a)
    else:
        if a.samples < 2 * a.batch_size * int(os.environ.get("WORLD_SIZE", "1")):
            raise SystemExit("resnet_torch: --samples must hold at least two global batches")
        bench(a)


if __name__ == "__main__":
    main()
