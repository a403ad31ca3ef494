#!/usr/bin/env python3
"""The store on its own host: tandem-store, and tandemrun --rdzv-endpoint joining it.

    test_rdzv_endpoint.py BIN_DIR WORKER TEST_NAME

Two tandemruns with distinct node ranks on loopback act as two nodes (as the
two_nodes_* tests of test_launcher.py do); a tandem-store the test starts serves their
store, and the test stops it by the pid it started. The rules of test_launcher.py hold:
no sleep as synchronisation, no assertion on time, no fixed port (tandem-store --port 0
prints the one it picked).
"""
import os
import re
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_launcher as tl  # noqa: E402  (same BIN_DIR WORKER arguments)

STORE = os.path.join(tl.BIN, "tandem-store")


def start_store(job, extra=()):
    """tandem-store on a free port; returns (the Run, its port)."""
    s = tl.Run([], [], argv=[STORE, "--port", "0", "--job-id", job] + list(extra))
    line = s.wait_for(r"serving the store of job .* on .*:\d+ ", stream="err")[0]
    return s, int(re.search(r":(\d+) \(", line).group(1))


def stop_store(s):
    """SIGTERM to the pid the test started: a clean stop, exit 0."""
    s.proc.send_signal(signal.SIGTERM)
    rc = s.finish()
    tl.check(rc == 0, f"tandem-store: exit {rc} after SIGTERM, expected 0", s)
    tl.check(any("received SIGTERM: stopping the store" in l for l in s.err), "tandem-store: no stop line", s)


def nodes(endpoint, job, worker_args, extra=(), nproc=2):
    flags = ["--nnodes", "2", "--nproc-per-node", str(nproc), "--rdzv-endpoint", endpoint, "--job-id", job,
             "--rdzv-timeout-s", "60"] + list(extra)
    return [tl.Run(flags + ["--node-rank", str(n)], worker_args) for n in (0, 1)]


def secret_file(directory, text):
    path = os.path.join(directory, "secret." + str(len(os.listdir(directory))))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, text.encode() + b"\n")
    os.close(fd)
    return path


def test_store_usage():
    for args, expect in (([], "--port is required"), (["--port", "70000"], "--port: 70000 is not in 0..65535"),
                         (["--port", "0"], "--port 0 needs --job-id"), (["--port", "1", "--bogus"], "--bogus"),
                         (["--port", "1", "--job-id", ""], "--job-id: must not be empty")):
        s = tl.Run([], [], argv=[STORE] + args)
        rc = s.finish()
        tl.check(rc == 2 and any(expect in l for l in s.err), f"tandem-store {args}: exit {rc}, expected 2 "
                 f"naming {expect!r}", s)
    s = tl.Run([], [], argv=[STORE, "--version"])
    tl.check(s.finish() == 0 and s.out and s.out[0].startswith("tandem-store "), "--version", s)
    s = tl.Run([], [], argv=[STORE, "--help"])
    tl.check(s.finish() == 0 and any("--rdzv-endpoint" in l for l in s.out), "--help", s)
    # A taken port: exit 1, naming it; the first store is untouched and stops cleanly.
    first, port = start_store("jobU")
    taken = tl.Run([], [], argv=[STORE, "--port", str(port)])
    rc = taken.finish()
    tl.check(rc == 1 and any(f"--port {port}" in l and "in use" in l for l in taken.err), f"taken port: exit {rc}",
             taken)
    stop_store(first)
    # tandemrun's side: the flag's form, and --master-port (the store node 0 would host).
    for args, expect in ((["--rdzv-endpoint", "nohost"], "--rdzv-endpoint: 'nohost' is not an address"),
                         (["--rdzv-endpoint", "h:0"], "--rdzv-endpoint: port 0 is not in 1..65535"),
                         (["--rdzv-endpoint", "[::1]"], "--rdzv-endpoint: '[::1]' is not an address"),
                         (["--rdzv-endpoint", ":5"], "--rdzv-endpoint: ':5' has no host"),
                         (["--rdzv-endpoint", "h:5", "--master-port", "0"], "--master-port: not with --rdzv-endpoint")):
        rc, r = tl.run(args, ["--mode", "ok"])
        tl.check(rc == 2 and expect in r.text()[1], f"tandemrun {args}: exit {rc}, expected 2 naming {expect!r}", r)
        tl.check(not r.out, "a refused command line started workers", r)


