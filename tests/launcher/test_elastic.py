#!/usr/bin/env python3
"""Elastic jobs (tandemrun --nnodes MIN:MAX, docs/elastic.md) on loopback nodes.

    test_elastic.py BIN_DIR WORKER TEST_NAME

Each tandemrun on loopback acts as one node, as the two_nodes_* tests of
test_launcher.py do; the node started with --node-rank 0 hosts the store. The rules of
test_launcher.py hold: no sleep as synchronisation, no assertion on time, no fixed port.
Where a run must not end before the test acts (a kill, a joiner), the test stops reading
node 0's output (its pipe cut to 4 KiB) once the run is underway: node 0's ranks then
block on their next log line and every rank waits for them in its next all-reduce, so
the job cannot run on until the test reads again.
"""
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_launcher as tl  # noqa: E402  (same BIN_DIR WORKER arguments)

TRAIN = os.path.join(tl.BIN, "tandem-train")
F_SETPIPE_SZ = 1031
STEPS = 600  # the gates hold the job near step 150 (or 25) until the test acts
# 4800 samples: an epoch is 100 steps of 3 x 16. Under an elastic tandemrun tandem-train
# keeps the global batch (48) across world sizes, so every commit and checkpoint (each 50
# steps, on the same steps, so that a reference run can resume by checkpoint from the step
# a generation resumed from in memory) converts to 2 and 4 ranks.
JOB = ["--mode", "ddp", "--backend", "gloo", "--data", "synthetic", "--synthetic-train", "4800", "--synthetic-test",
       "512", "--model", "mlp", "--hidden", "64", "--batch-size", "16", "--lr", "0.02", "--no-progress", "--threads",
       "1", "--epochs", "1000", "--max-steps", str(STEPS), "--save-every", "50", "--commit-every", "50", "--keep-last", "0", "--collective-timeout-s", "20",
       "--seed", "3", "--log-every", "1"]


class GatedRun(tl.Run):
    """A Run whose stdout reader stops after the first line matching `gate` until
    release(): with the pipe cut to 4 KiB, the node's ranks then block on their output."""

    def __init__(self, argv, gate):
        self.gate = re.compile(gate)
        self.opened = threading.Event()
        self.reached = threading.Event()
        super().__init__([], [], argv=argv)
        fcntl.fcntl(self.proc.stdout.fileno(), F_SETPIPE_SZ, 4096)

    def _read(self, pipe, lines):
        for raw in pipe:
            line = raw.decode(errors="replace").rstrip("\n")
            with self.cond:
                lines.append(line)
                self.cond.notify_all()
            if lines is self.out and not self.reached.is_set() and self.gate.search(line):
                self.reached.set()
                self.opened.wait()

    def wait_gate(self):
        tl.check(self.reached.wait(tl.HANG_GUARD_S), "the run never reached its gate line", self)

    def release(self):
        self.opened.set()


def node(port, job, spec, extra=(), worker=None, host=False, gate=None, timeout=60):
    argv = [tl.TANDEMRUN, "--nnodes", spec, "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
            str(port), "--job-id", job, "--rdzv-timeout-s", str(timeout), "--grace-s", "2"] + (["--node-rank", "0"] if host
                                                                                        else []) + list(extra)
    argv += ["--"] + (worker or [tl.WORKER, "--mode", "allreduce"])
    return GatedRun(argv, gate) if gate else tl.Run([], [], argv=argv)


def training(tmp):
    """The job every training case runs: (its checkpoint dir, its summary, the command)."""
    ck = os.path.join(tmp, "ck")
    out = os.path.join(tmp, "s.json")
    return ck, out, [TRAIN] + JOB + ["--checkpoint-dir", ck, "--resume", "auto", "--summary-json", out]


def err_has(r, text):
    tl.check(any(text in l for l in r.err), f"tandemrun's log lacks {text!r}", r)


def summary(path):
    with open(path) as f:
        return json.load(f)


