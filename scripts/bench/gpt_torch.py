"""PyTorch peer of Tandem's GPT (`tandem-train --model gpt --data shakespeare`): the same
model, initialisation, optimizer, learning-rate schedule and data, in PyTorch 1.13 eager.
Parameter names (wte, wpe, blocks.{i}.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}, ln_f),
shapes ((out, in) weights) and the maths match the C++ model exactly, so a dump of this
model is the C++ test's reference (scripts/make-gpt-reference).

  gpt_torch.py reference --out FILE      the tiny reference dump (scripts/make-gpt-reference)
  gpt_torch.py train [--iters 2000] ...  the full recipe; prints the validation loss at the end
  gpt_torch.py bench [--steps 300] ...   timed training, one JSON line (scripts/bench-gpt)

Run it with /usr/bin/python3 (Debian's PyTorch), from the repository root. train and bench
run DDP (gloo) when RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT are set, as scripts/bench-gpt
does; by hand, 2 ranks (Debian's torch.distributed.run 1.13 fails on Python 3.11):
  for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 OPENBLAS_NUM_THREADS=1 \
    /usr/bin/python3 scripts/bench/gpt_torch.py bench --batch-size 6 & done; wait
--batch-size is per rank; tokens/s is global. Each rank draws its own windows.
"""
import argparse
import json
import math
import os
import resource
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ---- model ---------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, n_embd, n_head, context, dropout):
        super().__init__()
        assert n_embd % n_head == 0, "n_embd must be a multiple of n_head"
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.resid_drop = nn.Dropout(dropout)
        # A constant, not a buffer: DDP would broadcast it, and gloo has no bool type.
        self.mask = torch.tril(torch.ones(context, context, dtype=torch.bool))

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, NH, T, HS)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if x.is_cuda and hasattr(F, "scaled_dot_product_attention"):
            # PyTorch 2.x on a GPU: its fused attention, the fastest eager path it has.
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, NH, T, T)
            att = att.masked_fill(~self.mask[:T, :T].to(x.device), float("-inf"))
            att = F.softmax(att, dim=-1)  # no dropout here: as Tandem, only embeddings and residual branches
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, context, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = Attention(n_embd, n_head, context, dropout)
        self.ln2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """GPT-2, pre-LayerNorm, learned positions, LM head tied to wte (no bias)."""

    def __init__(self, vocab_size, context, n_layer, n_head, n_embd, dropout=0.0):
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(context, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, context, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        # GPT-2 init: N(0, 0.02) everywhere, the residual projections scaled by 1/sqrt(2L).
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        for b in self.blocks:
            nn.init.normal_(b.attn.proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))
            nn.init.normal_(b.mlp.proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets=None):  # idx (B, T) int64 -> logits (B, T, V), loss
        T = idx.shape[1]
        assert T <= self.context, f"sequence of {T} tokens, context is {self.context}"
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def make_optimizer(model, lr, betas, eps, weight_decay):
    """AdamW; decay only on parameters with dim >= 2 (matrices, embeddings), as nanoGPT."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def lr_at(step, base_lr, warmup, total, min_lr):
    """Tandem's LrSchedule (runtime/optim/optimizer.cpp): linear warm-up to base_lr, cosine to min_lr."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    if step >= total or total <= warmup:
        return base_lr if total <= warmup else min_lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# ---- data ----------------------------------------------------------------------------

class CharData:
    """Character level: vocabulary = sorted distinct bytes, first 90% train, last 10% validation."""

    def __init__(self, path):
        raw = open(path, "rb").read()
        if not raw:
            raise SystemExit(f"gpt_torch: {path} is empty")
        self.vocab = sorted(set(raw))
        lut = torch.zeros(256, dtype=torch.long)
        lut[torch.tensor(self.vocab)] = torch.arange(len(self.vocab))
        tokens = lut[torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()]
        n_train = len(raw) * 9 // 10
        self.train, self.val = tokens[:n_train], tokens[n_train:]

    def windows(self, split, starts, T):  # (B, T) inputs and targets, windows of T + 1
        x = torch.stack([split[s:s + T] for s in starts])
        y = torch.stack([split[s + 1:s + 1 + T] for s in starts])
        return x, y

    def batch(self, split, B, T, gen):
        starts = torch.randint(len(split) - T, (B,), generator=gen).tolist()
        return self.windows(split, starts, T)