def test_endpoint_allreduce():
    with tempfile.TemporaryDirectory() as d:
        secret = secret_file(d, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
        store, port = start_store("jobR", ["--job-secret-file", secret])
        endpoint = f"127.0.0.1:{port}"
        # Refused clearly: another job id, a wrong secret. Neither starts a worker.
        for job, sec, expect in (("jobX", secret, "serves another job, not jobX"),
                                 ("jobR", secret_file(d, "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"),
                                  "the store refused this process's proof of the job secret")):
            rc, r = tl.run(["--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", endpoint, "--job-id", job,
                            "--job-secret-file", sec, "--rdzv-timeout-s", "30"], ["--mode", "ok"])
            err = r.text()[1]
            tl.check(rc == 1 and "refused node 1" in err and expect in err, f"{job}: exit {rc}", r)
            tl.check(not r.out, "a refused node started workers", r)
        runs = nodes(endpoint, "jobR", ["--mode", "allreduce"], ["--job-secret-file", secret])
        for node, r in enumerate(runs):
            rc = r.finish()
            tl.check(rc == 0, f"node {node}: exit {rc}", r)
            tl.check(f"joined the store of job jobR at {endpoint} (--rdzv-endpoint)" in r.text()[1],
                     f"node {node}: join line", r)
            for rank in (2 * node, 2 * node + 1):
                tl.check(f"[{node}:{rank}] allreduce ok sum=10 world=4 rank={rank} backend=gloo" in r.out,
                         f"rank {rank} allreduce", r)
        # The store outlived the job; the same job id again is refused, not misled by its keys.
        rc, r = tl.run(["--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", endpoint, "--job-id", "jobR",
                        "--job-secret-file", secret, "--rdzv-timeout-s", "30"], ["--mode", "ok"])
        tl.check(rc == 1 and "job jobR already ran to its end on the store" in r.text()[1], f"rerun: exit {rc}", r)
        tl.check(not r.out, "a rerun on a used store started workers", r)
        stop_store(store)


def test_endpoint_env_ipv6():
    # The bracketed IPv6 form, and what the workers are told: the store's address and port,
    # while MASTER_ADDR:MASTER_PORT stays a port free on node 0 (PyTorch jobs).
    store, port = start_store("jobV", ["--bind-addr", "::1"])
    runs = nodes(f"[::1]:{port}", "jobV", ["--mode", "env"])
    for node, r in enumerate(runs):
        rc = r.finish()
        tl.check(rc == 0, f"node {node}: exit {rc}", r)
    master = tl.master_port_of(runs[0])
    tl.check(master != port, "MASTER_PORT is the store's port", runs[0])
    for node, r in enumerate(runs):
        for local in (0, 1):
            rank = 2 * node + local
            env = tl.env_of(r, node, rank)
            tl.check(env.get("TANDEM_STORE_ADDR") == "::1" and env.get("TANDEM_STORE_PORT") == str(port),
                     f"rank {rank}: store {env.get('TANDEM_STORE_ADDR')}:{env.get('TANDEM_STORE_PORT')}", r)
            tl.check(env.get("MASTER_ADDR") == "127.0.0.1" and env.get("MASTER_PORT") == str(master),
                     f"rank {rank}: master {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}", r)
            tl.check(env.get("TANDEM_STORE_HOSTED") == "1", f"rank {rank}: TANDEM_STORE_HOSTED", r)
    stop_store(store)


def paused_job(job, pid_dir):
    """A tandem-store and two nodes whose 4 workers print "ready" and block."""
    store, port = start_store(job)
    runs = nodes(f"127.0.0.1:{port}", job, ["--pid-dir", pid_dir, "--mode", "pause"], ["--grace-s", "1"])
    for r in runs:
        r.wait_for(r"ready rank \d+ pid", count=2)
    return store, port, runs, tl.pids_in(pid_dir, 4)


def test_endpoint_node_lost():
    # SIGKILL of node 0's tandemrun: the store survives, so node 1 sees a node failure
    # naming node 0, not a lost store, and stops its workers.
    with tempfile.TemporaryDirectory() as d:
        store, port, runs, pids = paused_job("jobK", d)
        runs[0].proc.kill()
        rc1 = runs[1].finish()
        runs[0].finish()
        err = runs[1].text()[1]
        tl.check(rc1 == 1, f"node 1: exit {rc1}", runs[1])
        tl.check(re.search(r"node 0's tandemrun \(\S+ pid \d+\) stopped writing its heartbeat", err),
                 "node 1 should report node 0's failure", runs[1])
        tl.check("lost the job's store" not in err, "node 1 reported a lost store, but the store is up", runs[1])
        survivors = tl.wait_all_dead([pids[0], pids[1]])  # node 0's workers die by PR_SET_PDEATHSIG
        tl.check(not survivors, f"node 0's workers {survivors} outlived their tandemrun", runs[1])
        tl.assert_no_survivor(pids, "SIGKILL of node 0's tandemrun", runs[1])
        tl.check(store.proc.poll() is None, "tandem-store ended with node 0", store)
        stop_store(store)
    # SIGKILL of the store's host: every node reports the lost store and ends.
    with tempfile.TemporaryDirectory() as d:
        store, port, runs, pids = paused_job("jobL", d)
        store.proc.kill()
        store.finish()
        for node, r in enumerate(runs):
            rc = r.finish()
            tl.check(rc == 1, f"node {node}: exit {rc}", r)
            tl.check(f"node {node} lost the job's store at 127.0.0.1:{port}" in r.text()[1],
                     f"node {node} should say it lost the store", r)
        tl.assert_no_survivor(pids, "SIGKILL of tandem-store", runs[0])


TESTS = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}

if __name__ == "__main__":
    tl.main(TESTS)
