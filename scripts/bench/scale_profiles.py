"""Step profiles of GPT-2 124M and ResNet-50 on an H100, for tandem-plan predict
(scripts/plan-at-scale, docs/scaling.md "Predictions at scale").

Each profile is a tandem-train --summary-json as tandem-plan reads it: the phases and
grad_ready, every gradient in the order backward produces it, its fp32 bytes and when it
becomes ready. The gradients are the models' real ones (GPT-2 124M as nanoGPT lays it out,
the LM head tied to the token embedding; ResNet-50 v1.5 with its BatchNorms). The times
come from the FLOPs: forward takes the model's forward FLOPs at the assumed fraction (MFU)
of the H100's dense bf16 peak; backward twice that, each layer's gradients ready once
backward has passed through it, in proportion to the layer's FLOPs; the optimizer reads and
writes AdamW's state (parameter, gradient, two moments: 16 bytes read and 12 written a
parameter) at the H100's HBM bandwidth. `check` compares that proportional rule with
Tandem's own measured ready times of its GPT on this CPU.

  scale_profiles.py write DIR --mfu F [--gpt-tokens N] [--resnet-batch N]
  scale_profiles.py check SUMMARY N_EMBD CONTEXT   (a tandem-train DDP summary of --model gpt)
"""
import json
import sys

H100_BF16_DENSE = 989.4e12  # FLOP/s, H100 SXM, dense bf16 (published)
H100_HBM = 3.35e12          # bytes/s, H100 SXM HBM3 (published)