def test_elastic_usage():
    for args, expect in ((["--nnodes", "3:2"], "--nnodes 3:2: MIN:MAX needs 1 <= MIN <= MAX"),
                         (["--nnodes", "0:2"], "--nnodes 0:2: MIN:MAX needs 1 <= MIN <= MAX"),
                         (["--nnodes", "a:2"], "--nnodes: 'a' is not an integer"),
                         (["--nnodes", "1:2", "--node-rank", "1"], "--node-rank 1: with --nnodes 1:2 node ranks"),
                         (["--nnodes", "1:2", "--rdzv-endpoint", "h:5", "--node-rank", "0"],
                          "--node-rank: not with --nnodes 1:2 and --rdzv-endpoint"),
                         (["--nnodes", "1:2", "--rdzv-last-call-s", "-1"], "--rdzv-last-call-s"),
                         (["--nnodes", "1:2", "--elastic-recovery", "disk"], "--elastic-recovery: disk not in"),
                         (["--elastic-recovery", "memory"], "--elastic-recovery: only for an elastic job")):
        rc, r = tl.run(args, ["--mode", "ok"])
        tl.check(rc == 2 and expect in r.text()[1], f"tandemrun {args}: exit {rc}, expected 2 naming {expect!r}", r)
        tl.check(not r.out, "a refused command line started workers", r)


def test_elastic_rendezvous():
    # MAX nodes: the rendezvous closes as soon as the third arrives (last call never ends).
    port = tl.free_port()
    runs = [node(port, "el3", "2:3", ["--rdzv-last-call-s", "1000"], host=True)] + \
           [node(port, "el3", "2:3", ["--rdzv-last-call-s", "1000"]) for _ in range(2)]
    for r in runs:
        tl.check(r.finish() == 0, "a node of the 3-node job failed", r)
        r.wait_for(r"allreduce ok sum=6 world=3 ")
        err_has(r, "generation 0: 3 node(s)")
    # MIN of MAX: two nodes start after the last call.
    port = tl.free_port()
    runs = [node(port, "el2", "2:3", ["--rdzv-last-call-s", "0.5"], host=True),
            node(port, "el2", "2:3", ["--rdzv-last-call-s", "0.5"])]
    for r in runs:
        tl.check(r.finish() == 0, "a node of the 2-of-3 job failed", r)
        r.wait_for(r"allreduce ok sum=3 world=2 ")
        err_has(r, "generation 0: 2 node(s)")
    # Below MIN: the job waits --rdzv-timeout-s, then ends naming the count.
    port = tl.free_port()
    r = node(port, "el1", "2:3", host=True, timeout=1)
    tl.check(r.finish() == 1, "a job below MIN did not end with exit 1", r)
    err_has(r, "1 of at least 2 nodes joined generation 0")
    tl.check(not r.out, "a job below MIN started workers", r)


def resumed_reference(tmp, ck, step, world, name):
    """The same training continued from `ck`'s checkpoint at `step` by a fixed job of
    `world` ranks: what the elastic job's new generation must reproduce exactly (with the
    global batch kept, as tandem-train does by default under an elastic tandemrun)."""
    ref_ck = os.path.join(tmp, name + "-ck")
    os.makedirs(ref_ck)
    found = [d for d in os.listdir(ck) if d.startswith("step-") and int(d[5:]) == step]
    tl.check(len(found) == 1, f"no checkpoint of step {step} in {ck}: {sorted(os.listdir(ck))}")
    shutil.copytree(os.path.join(ck, found[0]), os.path.join(ref_ck, found[0]))
    out = os.path.join(tmp, name + ".json")
    r = tl.Run([], [], argv=[tl.TANDEMRUN, "--nproc-per-node", str(world), "--master-port", "0", "--", TRAIN] + JOB +
               ["--checkpoint-dir", ref_ck, "--resume", "auto", "--summary-json", out, "--elastic-batch", "global"])
    tl.check(r.finish() == 0, "the reference run failed", r)
    return summary(out)


