"""tandem-trace merge, checked exactly (tests/e2e/trace_merge.sh).

  check_trace_merge.py make-dumps DIR     writes DIR/flight-rank{0,1}.json beside DIR's
                                          trace.rank{0,1}.json, on the traces' wall clock
  check_trace_merge.py check DIR MERGED   MERGED is the merge of DIR: prints 'merge ok' or
                                          the first problem and exits 1

The dumps are hand-made in the documented format (docs/reference.md, tandem-trace) with ops
before, inside and after each trace's spans, so that the common origin comes from a dump
and every op state is drawn.
"""
import json
import sys


def fail(msg):
    print("merge check failed:", msg)
    sys.exit(1)


def load(path):
    with open(path) as f:
        return json.load(f)


def trace_bounds(trace):
    """(origin_unix_us, first span start, last span end), the span times relative."""
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    return (trace["otherData"]["origin_unix_us"], min(e["ts"] for e in spans),
            max(e["ts"] + e["dur"] for e in spans))


def entry(seq, op, dtype, nbytes, state, enq, start=None, end=None):
    return {"seq": seq, "op": op, "dtype": dtype, "bytes": nbytes, "enqueued_unix_us": enq,
            "started_unix_us": start, "ended_unix_us": end, "state": state}


def make_dumps(d):
    traces = {r: load(f"{d}/trace.rank{r}.json") for r in (0, 1)}
    bounds = {}
    for r, t in traces.items():
        origin, first, last = trace_bounds(t)
        bounds[r] = (origin + int(first), origin + int(last))
    # The ranks start at different moments (by a few ms on a loaded machine), so rank 1's
    # first op is placed before everything of both ranks, not only before its own spans.
    earliest = min(bounds[0][0] - 700, bounds[1][0])
    for r, t in traces.items():
        lo, hi = bounds[r]
        mid = (lo + hi) // 2
        if r == 0:
            entries = [entry(1, "allreduce", "f32", 4096, "completed", lo - 700, lo - 650, lo - 400),
                       entry(2, "broadcast", "bf16", 128, "completed", mid - 30, mid, mid + 20),
                       entry(3, "allreduce", "f32", 4096, "running", hi - 120, hi - 100),
                       entry(4, "allgather", "f32", 512, "queued", hi - 50)]
            reason = "collective timeout"
        else:
            # Rank 1's first op is the earliest thing of all: the merge's time 0.
            entries = [entry(1, "allreduce", "f32", 4096, "completed", earliest - 1500, earliest - 1200,
                             earliest - 1000),
                       entry(2, "broadcast", "bf16", 128, "completed", mid - 10, mid, mid + 40),
                       entry(3, "allreduce", "f32", 4096, "failed", hi - 90, hi - 80, hi - 10)]
            reason = "fatal error"
        dump = {"format": "tandem-flight-recorder", "version": 1, "rank": r, "world_size": 2, "node": 0,
                "host": t["otherData"]["host"], "pid": t["otherData"]["pid"], "backend": "shm", "reason": reason,
                "dumped_at_unix_us": hi + 1000, "capacity": 2048, "recorded": len(entries), "entries": entries}
        with open(f"{d}/flight-rank{r}.json", "w") as f:
            json.dump(dump, f, indent=1)


