"""Draws a window of a DDP run's Chrome traces (tandem-train --trace, one file per rank)
as a PNG timeline: per rank, the compute track (forward, backward, wait for gradients,
optimizer) above the communication track (each bucket's all-reduce, launch to done), so
the overlap of all-reduce with backward shows at a glance.

  plot_trace.py OUT.png TRACE.rank0.json [TRACE.rank1.json ...] [--steps N] [--skip N]

--skip drops the first N optimizer steps (warm-up), --steps draws the N after them.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"load": "#999999", "forward": "#4c72b0", "backward": "#dd8452", "wait": "#c44e52", "optimizer": "#55a868",
           "allreduce": "#8172b3"}


def kind(name):
    for k in COLOURS:
        if name.startswith(k):
            return k
    return None


def load(path):
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_trace: cannot read trace '{path}': {e}")
    return [e for e in events if e.get("ph") == "X" and kind(e["name"])]


def window(spans, skip, steps):
    """The spans between the end of optimizer step `skip` and the end of step skip+steps."""
    ends = sorted(e["ts"] + e["dur"] for e in spans if e["name"].startswith("optimizer"))
    if len(ends) < skip + steps:
        sys.exit(f"plot_trace: the trace has {len(ends)} optimizer steps, fewer than --skip {skip} + --steps {steps}")
    lo = ends[skip - 1] if skip > 0 else min(e["ts"] for e in spans)
    hi = ends[skip + steps - 1]
    return [e for e in spans if e["ts"] >= lo and e["ts"] + e["dur"] <= hi], lo, hi


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("traces", nargs="+")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--skip", type=int, default=5)
    p.add_argument("--title", default="")
    a = p.parse_args()

    ranks = [window(load(t), a.skip, a.steps) for t in a.traces]
    fig, ax = plt.subplots(figsize=(12, 0.6 + 1.0 * len(ranks)))
    labels, ticks = [], []
    for r, (spans, lo, _) in enumerate(ranks):
        base = (len(ranks) - 1 - r) * 2.5
        for e in spans:
            y = base + (0 if e["tid"] == 1 else 1)
            ax.broken_barh([((e["ts"] - lo) / 1000.0, e["dur"] / 1000.0)], (y + 0.1, 0.8),
                           facecolors=COLOURS[kind(e["name"])], edgecolor="white", linewidth=0.3)
        ticks += [base + 0.5, base + 1.5]
        labels += [f"rank {r} comm", f"rank {r} compute"]
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    ax.set_xlabel("ms since the end of the last warm-up step")
    ax.set_title(a.title or f"DDP trace: {a.steps} steps, every rank")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()],
              labels=["load batch", "forward", "backward", "wait for gradients", "optimizer", "bucket all-reduce"],
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=6, frameon=False)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110, bbox_inches="tight")
    print(f"plot: {a.out}")


if __name__ == "__main__":
    main()