def lost_node_case(tmp, kill, recovery):
    """Three nodes of a 2:3 job train; node id 2 is taken away by `kill`(its Run) while
    node 0 is held; the other two form generation 1 and finish, from their newest commit
    (their processes kept, `recovery` "memory") or the newest checkpoint ("checkpoint")."""
    port = tl.free_port()
    ck, out, train = training(tmp)
    # Long enough that generation 0 waits for all three however slowly they start; the
    # survivors wait as long for the lost node before generation 1 closes without it.
    flags = ["--rdzv-last-call-s", "5", "--elastic-recovery", recovery]
    # Past the first checkpoint (step 100), so generation 1 resumes from one.
    logs = os.path.join(tmp, "logs0")
    n0 = node(port, "ell", "2:3", flags + ["--log-dir", logs], worker=train, host=True, gate=r"step 150/")
    n1 = node(port, "ell", "2:3", flags, worker=train)
    n2 = node(port, "ell", "2:3", flags, worker=train)
    n0.wait_gate()
    killed_at = datetime.datetime.now()
    kill(n2)
    n0.release()
    for r in (n0, n1):
        tl.check(r.finish() == 0, "a surviving node did not finish", r)
        err_has(r, "generation 1: 2 node(s)")
        err_has(r, ") left")
        kept = any("1 of this node's 1 worker(s) kept from the generation before" in l for l in r.err)
        tl.check(kept == (recovery == "memory"), f"recovery {recovery}, yet the worker was{'' if kept else ' not'} kept",
                 r)
    if recovery == "memory":
        tl.check(any("elastic recovery: rank 0's commit of step" in l for l in n0.out), "no commit was shared", n0)
    n2.finish()
    # No commit directory is left: the survivors removed theirs, and node 2's (killed
    # outright) when they ended.
    left = [d for d in os.listdir("/dev/shm") if d.startswith("tandem-commit-ell-")] if os.path.isdir("/dev/shm") else []
    tl.check(not left, f"commit directories left in /dev/shm: {left}", n0)
    with open(os.path.join(logs, "elastic.json")) as f:
        h = json.load(f)
    gens = [(g["generation"], len(g["nodes"]), g["world_size"], g["outcome"]) for g in h["generations"]]
    tl.check(gens == [(0, 3, 3, "failed"), (1, 2, 2, "ok")] and h["exit_code"] == 0 and
             h["generations"][1]["change"].endswith(") left") and h["generations"][1]["formed_after_s"] > 0 and
             h["generations"][1]["membership_changes"] == 1, f"elastic.json: {h}", n0)
    s = summary(out)
    tl.check(s["steps"] == STEPS and s["resumed_from_step"] is not None and s["restart_count"] == 1,
             f"summary: steps {s['steps']}, resumed_from_step {s['resumed_from_step']}, restart_count "
             f"{s['restart_count']}", n0)
    hist = [(g["generation"], g["nodes"], g["world_size"]) for g in s["elastic_history"] or []]
    tl.check(s["resumed_from"] == ("commit" if recovery == "memory" else "checkpoint") and
             (s["commits"] > 0) == (recovery == "memory") and hist == [(0, 3, 3), (1, 2, 2)] and
             s["elastic_history"][1]["formed_after_s"] > 0,
             f"summary: resumed_from {s['resumed_from']}, commits {s['commits']}, elastic_history "
             f"{s['elastic_history']}", n0)
    ref = resumed_reference(tmp, ck, s["resumed_from_step"], 2, "ref")
    tl.check(ref["param_checksum"] == s["param_checksum"],
             f"the elastic job ends at {s['param_checksum']}, the 3->2 checkpoint run at {ref['param_checksum']}", n0)
    print(f"ok: 3 -> 2 nodes at step {s['resumed_from_step']}, param_checksum {s['param_checksum']} as by checkpoint")
    # Reported, never asserted: from the kill to generation 1's first step (its last
    # occurrence in node 0's output; generation 0 logged it too).
    first = [l for l in n0.out if f" step {s['resumed_from_step'] + 1}/" in l][-1]
    stamp = re.search(r"\[(\d\d):(\d\d):(\d\d\.\d+)\]", first)
    if stamp:
        at = killed_at.replace(hour=int(stamp.group(1)), minute=int(stamp.group(2)), second=0, microsecond=0) + \
            datetime.timedelta(seconds=float(stamp.group(3)))
        print(f"recovery ({recovery}): {(at - killed_at).total_seconds():.2f} s from the kill to generation 1's first "
              f"step (--rdzv-last-call-s {flags[1]})")


def test_elastic_node_killed():
    # SIGKILL to node id 2's tandemrun: its rank dies with it (parent-death signal). Both
    # recovery paths, one after the other, so their times print side by side.
    for recovery in ("memory", "checkpoint"):
        with tempfile.TemporaryDirectory() as tmp:
            lost_node_case(tmp, lambda r: r.proc.send_signal(signal.SIGKILL), recovery)