def gpt2_layers(n_layer=12, c=768, vocab=50257, ctx=1024):
    """(name, params, forward FLOPs per token) in forward order; the tied head last."""
    layers = [("wte", vocab * c, 0), ("wpe", ctx * c, 0)]
    for i in range(n_layer):
        p = f"h.{i}."
        layers += [
            (p + "ln_1", 2 * c, 0),
            (p + "attn.c_attn", c * 3 * c + 3 * c, 2 * c * 3 * c),
            # attention itself: QK^T and PV over the context (causal: half of T^2 on average)
            (p + "attn.core", 0, 2 * 2 * ctx * c // 2),
            (p + "attn.c_proj", c * c + c, 2 * c * c),
            (p + "ln_2", 2 * c, 0),
            (p + "mlp.c_fc", c * 4 * c + 4 * c, 2 * c * 4 * c),
            (p + "mlp.c_proj", 4 * c * c + c, 2 * 4 * c * c),
        ]
    layers += [("ln_f", 2 * c, 0), ("lm_head", 0, 2 * c * vocab)]
    return layers


def backward_profile(model, layers, samples, mfu, tied=()):
    """Forward takes the layers' FLOPs for `samples` at mfu of the peak; backward, twice
    that from the top down, makes each layer's gradient ready once it has passed it. A
    `tied` layer's gradient is complete only at the end (its weight is used again below)."""
    rate = H100_BF16_DENSE * mfu
    flops = [f * samples for _, _, f in layers]
    forward = sum(flops) / rate
    t = forward
    grads = []
    for (name, params, _), f in zip(reversed(layers), reversed(flops)):
        t += 2 * f / rate
        if params and name not in tied:
            grads.append({"name": name, "bytes": 4 * params, "ready_ms": t * 1e3})
    grads += [{"name": f"{name} (tied)", "bytes": 4 * params, "ready_ms": t * 1e3}
              for name, params, _ in layers if name in tied]
    return profile(model, layers, forward, grads)


def gpt2_profile(mfu, tokens):
    # The token embedding is the LM head's weight too (nanoGPT ties them).
    return backward_profile("gpt2-124m", gpt2_layers(), tokens, mfu, tied=("wte",))


def resnet50_layers(image=224, classes=1000):
    """(name, params, forward FLOPs per image) of ResNet-50 v1.5, forward order."""
    layers = []
    hw = image // 2  # conv1, stride 2
    layers.append(("conv1", 7 * 7 * 3 * 64, 2 * 7 * 7 * 3 * 64 * hw * hw))
    layers.append(("bn1", 2 * 64, 0))
    hw //= 2  # max pool
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            out = width * 4
            p = f"layer{stage + 1}.{b}."
            layers.append((p + "conv1", cin * width, 2 * cin * width * hw * hw))
            layers.append((p + "bn1", 2 * width, 0))
            hw2 = hw // stride  # v1.5: the stride on the 3x3
            layers.append((p + "conv2", 9 * width * width, 2 * 9 * width * width * hw2 * hw2))
            layers.append((p + "bn2", 2 * width, 0))
            layers.append((p + "conv3", width * out, 2 * width * out * hw2 * hw2))
            layers.append((p + "bn3", 2 * out, 0))
            if b == 0:
                layers.append((p + "downsample", cin * out + 2 * out, 2 * cin * out * hw2 * hw2))
            cin, hw = out, hw2
    layers.append(("fc", 2048 * classes + classes, 2 * 2048 * classes))
    return layers


def resnet50_profile(mfu, batch):
    return backward_profile("resnet50", resnet50_layers(), batch, mfu)


def profile(model, layers, forward, grads):
    params = sum(p for _, p, _ in layers)
    optimizer = params * 28 / H100_HBM
    step = 3 * forward + optimizer
    return {"model": model, "backend": "nccl (predicted)", "world_size": 1, "grad_accum": 1,
            "step_ms": {"mean": step * 1e3}, "forward_ms": forward * 1e3, "backward_ms": 2 * forward * 1e3,
            "optimizer_ms": optimizer * 1e3, "exposed_comm_ms": 0.0, "buckets": [], "grad_ready": grads,
            "parameters": params}


def check(path, c, t):
    """Tandem's measured GPT: each block's share of backward against its FLOP share."""
    s = json.load(open(path))
    ready = {g["name"]: g["ready_ms"] for g in s["grad_ready"]}
    # The first gradient of each block to become ready (backward meets a block's last
    # layer first), in block order from the top.
    blocks = sorted({int(n.split(".")[1]) for n in ready if n.startswith("blocks.")}, reverse=True)
    if len(blocks) < 3:
        sys.exit(f"scale_profiles.py: {path}: fewer than 3 transformer blocks in grad_ready")
    first = [min(t for n, t in ready.items() if n.startswith(f"blocks.{b}.")) for b in blocks]
    spans = [b - a for a, b in zip(first, first[1:])]
    mean = sum(spans) / len(spans)
    worst = max(abs(x / mean - 1) for x in spans)
    print(f"Tandem's GPT on this CPU ({len(blocks)} blocks, {path}): each block's backward "
          f"{min(spans):.2f}-{max(spans):.2f} ms, within {worst:.0%} of their mean {mean:.2f} ms: identical blocks "
          f"take equal shares, as the FLOP-proportional rule has them")
    # Within the top block: the time from one weight's gradient to the next against the
    # FLOPs between them (per token: 8C^2 for each MLP matrix, 2C^2 for the attention's
    # projection, 6C^2 + 2TC for QKV and the attention itself).
    weight = lambda n: ready[f"blocks.{blocks[0]}.{n}.weight"]
    start = ready.get("ln_f.weight", first[0])
    names = ("mlp.proj", "mlp.fc", "attn.proj", "attn.qkv")
    if all(f"blocks.{blocks[0]}.{n}.weight" in ready for n in names):
        cuts = [start] + [weight(n) for n in names]
        measured = [b - a for a, b in zip(cuts, cuts[1:])]
        flops = [8 * c * c, 8 * c * c, 2 * c * c, 6 * c * c + 2 * t * c]
        shares = ", ".join(f"{n} {m / sum(measured):.0%} (FLOPs {f / sum(flops):.0%})"
                           for n, m, f in zip(names, measured, flops))
        print(f"  within the top block, each layer's share of its backward: {shares}")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        check(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    if len(sys.argv) < 3 or sys.argv[1] != "write":
        sys.exit(__doc__)
    out, args = sys.argv[2], sys.argv[3:]
    opts = {"--mfu": 0.4, "--gpt-tokens": 65536, "--resnet-batch": 256}
    for k, v in zip(args[::2], args[1::2]):
        if k not in opts:
            sys.exit(f"scale_profiles.py: unknown option {k}")
        opts[k] = float(v) if k == "--mfu" else int(v)
    for name, prof in (("gpt2", gpt2_profile(opts["--mfu"], opts["--gpt-tokens"])),
                       ("resnet50", resnet50_profile(opts["--mfu"], opts["--resnet-batch"]))):
        json.dump(prof, open(f"{out}/{name}.json", "w"))
        total = sum(g["bytes"] for g in prof["grad_ready"])
        print(f"{name}: {prof['parameters'] / 1e6:.1f} M parameters, {total / 2**20:.0f} MiB of fp32 gradients; "
              f"forward {prof['forward_ms']:.1f} ms, backward {prof['backward_ms']:.1f} ms, optimizer "
              f"{prof['optimizer_ms']:.2f} ms a step on one H100 at {opts['--mfu']:.0%} of its dense bf16 peak")


if __name__ == "__main__":
    main()