def check(d, merged_path):
    merged = load(merged_path)
    events = merged["traceEvents"]
    traces = {r: load(f"{d}/trace.rank{r}.json") for r in (0, 1)}
    dumps = {r: load(f"{d}/flight-rank{r}.json") for r in (0, 1)}

    # The anchor tandem-train writes now.
    for r, t in traces.items():
        o = t["otherData"]
        if o["rank"] != r or not isinstance(o["origin_unix_us"], int) or o.get("node") != 0 or not o.get("host"):
            fail(f"trace.rank{r}.json otherData {o}")

    # The common origin: the earliest drawn moment of any input.
    starts = []
    for t in traces.values():
        origin = t["otherData"]["origin_unix_us"]
        starts += [origin + e["ts"] for e in t["traceEvents"] if e.get("ph") == "X"]
    for dump in dumps.values():
        starts.append(dump["dumped_at_unix_us"])
        starts += [e["started_unix_us"] or e["enqueued_unix_us"] for e in dump["entries"]]
    t0 = min(starts)
    if t0 != dumps[1]["entries"][0]["started_unix_us"]:
        fail("the test meant rank 1's first op to be the earliest moment")
    if min(e["ts"] for e in events if e["ph"] != "M") != 0:
        fail("the earliest event is not at 0")

    # Exactly two processes, named for their rank, node and host.
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    want = {r: f"rank {r} (node 0, host {dumps[r]['host']})" for r in (0, 1)}
    if procs != want:
        fail(f"processes {procs}, expected {want}")
    if {e["pid"] for e in events} != {0, 1}:
        fail(f"pids {sorted({e['pid'] for e in events})}")
    threads = {(e["pid"], e["args"]["name"]): e["tid"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    for r in (0, 1):
        for name in ("compute", "comm", "collectives (flight recorder)"):
            if (r, name) not in threads:
                fail(f"rank {r} has no '{name}' thread: {sorted(threads)}")
    if (0, "collectives queued (flight recorder)") not in threads or (1, "collectives queued (flight recorder)") in threads:
        fail("a queued track belongs to rank 0 (one op never started) and not to rank 1")
    flight_tids = {tid for (pid, name), tid in threads.items() if "flight recorder" in name}

    # Every span of each trace, once, on its track, shifted by one constant per rank.
    for r, t in traces.items():
        shift = t["otherData"]["origin_unix_us"] - t0
        for tid in (0, 1):
            mine = [e for e in t["traceEvents"] if e.get("ph") == "X" and e["tid"] == tid]
            out = [e for e in events if e["ph"] == "X" and e["pid"] == r and e["tid"] == tid]
            if [(e["name"], e["dur"]) for e in mine] != [(e["name"], e["dur"]) for e in out]:
                fail(f"rank {r} tid {tid}: {len(mine)} spans in, {len(out)} out, or names/durations differ")
            for a, b in zip(mine, out):
                if abs(b["ts"] - (a["ts"] + shift)) > 1e-3:
                    fail(f"rank {r} '{a['name']}': ts {b['ts']} != {a['ts']} + {shift}")
        if not any(e["name"].startswith("allreduce bucket") for e in t["traceEvents"] if e.get("ph") == "X"):
            fail(f"rank {r}'s trace has no bucket all-reduce spans")
    n_in = sum(1 for t in traces.values() for e in t["traceEvents"] if e.get("ph") == "X")
    n_out = sum(1 for e in events if e["ph"] == "X" and e["tid"] not in flight_tids)
    if n_in != n_out:
        fail(f"{n_in} trace spans in, {n_out} out")

    # The flight recorder's ops: names, tracks, times and args, exactly.
    for r, dump in dumps.items():
        ops = {e["name"]: e for e in events if e["ph"] == "X" and e["pid"] == r and e["tid"] in flight_tids}
        want_names = {f"{e['op']} #{e['seq']}" for e in dump["entries"]}
        if set(ops) != want_names:
            fail(f"rank {r} flight spans {sorted(ops)}, expected {sorted(want_names)}")
        for e in dump["entries"]:
            span = ops[f"{e['op']} #{e['seq']}"]
            started = e["started_unix_us"] is not None
            track = "collectives (flight recorder)" if started else "collectives queued (flight recorder)"
            if span["tid"] != threads[(r, track)]:
                fail(f"rank {r} {span['name']} is on tid {span['tid']}, not '{track}'")
            begin = e["started_unix_us"] if started else e["enqueued_unix_us"]
            end = e["ended_unix_us"] if e["ended_unix_us"] is not None else dump["dumped_at_unix_us"]
            if span["ts"] != begin - t0 or span["dur"] != end - begin:
                fail(f"rank {r} {span['name']}: ts {span['ts']} dur {span['dur']}, expected {begin - t0} {end - begin}")
            a = span["args"]
            if (a["state"], a["dtype"], a["bytes"], a["seq"]) != (e["state"], e["dtype"], e["bytes"], e["seq"]):
                fail(f"rank {r} {span['name']} args {a}")
            if a["queued_us"] != (e["started_unix_us"] or dump["dumped_at_unix_us"]) - e["enqueued_unix_us"]:
                fail(f"rank {r} {span['name']} queued_us {a['queued_us']}")
            if ("at_dump" in a) != (e["ended_unix_us"] is None):
                fail(f"rank {r} {span['name']}: 'at_dump' marks exactly the ops open at the dump")
        dumps_drawn = [e for e in events if e["ph"] == "i" and e["pid"] == r]
        if len(dumps_drawn) != 1 or dumps_drawn[0]["ts"] != dump["dumped_at_unix_us"] - t0 or \
                dumps_drawn[0]["name"] != f"flight-recorder dump: {dump['reason']}":
            fail(f"rank {r} dump instant {dumps_drawn}")
    running = [e for e in events if e.get("args", {}).get("state") == "running"]
    if len(running) != 1 or "still running" not in running[0]["args"]["at_dump"]:
        fail(f"running ops {running}")
    print("merge ok")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make-dumps":
        make_dumps(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