def node0_case(tmp, external):
    """Three nodes train; node 0 (the oldest) is killed. With the store on its own host
    the other two go on; with the store on node 0 they end, saying why."""
    ck, out, train = training(tmp)
    store = None
    if external:
        import test_rdzv_endpoint as te  # noqa: E402
        store, port = te.start_store("el0")
        argv = lambda: [tl.TANDEMRUN, "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-endpoint",
                        f"127.0.0.1:{port}", "--job-id", "el0", "--rdzv-timeout-s", "60", "--grace-s", "2",
                        "--rdzv-last-call-s", "5", "--"] + train
        runs = [GatedRun(argv(), r"step 160/") for _ in range(3)]
    else:
        port = tl.free_port()
        runs = [node(port, "el0", "2:3", ["--rdzv-last-call-s", "5"], worker=train, host=(n == 0), gate=r"step 160/",
                     timeout=10) for n in range(3)]
    # Only rank 0 logs its steps, so only node 0 reaches its gate: then it is held, and
    # with it the job. Step 160, not a commit step: node 0, the checkpoint writer, has
    # saved step 150 by then, which the survivors roll back to and the reference resumes from.
    deadline = time.monotonic() + tl.HANG_GUARD_S
    while not any(r.reached.is_set() for r in runs):
        tl.check(time.monotonic() < deadline, "no node reached step 160", runs[0])
        time.sleep(0.05)  # polling output with a deadline, not a synchronisation by time
    first = [r for r in runs if r.reached.is_set()]
    tl.check(len(first) == 1 and any("this is node 0," in l for l in first[0].err),
             "the node logging rank 0's steps is not node 0", first[0])
    first[0].proc.send_signal(signal.SIGKILL)
    for r in runs:
        r.release()
    first[0].finish()
    rest = [r for r in runs if r is not first[0]]
    if external:
        for r in rest:
            tl.check(r.finish() == 0, "a surviving node did not finish", r)
            err_has(r, "generation 1: 2 node(s)")
        tl.check(any(any("this is node 0," in l for l in r.err[-40:]) for r in rest), "no new node 0", rest[0])
        s = summary(out)
        tl.check(s["steps"] == STEPS and (s["resumed_from_step"] or 0) >= 100, f"summary: {s}", rest[0])
        ref = resumed_reference(tmp, ck, s["resumed_from_step"], 2, "ref")
        tl.check(ref["param_checksum"] == s["param_checksum"], "not the checkpoint run's parameters", rest[0])
        te.stop_store(store)
        print("ok: node 0 killed, the store on its own host: the other two finished")
    else:
        for r in rest:
            tl.check(r.finish() == 1, "a node went on without node 0's store", r)
            err_has(r, "an elastic job cannot outlive node 0")
        print("ok: node 0 killed, the store on node 0: the job ended, saying why")


def test_elastic_node0_killed():
    with tempfile.TemporaryDirectory() as tmp:
        node0_case(tmp, external=False)
    with tempfile.TemporaryDirectory() as tmp:
        node0_case(tmp, external=True)


def test_elastic_cooldown():
    """A node whose rank fails first in two generations in a row sits out; the others go
    on without it (a membership change, not a third failure restart)."""
    port = tl.free_port()
    flags = ["--rdzv-last-call-s", "3", "--max-restarts", "1", "--node-cooldown-s", "600"]
    ok = [tl.WORKER, "--mode", "ok"]
    first = node(port, "elc", "2:3", flags, worker=ok, host=True)
    first.wait_for(r"hosting the store of job elc", stream="err")
    bad = node(port, "elc", "2:3", flags, worker=[tl.WORKER, "--mode", "exit:3"])
    bad.wait_for(r"joined the store of job elc", stream="err")
    second = node(port, "elc", "2:3", flags, worker=ok)
    for r in (first, second):
        tl.check(r.finish() == 0, "a good node did not finish", r)
        err_has(r, "generation 0: 3 node(s)")
        err_has(r, "failure restarts 1 of --max-restarts 1")
        err_has(r, "generation 2: 2 node(s)")
        err_has(r, ") left")
    bad.wait_for(r"failed first in 2 generations in a row: it sits out for 600 s", stream="err")
    bad.proc.send_signal(signal.SIGTERM)
    tl.check(bad.finish() == 128 + signal.SIGTERM, "the node sitting out did not stop on SIGTERM", bad)