@torch.no_grad()
def val_loss(model, data, batches, B, T, seed):
    """Mean loss over `batches` batches of B random validation windows (a fixed draw)."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    total = 0.0
    device = next(model.parameters()).device
    for _ in range(batches):
        x, y = data.batch(data.val, B, T, gen)
        total += model(x.to(device), y.to(device))[1].item()
    model.train(was_training)
    return total / batches


# ---- safetensors (by hand: no external package) --------------------------------------

_DTYPES = {torch.float32: "F32", torch.int32: "I32"}


def write_safetensors(path, tensors, metadata):
    """tensors: name -> contiguous F32/I32 tensor, written in the given order; metadata: str -> str."""
    assert sys.byteorder == "little", "safetensors data is little-endian"
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()  # native order: little-endian (checked below)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    dt = {"F32": torch.float32, "I32": torch.int32}
    out = {}
    for name, h in header.items():
        lo, hi = h["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + lo:8 + n + hi]), dtype=dt[h["dtype"]]).view(h["shape"])
    return out, meta


# ---- threads and OpenBLAS ---------------------------------------------------------

from torch_threads import openblas_core, set_threads  # noqa: E402  (shared with the other peer)


# ---- reference dump ------------------------------------------------------------------

def reference(a):
    set_threads(1)
    torch.manual_seed(a.seed)
    data = CharData(a.data)
    L, NH, C, T, B = 2, 2, 32, 16, 4
    lr, betas, eps, wd, clip, steps = 1e-2, (0.9, 0.99), 1e-8, 0.1, 1.0, 10
    starts = [0, 1000, 250_000, 1_000_000]
    assert max(starts) + T + 1 <= len(data.train)
    model = GPT(len(data.vocab), T, L, NH, C, dropout=0.0)
    model.train()
    x, y = data.windows(data.train, starts, T)
    tensors = {f"param.{n}": p.detach().clone() for n, p in model.named_parameters()}
    tensors["inputs"] = x.to(torch.int32)
    tensors["targets"] = y.to(torch.int32)
    opt = make_optimizer(model, lr, betas, eps, wd)
    losses, norms = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(x, y)
        loss.backward()
        if step == 0:
            tensors["logits"] = logits.detach().clone()
            tensors["loss"] = loss.detach().reshape(1).clone()
            tensors.update({f"grad.{n}": p.grad.detach().clone() for n, p in model.named_parameters()})
        losses.append(loss.item())
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item())  # norm before clipping
        opt.step()
    if norms[0] <= clip:
        raise SystemExit(f"gpt_torch: the first gradient norm {norms[0]:.4f} does not exceed clip {clip}: "
                         "the reference would not exercise clipping")
    tensors["losses"] = torch.tensor(losses, dtype=torch.float32)
    meta = {"n_layer": L, "n_head": NH, "n_embd": C, "context": T, "batch": B, "vocab_size": len(data.vocab),
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": wd, "clip": clip,
            "steps": steps, "seed": a.seed, "torch": torch.__version__, "window_starts": ",".join(map(str, starts)),
            "data": "data/tinyshakespeare.txt, first 90% (train split)", "grad_norms": ",".join(f"{v:.6f}" for v in norms)}
    write_safetensors(a.out, tensors, meta)
    back, _ = read_safetensors(a.out)  # the file reads back bit for bit
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"gpt reference: {a.out} ({os.path.getsize(a.out)} bytes, {len(tensors)} tensors), "
          f"L={L} NH={NH} C={C} T={T} B={B} V={len(data.vocab)}, {n_params} parameters, torch {torch.__version__}")
    print(f"  windows at {starts}; initial loss {losses[0]:.6f} (ln V = {math.log(len(data.vocab)):.6f})")
    print(f"  gradient norms before clipping (clip {clip}): " + " ".join(f"{v:.4f}" for v in norms))
    print("  losses: " + " ".join(f"{v:.6f}" for v in losses))


# ---- training (train, bench) ---------------------------------------------------------

def run_training(a, steps, timed_from):
    set_threads(a.threads)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    torch.manual_seed(a.seed)  # the same initial parameters on every rank
    data = CharData(a.data)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    # Explicit both ways (PyTorch's defaults differ: matmul off, cuDNN on): strict fp32 unless
    # --tf32, the peer of tandem-train --tf32. Only CUDA reads them.
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    model = GPT(len(data.vocab), a.context, a.n_layer, a.n_head, a.n_embd, a.dropout).to(device)
    model.train()
    net = nn.parallel.DistributedDataParallel(model) if distributed else model
    opt = make_optimizer(model, a.lr, (a.beta1, a.beta2), 1e-8, a.weight_decay)
    gen = torch.Generator().manual_seed(a.seed + 1 + rank)
    log = rank == 0 and getattr(a, "log_every", 0) > 0
    times, t_run = [], time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        lr = lr_at(step, a.lr, a.warmup_steps, steps, a.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = data.batch(data.train, a.batch_size, a.context, gen)
        _, loss = net(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad_norm)
        opt.step()
        if cuda:
            torch.cuda.synchronize()  # a step's time is its GPU work's, as Tandem's
        if step >= timed_from:
            times.append(time.perf_counter() - t0)
        if log and ((step + 1) % a.log_every == 0 or step == 0):
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} lr {lr:.2e} "
                  f"({time.perf_counter() - t_run:.1f} s)", flush=True)
    train_time = time.perf_counter() - t_run
    timed = torch.tensor([sum(times)], dtype=torch.float64)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0], dtype=torch.float64)
    last = torch.tensor([loss.item()], dtype=torch.float64)
    rss_all = [rss]
    if distributed:
        dist.all_reduce(timed)  # mean over ranks of the timed wall time
        timed /= world
        dist.all_reduce(last)
        last /= world
        rss_all = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(rss_all, rss)
    result = None
    if rank == 0:
        result = {
            "tokens_per_s": len(times) * a.batch_size * a.context * world / timed.item() if times else None,
            "step_ms_mean": 1000 * timed.item() / len(times) if times else None,
            "timed_steps": len(times), "steps": steps, "world_size": world, "batch_per_rank": a.batch_size,
            "final_train_loss": last.item(), "train_time_s": train_time,
            "peak_rss_mb": max(r.item() for r in rss_all), "peak_rss_mb_per_rank": [r.item() for r in rss_all],
            "torch": torch.__version__, "threads": torch.get_num_threads(), "openblas_core": openblas_core(),
            "parameters": sum(p.numel() for p in model.parameters()), "device": str(device),
        }
        if cuda:
            result["peak_device_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
            result["gpu"] = torch.cuda.get_device_name(device)
            result["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
            result["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
        if a.eval_batches > 0:
            result["val_loss"] = val_loss(model, data, a.eval_batches, a.eval_batch_size, a.context, a.seed + 10_000)
            result["val_batches"] = f"{a.eval_batches} x {a.eval_batch_size}"
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return result


def train(a):
    r = run_training(a, a.iters, timed_from=max(1, a.iters // 10))
    if r:
        print(f"pytorch {r['torch']} gpt L={a.n_layer} NH={a.n_head} C={a.n_embd} T={a.context}, "
              f"{r['parameters']} parameters, {r['world_size']} rank(s) x batch {a.batch_size}, {a.iters} iters, "
              f"{r['threads']} thread(s), OpenBLAS {r['openblas_core']}")
        print(f"val loss {r['val_loss']:.4f} ({r['val_batches']} windows), final train loss {r['final_train_loss']:.4f}, "
              f"{r['tokens_per_s']:.0f} tokens/s, {r['train_time_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MiB")


def bench(a):
    r = run_training(a, a.steps, timed_from=a.warmup if a.warmup >= 0 else max(1, a.steps // 10))
    if r:
        print(json.dumps(r))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ref = sub.add_parser("reference", help="write the tiny reference dump for the C++ test")
    ref.add_argument("--out", required=True)
    ref.add_argument("--data", default="data/tinyshakespeare.txt")
    ref.add_argument("--seed", type=int, default=1337)
    for name, helptext in (("train", "the full recipe, validation loss at the end"),
                           ("bench", "timed steps, one JSON line")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--data", default="data/tinyshakespeare.txt")
        s.add_argument("--n-layer", type=int, default=4)
        s.add_argument("--n-head", type=int, default=4)
        s.add_argument("--n-embd", type=int, default=128)
        s.add_argument("--context", type=int, default=64)
        s.add_argument("--batch-size", type=int, default=12, help="per rank")
        s.add_argument("--dropout", type=float, default=0.0)
        s.add_argument("--lr", type=float, default=1e-3)
        s.add_argument("--min-lr", type=float, default=1e-4)
        s.add_argument("--warmup-steps", type=int, default=100, help="linear lr warm-up")
        s.add_argument("--beta1", type=float, default=0.9)
        s.add_argument("--beta2", type=float, default=0.99)
        s.add_argument("--weight-decay", type=float, default=0.1)
        s.add_argument("--clip-grad-norm", type=float, default=1.0)
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--seed", type=int, default=1337)
        s.add_argument("--eval-batch-size", type=int, default=12)
        s.add_argument("--device", default="cpu", help="cpu, or cuda (PyTorch 2.x on a GPU: scripts/gpu-check)")
        s.add_argument("--tf32", action="store_true",
                       help="cuda: allow TF32 in matmuls and cuDNN (default strict fp32, as tandem-train without --tf32)")
        if name == "train":
            s.add_argument("--iters", type=int, default=2000)
            s.add_argument("--eval-batches", type=int, default=200)
            s.add_argument("--log-every", type=int, default=100)
        else:
            s.add_argument("--steps", type=int, default=300)
            s.add_argument("--warmup", type=int, default=-1, help="untimed steps (-1: 10%% of --steps)")
            s.add_argument("--eval-batches", type=int, default=200)
    a = p.parse_args()
    if a.cmd != "reference" and not os.path.exists(a.data):
        p.error(f"{a.data} not found (run from the repository root, or pass --data)")
    {"reference": reference, "train": train, "bench": bench}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
