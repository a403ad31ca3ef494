#!/usr/bin/env python3
"""The job's store under attack while a real job trains (docs/security.md).

    test_store_auth.py BIN_DIR WORKER TEST_NAME

tandemrun runs tandem-train (DDP, the MLP, 2 ranks) with its store on a free port; a
stranger (store-intruder, next to WORKER) attacks that store over real sockets. Each test
checks that the stranger was refused, that tandemrun logged the refusal with the
stranger's address, and that the job ended with the same param_checksum as the same job
run without the stranger. Ordering comes from events, never from sleeps: the ranks wait
at a FIFO before training (and before exiting) until the test opens it, so an attack
happens while the job's store is up and its ranks are running.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_launcher as tl  # noqa: E402  (same BIN_DIR WORKER arguments)

INTRUDER = os.path.join(os.path.dirname(tl.WORKER), "store-intruder")
TRAIN = os.path.join(tl.BIN, "tandem-train")
JOB = "auth-test"
TRAIN_ARGS = ["--mode", "ddp", "--model", "mlp", "--data", "synthetic", "--synthetic-train", "512",
              "--synthetic-test", "128", "--hidden", "32", "--max-steps", "12", "--batch-size", "16",
              "--threads", "1", "--no-progress"]
# Each rank blocks on gate.in.<LOCAL_RANK> before training and gate.out.<LOCAL_RANK>
# after, until the test opens that FIFO for writing and closes it (cat sees EOF).
SECRET = "fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13"  # as `openssl rand -hex 32` makes
GATED = ('cat "$GATES/in.$LOCAL_RANK" >/dev/null; "$0" "$@"; rc=$?; '
         'cat "$GATES/out.$LOCAL_RANK" >/dev/null; exit $rc')


def checksum(summary_path, r):
    tl.check(os.path.exists(summary_path), f"no summary at {summary_path}", r)
    with open(summary_path) as f:
        return json.load(f)["param_checksum"]


def reference_checksum(tmp):
    path = os.path.join(tmp, "reference.json")
    r = tl.Run(["--nproc-per-node", "2", "--master-port", "0", "--job-id", JOB], TRAIN_ARGS + ["--summary-json", path],
               program=TRAIN)
    rc = r.finish()
    tl.check(rc == 0, f"reference run: exit {rc}", r)
    return checksum(path, r)


def open_gate(gates, kind):
    for rank in (0, 1):
        with open(os.path.join(gates, f"{kind}.{rank}"), "w"):
            pass  # opening blocks until the rank is reading; closing releases it


def intrude(mode, port, extra=()):
    p = subprocess.run([INTRUDER, "--port", str(port), "--job-id", JOB, "--mode", mode, *extra],
                       capture_output=True, text=True, timeout=tl.HANG_GUARD_S * 2)
    return p.returncode, p.stdout.splitlines(), p.stderr


def attacked_job(attack, flags=()):
    """Runs the gated job, `attack(port, run)` while its ranks wait, then lets them train.
    Returns (tandemrun's stderr lines, the attack's result, the job's checksum)."""
    with tempfile.TemporaryDirectory() as tmp:
        want = reference_checksum(tmp)
        gates = os.path.join(tmp, "gates")
        os.mkdir(gates)
        for kind in ("in", "out"):
            for rank in (0, 1):
                os.mkfifo(os.path.join(gates, f"{kind}.{rank}"))
        summary = os.path.join(tmp, "attacked.json")
        env = dict(os.environ, GATES=gates)
        # bash starts tandem-train: tandemrun passes the secret to a script only when told.
        r = tl.Run(["--nproc-per-node", "2", "--master-port", "0", "--job-id", JOB, "--pass-job-secret", *flags],
                   ["-c", GATED, TRAIN] + TRAIN_ARGS + ["--summary-json", summary], env=env, program="bash")
        r.wait_for(r"--master-port 0: the store listens on port \d+", stream="err")
        port = tl.store_port(r)
        result = attack(port, r, gates)
        open_gate(gates, "out")
        rc = r.finish()
        tl.check(rc == 0, f"attacked job: exit {rc}", r)
        got = checksum(summary, r)
        tl.check(got == want, f"param_checksum {got} with the intruder, {want} without", r)
        return r.err, result


def refused_line(err, peer, reason, r):
    pattern = re.compile(rf"refused connection from {re.escape(peer)}: {re.escape(reason)}")
    tl.check(any(pattern.search(l) for l in err), f"no log line 'refused connection from {peer}: {reason}'", r)


def simple_attack(mode, reason, extra=()):
    def attack(port, r, gates):
        rc, out, err = intrude(mode, port, extra)
        tl.check(rc == 0, f"{mode}: the intruder was not refused (exit {rc}): {out} {err}", r)
        peers = [l.split()[1] for l in out if l.endswith(" refused") or " refused:" in l]
        tl.check(peers, f"{mode}: no refused connection reported: {out}", r)
        if peers[-1] != "?":
            r.wait_for(rf"refused connection from {re.escape(peers[-1])}: {re.escape(reason)}", stream="err")
        else:
            r.wait_for(rf"refused connection from 127\.0\.0\.1:\d+: {re.escape(reason)}", stream="err")
        open_gate(gates, "in")
        return out
    return attack


def test_auth_no_secret():
    attacked_job(simple_attack("no-secret", "it has no job secret"))


def test_auth_wrong_secret():
    attacked_job(simple_attack("wrong-secret", "wrong proof of the job secret"))


def test_auth_forge():
    # A hello whose job id is a line of tandemrun's own output and terminal escapes: the
    # refusal shows it escaped on the refusal's line, and no line of tandemrun's says the
    # job failed.
    reason = (r"it belongs to job 'x\x0Atandemrun: job failed: rank 1 was killed\x1B[2J\x1B]0;owned\x07', "
              f"this store serves job '{JOB}'")
    err, _ = attacked_job(simple_attack("forge", reason))
    tl.check(not any(l.startswith("tandemrun: job failed") for l in err), f"a forged line: {err}")
    tl.check(not any("\x1b" in l or "\x07" in l for l in err), "an escape sequence reached tandemrun's output")


def test_auth_replay():
    with tempfile.TemporaryDirectory() as keys:
        secret = os.path.join(keys, "secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, SECRET.encode() + b"\n")
        os.close(fd)
        out = attacked_job(simple_attack("replay", "wrong proof of the job secret", ["--secret-file", secret]),
                           flags=["--job-secret-file", secret])[1]
        tl.check(any(l.endswith(" recorded") for l in out), f"the real handshake was not let in: {out}")


def test_auth_half_open():
    def attack(port, r, gates):
        p = subprocess.Popen([INTRUDER, "--port", str(port), "--job-id", JOB, "--mode", "half-open"],
                             stdout=subprocess.PIPE, text=True)
        held = p.stdout.readline().split()
        tl.check(held[-1:] == ["held"], f"half-open: {held}", r)
        # The ranks rendezvous and train while the half-finished handshake is held open.
        open_gate(gates, "in")
        rest = p.stdout.read().split()
        tl.check(p.wait(timeout=tl.HANG_GUARD_S) == 0 and rest[-1:] == ["dropped"],
                 f"half-open: not dropped: {rest}", r)
        r.wait_for(rf"refused connection from {re.escape(held[1])}: it did not finish the handshake within 10000 ms",
                   stream="err")
    attacked_job(attack)


def test_auth_flood():
    n = 200

    def attack(port, r, gates):
        rc, out, err = intrude(f"flood:{n}", port)
        tl.check(rc == 0 and out[-1] == f"flood: {n} of {n} refused", f"flood: {out[-1:]} {err}", r)
        open_gate(gates, "in")
        return out
    err, out = attacked_job(attack)
    peers = {l.split()[1] for l in out if l.startswith("PEER ")}
    logged = [m.group(1) for l in err for m in [re.search(r"refused connection from (\S+): wrong proof", l)]
              if m and m.group(1) in peers]
    summarised = sum(int(m.group(1)) for l in err
                     for m in [re.search(r"refused (\d+) more connections? not logged one by one", l)] if m)
    tl.check(len(logged) + summarised == n,
             f"{len(logged)} refusals logged one by one + {summarised} summarised != {n}")
    tl.check(len(logged) < n, f"all {n} refusals logged one by one: the log is not rate-limited")


STORE = os.path.join(tl.BIN, "tandem-store")
RSS_BOUND_KIB = 16 * 1024  # what a stranger may add to the store's peak RSS: far below one frame


def memory_kib(pid):
    """(VmRSS, VmHWM) of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(l.split(":", 1) for l in f if ":" in l)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def test_auth_memory():
    # Strangers' unfinished frames against tandem-store: 32 that each declare 32 MiB (before
    # the pre-handshake cap, +540 MiB of peak RSS), then 256 of the longest a stranger may
    # send (4,144 bytes), held. Neither raises the store's peak RSS past RSS_BOUND_KIB.
    with tempfile.TemporaryDirectory() as keys:
        secret = os.path.join(keys, "secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET + "\n")
        store = tl.Run([], [], argv=[STORE, "--port", "0", "--job-id", JOB, "--job-secret-file", secret])
        line = store.wait_for(r"serving the store of job .* on .*:\d+ ", stream="err")[0]
        port = int(re.search(r":(\d+) \(", line).group(1))
        _, peak_before = memory_kib(store.proc.pid)
        for mode, want in ((f"frames:32:{32 << 20}:closed", "frames: 32 sent, 32 closed by the store"),
                           ("frames:256:4144", "frames: 256 sent")):
            p = subprocess.Popen([INTRUDER, "--port", str(port), "--job-id", JOB, "--mode", mode],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            lines = [p.stdout.readline().strip(), p.stdout.readline().strip()]
            rss, peak = memory_kib(store.proc.pid)
            p.stdin.close()
            rc = p.wait(timeout=tl.HANG_GUARD_S)
            tl.check(rc == 0 and lines[0].startswith(want) and lines[1] == "HOLDING", f"{mode}: exit {rc}: {lines}",
                     store)
            print(f"{mode}: store VmRSS {rss} KiB, VmHWM {peak} KiB (before the attacks {peak_before} KiB)")
            tl.check(peak - peak_before <= RSS_BOUND_KIB,
                     f"{mode}: the store's peak RSS grew by {peak - peak_before} KiB, more than {RSS_BOUND_KIB}", store)
        store.proc.send_signal(signal.SIGTERM)
        tl.check(store.finish() == 0, "tandem-store did not stop cleanly", store)


def test_auth_storm():
    # Two local flooders open connections as fast as they can, each leaving a handshake
    # pending, while the ranks rendezvous (tandem-train starts after the gate opens), send
    # heartbeats (--hang-timeout-s watches them) and train: the job ends as without them.
    storms = []

    def attack(port, r, gates):
        for _ in range(2):
            p = subprocess.Popen([INTRUDER, "--port", str(port), "--job-id", JOB, "--mode", "storm"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            tl.check(p.stdout.readline().strip() == "STORMING", "storm: no first connection", r)
            storms.append(p)
        open_gate(gates, "in")
        return storms

    try:
        err, _ = attacked_job(attack, flags=["--hang-timeout-s", "30"])
    finally:
        made = []
        for p in storms:
            p.stdin.close()
            out = p.stdout.read().split()
            tl.check(p.wait(timeout=tl.HANG_GUARD_S) == 0, "storm: bad exit")
            made.append(int(out[-2]))
    print(f"storm: {made} connections while the job ran")
    tl.check(all(n > 0 for n in made), f"storm: connections made {made}")


TESTS = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}

if __name__ == "__main__":
    tl.main(TESTS)