def test_elastic_node_leaves():
    """SIGTERM to one node's tandemrun takes that node out, not the job: the other two form
    generation 1 at once (the last call, far longer than the rendezvous timeout, is not
    waited for), and finish from the newest checkpoint."""
    with tempfile.TemporaryDirectory() as tmp:
        port = tl.free_port()
        ck, out, train = training(tmp)
        flags = ["--rdzv-last-call-s", "1000"]
        n0 = node(port, "elt", "2:3", flags, worker=train, host=True, gate=r"step 150/")
        n1 = node(port, "elt", "2:3", flags, worker=train)
        n2 = node(port, "elt", "2:3", flags, worker=train)
        n0.wait_gate()
        n2.proc.send_signal(signal.SIGTERM)
        n0.release()
        tl.check(n2.finish() == 128 + signal.SIGTERM, "the node sent SIGTERM did not exit 143", n2)
        err_has(n2, "received SIGTERM and left the job")
        for r in (n0, n1):
            tl.check(r.finish() == 0, "a remaining node did not finish", r)
            err_has(r, "generation 1: 2 node(s)")
            err_has(r, ") left")
            err_has(r, "1 of this node's 1 worker(s) kept from the generation before")
        s = summary(out)
        ref = resumed_reference(tmp, ck, s["resumed_from_step"], 2, "ref")
        tl.check(ref["param_checksum"] == s["param_checksum"] and s["steps"] == STEPS,
                 f"the job ends at {s['param_checksum']}, the checkpoint run at {ref['param_checksum']}", n0)
        print(f"ok: node 2 left on SIGTERM at step {s['resumed_from_step']}; the others finished as by checkpoint")


def test_elastic_join():
    """A 2:4 job runs on three nodes; a fourth asks to join: the three stop at their next
    checkpoint, and generation 1 goes on with four, from that checkpoint, the global batch
    kept (48: 16 per rank, then 12)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = tl.free_port()
        ck, out, train = training(tmp)
        flags = ["--rdzv-last-call-s", "3"]
        n0 = node(port, "elj", "2:4", flags, worker=train, host=True, gate=r"step 25/")
        n0.wait_for(r"hosting the store of job elj", stream="err")
        n1 = node(port, "elj", "2:4", flags, worker=train)
        n2 = node(port, "elj", "2:4", flags, worker=train)
        n0.wait_gate()
        err_has(n0, "generation 0: 3 node(s)")
        n3 = node(port, "elj", "2:4", flags, worker=train)
        # The joiner has reached the store once either side says so: node 0 when it is
        # not yet held by its full pipe, the joiner while node 0 is held.
        deadline = time.monotonic() + tl.HANG_GUARD_S
        while not (any("waiting to be admitted to generation 1" in l for l in n3.err) or
                   any("ask to join" in l for l in n0.err)):
            tl.check(time.monotonic() < deadline and n3.proc.poll() is None, "the joiner never reached the store", n3)
            time.sleep(0.05)  # polling output with a deadline, not a synchronisation by time
        n0.release()
        for r in (n0, n1, n2, n3):
            tl.check(r.finish() == 0, "a node of the grown job failed", r)
            err_has(r, "generation 1: 4 node(s)")
            err_has(r, ") joined")
        err_has(n0, "ask to join")
        # Recovery in memory (the default): the three kept their processes, paused at a
        # commit; the joiner's rank received node 0's commit over the new group.
        err_has(n0, "asking the workers to pause at their next commit")
        for r in (n0, n1, n2):
            err_has(r, "1 of this node's 1 worker(s) kept from the generation before")
        tl.check(any("paused at step" in l for l in n0.out), "rank 0 did not pause at a commit", n0)
        tl.check(any("elastic recovery: rank 0's commit of step" in l and "sent to 4 ranks" in l for l in n0.out),
                 "node 0's commit was not sent to the four ranks", n0)
        s = summary(out)
        tl.check(s["steps"] == STEPS and s["resumed_from_step"] is not None,
                 f"summary: steps {s['steps']}, resumed_from_step {s['resumed_from_step']}", n0)
        tl.check(any("world size 3 -> 4: per-rank batch 16 -> 12" in l for l in n0.out), "no batch change logged", n0)
        tl.check(s["elastic_batch"] == "global" and s["batch_size"] == 12 and s["global_batch"] == 48 and
                 s["base_world_size"] == 3, f"summary: elastic_batch {s['elastic_batch']}, batch_size "
                 f"{s['batch_size']}, global_batch {s['global_batch']}, base_world_size {s['base_world_size']}", n0)
        ref = resumed_reference(tmp, ck, s["resumed_from_step"], 4, "ref")
        tl.check(ref["param_checksum"] == s["param_checksum"],
                 f"the grown job ends at {s['param_checksum']}, the 3->4 checkpoint run at {ref['param_checksum']}",
                 n0)
        print(f"ok: 3 -> 4 nodes at step {s['resumed_from_step']}, param_checksum {s['param_checksum']}")


if __name__ == "__main__":
    name = sys.argv[3]
    try:
        globals()["test_" + name]()
    except tl.Failed as e:
        print("FAIL:", e)
        sys.exit(1)
    finally:
        for p in tl.STARTED:
            if p.poll() is None:
                p.kill()
    print("PASS:", name)
