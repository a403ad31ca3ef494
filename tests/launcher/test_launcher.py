#!/usr/bin/env python3
"""tandemrun, tested as a user meets it: real processes, exact output, real signals.

    test_launcher.py BIN_DIR WORKER TEST_NAME

Each TEST_NAME is one CTest test (label multiprocess). The worker program's modes are
described in worker.cpp. Rules kept here: no sleep as synchronisation (a test waits
for a line of output or a process state, always with a deadline that only guards
against a hang), no assertion on elapsed time, no fixed port (the store picks one, or
free_port() asks the kernel).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN, WORKER = sys.argv[1], sys.argv[2]
TANDEMRUN = os.path.join(BIN, "tandemrun")
HANG_GUARD_S = 60  # only against a hung test; never an expectation about speed


class Failed(Exception):
    pass


def check(cond, message, run=None):
    if not cond:
        if run is not None:
            message += "\n--- tandemrun stdout ---\n" + "\n".join(run.out[-40:])
            message += "\n--- tandemrun stderr ---\n" + "\n".join(run.err[-60:])
        raise Failed(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTED = []  # every tandemrun a test started, killed at exit if still running


class Run:
    """tandemrun (or `argv`, another program) in the background; its stdout and stderr
    lines, with waits on them."""

    def __init__(self, flags, worker_args, env=None, program=WORKER, argv=None):
        self.args = argv or [TANDEMRUN] + flags + ["--", program] + worker_args
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, stdin=subprocess.DEVNULL)
        STARTED.append(self.proc)
        self.out, self.err = [], []
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True)]
        for r in self.readers:
            r.start()

    def _read(self, pipe, lines):
        for raw in pipe:
            with self.cond:
                lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, pattern, count=1, stream="out"):
        rx = re.compile(pattern)
        lines = self.out if stream == "out" else self.err
        with self.cond:
            ok = self.cond.wait_for(lambda: sum(1 for l in lines if rx.search(l)) >= count or
                                    self.proc.poll() is not None and not any(r.is_alive() for r in self.readers),
                                    timeout=HANG_GUARD_S)
            found = [l for l in lines if rx.search(l)]
        check(ok and len(found) >= count, f"expected {count} line(s) matching {pattern!r} on {stream}", self)
        return found

    def finish(self):
        try:
            rc = self.proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failed(f"tandemrun did not end: {' '.join(self.args)}")
        for r in self.readers:
            r.join(timeout=HANG_GUARD_S)
        return rc

    def text(self):
        return "\n".join(self.out), "\n".join(self.err)


def store_port(r):
    m = re.search(r"--master-port 0: the store listens on port (\d+)", "\n".join(r.err))
    check(m is not None, "the picked port was not printed", r)
    return int(m.group(1))


def run(flags, worker_args, env=None):
    r = Run(flags, worker_args, env)
    return r.finish(), r


def alive(pid):
    """True while pid exists and is not a zombie (a dead worker reparented to an init
    that does not reap still shows in /proc, as state Z)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except FileNotFoundError:
        return False


def pids_in(directory, count):
    pids = {}
    for name in os.listdir(directory):
        m = re.fullmatch(r"rank(\d+)\.pid", name)
        if m:
            with open(os.path.join(directory, name)) as f:
                pids[int(m.group(1))] = int(f.read())
    check(len(pids) == count, f"expected {count} pid files in {directory}, found {sorted(pids)}")
    return pids


def wait_all_dead(pids):
    """Waits (bounded) for every pid to die; returns the survivors."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)  # polling a process state with a deadline, not a synchronisation by time
    return [p for p in pids if alive(p)]


def assert_no_survivor(pids, what, run=None):
    survivors = [p for p in pids.values() if alive(p)]
    for p in survivors:
        os.kill(p, signal.SIGKILL)
    check(not survivors, f"{what}: worker pids {survivors} outlived the job", run)


# ---------------------------------------------------------------------------- tests


def test_usage():
    cases = [
        (["--nproc-per-node", "abc"], "--nproc-per-node"),
        (["--nproc-per-node", "0"], "--nproc-per-node"),
        (["--nnodes", "0"], "--nnodes"),
        (["--nnodes", "2", "--node-rank", "2", "--master-port", "1234"], "--node-rank"),
        (["--master-port", "70000"], "--master-port"),
        (["--nnodes", "2", "--master-port", "0"], "--master-port 0"),
        (["--rank-filter", "5", "--nproc-per-node", "2"], "--rank-filter"),
        (["--rank-filter", "x"], "--rank-filter"),
        (["--grace-s", "-1"], "--grace-s"),
        (["--rdzv-timeout-s", "0"], "--rdzv-timeout-s"),
        (["--bogus"], "--bogus"),
    ]
    for flags, needle in cases:
        p = subprocess.run([TANDEMRUN] + flags + ["--", WORKER], capture_output=True, text=True)
        check(p.returncode == 2, f"{flags}: exit {p.returncode}, expected 2\n{p.stderr}")
        check(needle in p.stderr, f"{flags}: message lacks {needle!r}: {p.stderr}")
    p = subprocess.run([TANDEMRUN, "--nproc-per-node", "2"], capture_output=True, text=True)
    check(p.returncode == 2 and "no program" in p.stderr, f"missing program: {p.returncode} {p.stderr}")
    p = subprocess.run([TANDEMRUN, WORKER], capture_output=True, text=True)
    check(p.returncode == 2 and "'--'" in p.stderr, f"program without --: {p.returncode} {p.stderr}")
    p = subprocess.run([TANDEMRUN, "--master-port", "0", "--", "no-such-program-xyz"], capture_output=True, text=True)
    check(p.returncode == 2 and "no-such-program-xyz" in p.stderr, f"unknown program: {p.returncode} {p.stderr}")
    p = subprocess.run([TANDEMRUN, "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and "--rdzv-timeout-s" in p.stdout and "--job-secret-file" in p.stdout, "--help")
    # A job secret file that is missing, empty, too short or of two lines: exit 2, named.
    with tempfile.TemporaryDirectory() as d:
        cases = [("absent", None, "cannot open the job secret file: No such file or directory"),
                 ("empty", "", "not a usable job secret: it is empty"),
                 ("short", "abc\n", "shorter than the 32 bytes a secret needs"),
                 ("weak", "x" * 40 + "\n", "it is one byte repeated 40 times"),
                 ("two", "0123456789abcdef0123456789abcdef\nmore\n", "contains a NUL, CR or LF byte")]
        for name, text, needle in cases:
            path = os.path.join(d, name)
            if text is not None:
                with open(path, "w") as f:
                    f.write(text)
            for how in ("flag", "env"):
                flags = ["--job-secret-file", path] if how == "flag" else []
                env = dict(os.environ, TANDEM_JOB_SECRET_FILE=path) if how == "env" else None
                p = subprocess.run([TANDEMRUN, "--master-port", "0"] + flags + ["--", WORKER], capture_output=True,
                                   text=True, env=env)
                check(p.returncode == 2 and needle in p.stderr and path in p.stderr,
                      f"secret file {name} ({how}): exit {p.returncode}: {p.stderr}")


def test_gpu_count():
    # --nproc-per-node gpu: one process per visible GPU, or a clear usage error without one.
    rc, r = run(["--nproc-per-node", "gpu", "--master-port", "0"], ["--mode", "env"])
    out, err = r.text()
    if rc == 2:
        check("--nproc-per-node gpu: no CUDA GPU is visible" in err, "no-GPU message", r)
        print("(information: no GPU visible here; checked the refusal)")
        return
    check(rc == 0, f"exit {rc}", r)
    world = {l.split("=", 1)[1] for l in r.out if " ENV WORLD_SIZE=" in l}
    check(len(world) == 1, f"ranks disagree on WORLD_SIZE: {world}", r)
    n = int(world.pop())
    check(sorted(l.split("=", 1)[1] for l in r.out if " ENV LOCAL_RANK=" in l) == sorted(map(str, range(n))),
          "one process per GPU, local ranks 0..n-1", r)
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) \
        if "CUDA_VISIBLE_DEVICES" not in os.environ and any(
            os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in os.environ["PATH"].split(":")) else None
    if smi is not None and smi.returncode == 0:
        gpus = sum(1 for l in smi.stdout.splitlines() if l.startswith("GPU "))
        check(n == gpus, f"{n} processes for {gpus} GPUs listed by nvidia-smi", r)


def env_of(r, node, rank):
    """The variables rank `rank` printed in --mode env (every one of them, <unset> too)."""
    return dict(l.split(" ENV ", 1)[1].split("=", 1) for l in r.out if l.startswith(f"[{node}:{rank}] ENV "))


def expected_env(rank, local_rank, node, nproc, nnodes, store_port, master_port, job, max_restarts=0, attempt=0,
                 addr="127.0.0.1", omp=None, openblas=None, secret_fd="<unset>"):
    """Every variable tandemrun sets, as it must set it (docs/reference.md)."""
    cores = len(os.sched_getaffinity(0))
    world = nproc * nnodes
    return {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(nproc), "NODE_RANK": str(node), "MASTER_ADDR": addr,
            "MASTER_PORT": str(master_port), "TANDEM_STORE_ADDR": addr, "TANDEM_STORE_PORT": str(store_port),
            "TANDEM_RESTART_COUNT": str(attempt), "TANDEM_JOB_ID": job, "TANDEM_STORE_HOSTED": "1",
            "TANDEM_JOB_SECRET_FD": secret_fd,
            "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nnodes), "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default", "TORCHELASTIC_RESTART_COUNT": str(attempt),
            "TORCHELASTIC_MAX_RESTARTS": str(max_restarts), "TORCHELASTIC_RUN_ID": job,
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            # torchrun's rule for OpenMP, Tandem's share of the cores for OpenBLAS
            "OMP_NUM_THREADS": omp or ("1" if nproc > 1 else "<unset>"),
            "OPENBLAS_NUM_THREADS": openblas or str(max(1, cores // nproc))}


def master_port_of(r, node=0, rank=0):
    got = env_of(r, node, rank).get("MASTER_PORT", "")
    check(got.isdigit(), f"MASTER_PORT={got!r}", r)
    return int(got)


def test_env():
    for nproc in (2, 3, 1):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        rc, r = run(["--nproc-per-node", str(nproc), "--master-port", "0", "--job-id", f"env-{nproc}"],
                    ["--mode", "env"], env)
        check(rc == 0, f"exit {rc}", r)
        port = store_port(r)
        master = master_port_of(r)
        check(master != port, f"MASTER_PORT {master} is tandemrun's store port", r)
        for rank in range(nproc):
            got = env_of(r, 0, rank)
            # The secret a one-node job generates comes in a descriptor, never in the environment.
            fd = got.get("TANDEM_JOB_SECRET_FD", "")
            check(fd.isdigit(), f"rank {rank}: TANDEM_JOB_SECRET_FD={fd!r}", r)
            want = expected_env(rank, rank, 0, nproc, 1, port, master, f"env-{nproc}", secret_fd=fd)
            check(got == want, f"--nproc-per-node {nproc}, rank {rank}:\n got  {got}\n want {want}", r)
    # Thread counts the user chose are kept; the job id follows --job-id.
    env = dict(os.environ, OMP_NUM_THREADS="7")
    env.pop("OPENBLAS_NUM_THREADS", None)
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0", "--job-id", "my-job"], ["--mode", "env"], env)
    check(rc == 0, f"exit {rc}", r)
    out, _ = r.text()
    cores = len(os.sched_getaffinity(0))
    check(out.count("ENV OMP_NUM_THREADS=7") == 2, "user's OMP_NUM_THREADS not kept", r)
    check(out.count(f"ENV OPENBLAS_NUM_THREADS={max(1, cores // 2)}") == 2, "OPENBLAS_NUM_THREADS", r)
    check(out.count("ENV TANDEM_JOB_ID=my-job") == 2 and out.count("ENV TORCHELASTIC_RUN_ID=my-job") == 2,
          "--job-id not passed on", r)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="5")
    env.pop("OMP_NUM_THREADS", None)
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0"], ["--mode", "env"], env)
    check(rc == 0, f"exit {rc}", r)
    out, _ = r.text()
    check(out.count("ENV OPENBLAS_NUM_THREADS=5") == 2 and out.count("ENV OMP_NUM_THREADS=1") == 2,
          "user's OPENBLAS_NUM_THREADS with torchrun's OMP_NUM_THREADS", r)


SECRET_REACH = r"""
import os
def target(n):
    try:
        return os.readlink("/proc/self/fd/" + n)
    except OSError:  # the descriptor of the listing itself, closed by now
        return ""
fds = sum(target(n).startswith("/memfd:tandem-job-secret") for n in os.listdir("/proc/self/fd"))
print(f"PYTHON fds={fds} var={os.environ.get('TANDEM_JOB_SECRET_FD', '<unset>')}")
"""


def test_secret_reach():
    # A Tandem worker holds the secret's memfd until it reads it, then closes it: a second
    # read comes from its copy, its child inherits no descriptor and, reading the variable it
    # did inherit, is told the secret is not for it (docs/security.md).
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0"], ["--mode", "secret-fds"])
    check(rc == 0, f"secret-fds: exit {rc}", r)
    for rank in (0, 1):
        check(f"[0:{rank}] SECRET-FDS rank {rank} before=1" in r.out, f"rank {rank}: no memfd before reading", r)
        check(f"[0:{rank}] SECRET-FDS rank {rank} after=0" in r.out, f"rank {rank}: the memfd outlived the read", r)
    children = [l for l in r.out if "SECRET-CHILD fds=" in l]
    check(len(children) == 2 and all(re.search(r"SECRET-CHILD fds=0 var=\d+$", l) for l in children),
          f"a worker's child: {children}", r)
    reads = [l for l in r.out if "SECRET-CHILD read: " in l]
    told = re.compile(r"SECRET-CHILD read: environment variable TANDEM_JOB_SECRET_FD=(\d+): descriptor \1 is "
                      r"(not open|'[^']*', not tandemrun's job-secret memfd): the secret reaches only the programs "
                      r"tandemrun starts, not their children \(give this process TANDEM_JOB_SECRET_FILE\)$")
    check(len(reads) == 2 and all(told.search(l) for l in reads), f"a worker's child read: {reads}", r)
    # A program that is not Tandem's gets neither the descriptor nor the variable, unless
    # --pass-job-secret says it starts one.
    for flags, want in (([], "fds=0 var=<unset>"), (["--pass-job-secret"], r"fds=1 var=\d+")):
        r = Run(["--nproc-per-node", "1", "--master-port", "0"] + flags, ["-c", SECRET_REACH], program="python3")
        rc = r.finish()
        check(rc == 0 and any(re.search(f"PYTHON {want}$", l) for l in r.out), f"python3 {flags}: exit {rc}", r)
        passed_over = any("the job secret is not passed to" in l and "python3" in l for l in r.err)
        check(passed_over == (not flags), f"python3 {flags}: tandemrun's note on the secret", r)
    env = dict(os.environ, TANDEM_PASS_JOB_SECRET="1")
    r = Run(["--nproc-per-node", "1", "--master-port", "0"], ["-c", SECRET_REACH], env=env, program="python3")
    check(r.finish() == 0 and any(re.search(r"PYTHON fds=1 var=\d+$", l) for l in r.out),
          "TANDEM_PASS_JOB_SECRET=1 did not pass the secret", r)
    p = subprocess.run([TANDEMRUN, "--master-port", "0", "--", WORKER], capture_output=True, text=True,
                       env=dict(os.environ, TANDEM_PASS_JOB_SECRET="yes"))
    check(p.returncode == 2 and "TANDEM_PASS_JOB_SECRET='yes': must be 1 or 0" in p.stderr,
          f"TANDEM_PASS_JOB_SECRET=yes: exit {p.returncode}: {p.stderr}")


def test_serve_master_port():
    # Rank 0 serves MASTER_PORT (as a PyTorch rank 0 hosts its TCPStore) while the
    # ranks run Tandem collectives through tandemrun's store; the others reach it.
    rc, r = run(["--nproc-per-node", "3", "--master-port", "0"], ["--mode", "serve-master-port"])
    check(rc == 0, f"exit {rc}", r)
    found = [l for l in r.out if " served ranks " in l]
    check(len(found) == 1 and re.fullmatch(r"\[0:0\] master port \d+ served ranks 1,2", found[0]),
          f"rank 0 should serve MASTER_PORT to ranks 1 and 2: {found}", r)
    check(int(found[0].split()[3]) != store_port(r), "MASTER_PORT is tandemrun's store port", r)


def test_hang_timeout_program_kind():
    # --hang-timeout-s needs heartbeats, which only programs built with Tandem's
    # collectives send: for any other program tandemrun says so and leaves hang
    # detection off, rather than report a hang (and SIGUSR2 the program) later.
    off = "so it sends no heartbeats; hang detection is off for this job"
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0", "--hang-timeout-s", "30"], ["--mode", "ok"])
    check(rc == 0 and not any(off in l for l in r.err), "a Tandem program keeps hang detection", r)
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho \"plain rank $RANK\"\n")
        os.chmod(script, 0o755)
        for program, why in ((script, "is not an ELF program (a script, or a file tandemrun cannot read)"),
                             ("/bin/true", "an ELF program without Tandem's collectives (no section tandem_heartbeats)")):
            r = Run(["--nproc-per-node", "2", "--master-port", "0", "--hang-timeout-s", "30"], [], program=program)
            rc = r.finish()
            warned = [l for l in r.err if off in l]
            check(rc == 0, f"{program}: exit {rc}", r)
            check(len(warned) == 1 and "--hang-timeout-s 30" in warned[0] and why in warned[0],
                  f"{program}: expected one warning saying it {why}", r)
            if program == script:
                check(r.out == ["[0:0] plain rank 0", "[0:1] plain rank 1"] or
                      r.out == ["[0:1] plain rank 1", "[0:0] plain rank 0"], "the script's output", r)


SPAM_LINE = re.compile(r"^\[0:(\d)\] rank (\d) (out|err) (\d+) ([a-z]{100})$")


def check_spam(lines, kind, ranks, n, r):
    seen = {rank: [] for rank in ranks}
    last = {rank: 0 for rank in ranks}
    for l in lines:
        if l.endswith("last line without newline"):
            m = re.fullmatch(r"\[0:(\d)\] rank (\d) last line without newline", l)
            check(m and m.group(1) == m.group(2), f"bad partial line {l!r}", r)
            last[int(m.group(1))] += 1
            continue
        m = SPAM_LINE.match(l)
        check(m is not None, f"{kind}: malformed or interleaved line {l[:200]!r}", r)
        rank = int(m.group(1))
        check(rank in ranks, f"{kind}: rank {rank} should have been filtered out", r)
        check(int(m.group(2)) == rank and m.group(3) == kind and m.group(5) == chr(ord("a") + rank) * 100,
              f"{kind}: line of rank {rank} carries another rank's text: {l[:200]!r}", r)
        seen[rank].append(int(m.group(4)))
    for rank in ranks:
        check(seen[rank] == list(range(n)), f"{kind}: rank {rank} lines missing or out of order", r)
        if kind == "out":
            check(last[rank] == 1, f"rank {rank}: the final partial line was not flushed once", r)


def test_output():
    n = 3000
    with tempfile.TemporaryDirectory() as logs:
        rc, r = run(["--nproc-per-node", "4", "--master-port", "0", "--log-dir", logs], ["--mode", f"spam:{n}"])
        check(rc == 0, f"exit {rc}", r)
        check_spam(r.out, "out", [0, 1, 2, 3], n, r)
        check_spam([l for l in r.err if not l.startswith("tandemrun")], "err", [0, 1, 2, 3], n, r)
        for rank in range(4):
            payload = chr(ord("a") + rank) * 100
            with open(os.path.join(logs, "attempt0", f"rank{rank}.stdout")) as f:
                want = "".join(f"rank {rank} out {i} {payload}\n" for i in range(n))
                want += f"rank {rank} last line without newline"
                check(f.read() == want, f"log file rank{rank}.stdout differs from what the rank wrote")
            with open(os.path.join(logs, "attempt0", f"rank{rank}.stderr")) as f:
                check(f.read() == "".join(f"rank {rank} err {i} {payload}\n" for i in range(n)),
                      f"log file rank{rank}.stderr differs from what the rank wrote")
            for kind in ("stdout", "stderr"):
                mode = os.stat(os.path.join(logs, "attempt0", f"rank{rank}.{kind}")).st_mode & 0o777
                check(mode == 0o600, f"log file rank{rank}.{kind} has mode {mode:o}, not 600")


def test_rank_filter():
    with tempfile.TemporaryDirectory() as logs:
        rc, r = run(["--nproc-per-node", "4", "--master-port", "0", "--rank-filter", "0,2", "--log-dir", logs],
                    ["--mode", "spam:200"])
        check(rc == 0, f"exit {rc}", r)
        check_spam(r.out, "out", [0, 2], 200, r)
        check_spam([l for l in r.err if not l.startswith("tandemrun")], "err", [0, 2], 200, r)
        # The filter is for the console only: every rank keeps its files.
        for rank in range(4):
            check(os.path.getsize(os.path.join(logs, "attempt0", f"rank{rank}.stdout")) > 0, f"rank{rank}.stdout")


def start_paused(flags, modes, pid_dir, nproc=4):
    """tandemrun with `nproc` workers that print "ready" and block; modes: {rank: MODE}."""
    args = ["--pid-dir", pid_dir, "--mode", "pause"]
    for rank, mode in modes.items():
        args += ["--mode-for", f"{rank}={mode}"]
    r = Run(["--nproc-per-node", str(nproc), "--master-port", "0"] + flags, args)
    r.wait_for(r"ready rank \d+ pid", count=nproc)
    return r, pids_in(pid_dir, nproc)


def test_teardown_exit():
    with tempfile.TemporaryDirectory() as d:
        # Rank 3 ignores SIGTERM, so only the SIGKILL after --grace-s ends it.
        r, pids = start_paused(["--grace-s", "1"], {1: "on-usr1:exit:3:30", 3: "pause-ignore-term"}, d)
        os.kill(pids[1], signal.SIGUSR1)
        rc = r.finish()
        _, err = r.text()
        check(rc == 1, f"exit {rc}, expected 1", r)
        check(f"rank 1 (node 0, host {socket.gethostname()}, local rank 1, pid {pids[1]}) exited with code 3" in err,
              "failure line", r)
        check("last 20 lines of rank 1's stderr" in err, "stderr tail header", r)
        check("| rank 1 stderr line 29" in err and "| rank 1 stderr line 10" in err, "stderr tail lines", r)
        check("| rank 1 stderr line 9" not in err, "the tail should hold only the last 20 lines", r)
        check("sending SIGKILL" in err, "rank 3 ignores SIGTERM: SIGKILL after the grace period expected", r)
        assert_no_survivor(pids, "rank 1 exited 3", r)


def test_teardown_signal():
    with tempfile.TemporaryDirectory() as d:
        r, pids = start_paused(["--grace-s", "2"], {2: "on-usr1:signal:SEGV"}, d, nproc=3)
        os.kill(pids[2], signal.SIGUSR1)
        rc = r.finish()
        _, err = r.text()
        check(rc == 1, f"exit {rc}", r)
        check(re.search(r"rank 2 \(node 0, .*\) was killed by signal 11 \(SIGSEGV", err), "SIGSEGV report", r)
        check("| rank 2 raising SIGSEGV" in err, "stderr tail", r)
        check("out-of-memory" not in err, "no OOM hint for SIGSEGV", r)
        assert_no_survivor(pids, "rank 2 SIGSEGV", r)
    with tempfile.TemporaryDirectory() as d:
        # SIGKILL of one worker mid-run, from outside (as the OOM killer would).
        r, pids = start_paused(["--grace-s", "1"], {}, d, nproc=3)
        os.kill(pids[1], signal.SIGKILL)
        rc = r.finish()
        _, err = r.text()
        check(rc == 1, f"exit {rc}", r)
        check(re.search(r"rank 1 \(node 0, .*\) was killed by signal 9 \(SIGKILL", err), "SIGKILL report", r)
        check("out-of-memory killer" in err, "OOM hint", r)
        assert_no_survivor(pids, "rank 1 SIGKILL", r)


def test_interrupt():
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        with tempfile.TemporaryDirectory() as d:
            r, pids = start_paused(["--grace-s", "1"], {0: "pause-ignore-term"}, d, nproc=3)
            r.proc.send_signal(sig)
            rc = r.finish()
            _, err = r.text()
            check(rc == code, f"{sig.name}: exit {rc}, expected {code}", r)
            check(f"received {sig.name}" in err, f"{sig.name} not reported", r)
            assert_no_survivor(pids, f"{sig.name} to tandemrun", r)


def test_launcher_sigkill():
    with tempfile.TemporaryDirectory() as d:
        r, pids = start_paused([], {1: "pause-ignore-term"}, d, nproc=3)
        r.proc.kill()
        r.finish()
        survivors = wait_all_dead(list(pids.values()))
        for p in survivors:
            os.kill(p, signal.SIGKILL)
        check(not survivors, f"workers {survivors} outlived a SIGKILLed tandemrun (PR_SET_PDEATHSIG)", r)


def test_restart():
    with tempfile.TemporaryDirectory() as logs:
        rc, r = run(["--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "1", "--log-dir", logs],
                    ["--mode", "fail-attempt:99", "--mode-for", "1=fail-attempt:0"])
        out, err = r.text()
        check(rc == 0, f"exit {rc}, expected the restarted job to succeed", r)
        check("attempt 0 failed: rank 1 (node 0" in err and "exited with code 1" in err, "attempt 0 failure", r)
        check("restarting the whole job: attempt 1" in err, "restart message", r)
        check("[0:0] RESTART_COUNT=1 ok" in out and "[0:1] RESTART_COUNT=1 ok" in out, "attempt 1 output", r)
        check("[0:0] TORCHELASTIC_RESTART_COUNT=1" in r.out and "[0:1] TORCHELASTIC_RESTART_COUNT=1" in r.out,
              "torchrun's restart count in attempt 1", r)
        with open(os.path.join(logs, "attempt0", "rank1.stderr")) as f:
            check("failing on purpose on attempt 0" in f.read(), "attempt0/rank1.stderr")
        with open(os.path.join(logs, "attempt1", "rank1.stdout")) as f:
            check("RESTART_COUNT=1 ok" in f.read(), "attempt1/rank1.stdout")
    # Restarts used up: the job fails after K+1 attempts.
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "1"],
                ["--mode", "ok", "--mode-for", "0=exit:4"])
    _, err = r.text()
    check(rc == 1, f"exit {rc}", r)
    check("attempt 0 failed" in err and "attempt 1 failed" in err and "no restart left" in err, "two failures", r)


def test_ports():
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0"], ["--mode", "env"])
    check(rc == 0, f"exit {rc}", r)
    port = store_port(r)
    check(sum(1 for l in r.out if l.endswith(f"ENV TANDEM_STORE_PORT={port}")) == 2, "workers' TANDEM_STORE_PORT", r)
    master = master_port_of(r)
    check(master != port and sum(1 for l in r.out if l.endswith(f"ENV MASTER_PORT={master}")) == 2,
          "every rank gets the same MASTER_PORT, not the store's", r)
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        blocker.listen()
        busy = blocker.getsockname()[1]
        rc, r = run(["--nproc-per-node", "2", "--master-port", str(busy)], ["--mode", "ok"])
        _, err = r.text()
        check(rc == 1, f"busy port: exit {rc}", r)
        check(f"--master-port {busy}" in err and "in use" in err, "busy port message", r)
        check(not r.out, "no worker may start when the store cannot be hosted", r)


def slurm_step_env(job, **extra):
    """What srun gives the one task of a one-node step (srun -N1 -n1 tandemrun ...)."""
    env = dict(os.environ, SLURM_JOB_ID=str(job), SLURM_STEP_ID="0", SLURM_PROCID="0", SLURM_NTASKS="1",
               SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1", SLURM_NNODES="1",
               SLURM_STEP_TASKS_PER_NODE="1", SLURM_STEP_NODELIST="localhost")
    env.update(extra)
    return env


def test_slurm_step():
    # tandemrun as the one task of a Slurm step takes --nnodes, --node-rank, the store's
    # host and port and the job id from it (launcher/slurm_step.h). The derived port's
    # first candidate is taken here by another listener: node 0 must move to the second.
    job, ports = None, []
    for candidate in range(4100, 4200):
        ports = [20000 + ((candidate % 10000) * 7919 + k) % 10000 for k in range(8)]
        try:
            blocker = socket.socket()
            blocker.bind(("0.0.0.0", ports[0]))
            job = candidate
            break
        except OSError:
            blocker.close()
    check(job is not None, "no job id whose first derived port could be taken here")
    with blocker:
        blocker.listen()
        rc, r = run(["--nproc-per-node", "2"], ["--mode", "env"], slurm_step_env(job))
    out, err = r.text()
    check(rc == 0, f"exit {rc}", r)
    check(f"under Slurm: node 0 of 1; the store on localhost (first host of SLURM_STEP_NODELIST)" in err and
          f"port {ports[0]} is taken" in err and f"it is on port {ports[1]}" in err, "the derived port's retry", r)
    check(out.count(f"ENV TANDEM_STORE_PORT={ports[1]}") == 2 and out.count(f"ENV TANDEM_JOB_ID=slurm-{job}.0") == 2,
          "the workers' store port and job id", r)
    # Flags given explicitly win; --nnodes and --node-rank may not contradict the step.
    rc, r = run(["--nproc-per-node", "2", "--master-port", "0", "--job-id", "mine"], ["--mode", "env"],
                slurm_step_env(job))
    out, _ = r.text()
    check(rc == 0 and out.count("ENV TANDEM_JOB_ID=mine") == 2, f"explicit flags: exit {rc}", r)
    cases = [
        ([], dict(SLURM_NTASKS="2", SLURM_STEP_TASKS_PER_NODE="2"), "one task per node, but this step has "
         "SLURM_NTASKS=2 tasks on 1 node: start it with srun --ntasks-per-node=1"),
        (["--nnodes", "2"], {}, "--nnodes 2 disagrees with this Slurm step's 1 node (SLURM_STEP_NUM_NODES)"),
        (["--node-rank", "1", "--nnodes", "1"], {}, "--node-rank 1 disagrees with SLURM_NODEID=0"),
        ([], dict(SLURM_STEP_NODELIST="node[3-"), "SLURM_STEP_NODELIST"),
        ([], dict(SLURM_NODEID="x"), "SLURM_NODEID='x' is not an integer"),
    ]
    for flags, env, needle in cases:
        p = subprocess.run([TANDEMRUN] + flags + ["--", WORKER], capture_output=True, text=True,
                           env=slurm_step_env(job, **env))
        check(p.returncode == 2 and needle in p.stderr, f"{flags} {env}: exit {p.returncode}: {p.stderr}")


def test_rdzv_timeout():
    port = free_port()
    rc, r = run(["--nnodes", "2", "--node-rank", "0", "--master-port", str(port), "--rdzv-timeout-s", "3"],
                ["--mode", "ok"])
    _, err = r.text()
    check(rc == 1, f"exit {rc}", r)
    check("rendezvous timed out after 3 s: node 1 of 2 did not join" in err, "missing node 1 not named", r)
    check(not r.out, "no worker may start without every node", r)
    rc, r = run(["--nnodes", "3", "--node-rank", "2", "--master-port", str(free_port()), "--rdzv-timeout-s", "2"],
                ["--mode", "ok"])
    _, err = r.text()
    check(rc == 1 and "node 0 did not join" in err, f"missing node 0: exit {rc}", r)


def two_nodes(port, worker_args, extra=(), job="jobA", nproc=2):
    flags = ["--nnodes", "2", "--nproc-per-node", str(nproc), "--master-port", str(port), "--job-id", job,
             "--rdzv-timeout-s", "60"] + list(extra)
    return [Run(flags + ["--node-rank", str(n)], worker_args) for n in (0, 1)]


def test_two_nodes_allreduce():
    port = free_port()
    node0 = Run(["--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "2", "--master-port", str(port),
                 "--job-id", "jobA", "--rdzv-timeout-s", "60"], ["--mode", "allreduce"])
    # Another job on the same address is refused by the store's handshake.
    rc, intruder = run(["--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-port", str(port),
                        "--job-id", "jobB", "--rdzv-timeout-s", "30"], ["--mode", "ok"])
    _, err = intruder.text()
    check(rc == 1 and "serves another job, not jobB" in err, f"intruder: exit {rc}", intruder)
    check(not intruder.out, "the refused job started workers", intruder)
    node1 = Run(["--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-port", str(port),
                 "--job-id", "jobA", "--rdzv-timeout-s", "60"], ["--mode", "allreduce"])
    rc0, rc1 = node0.finish(), node1.finish()
    check(rc0 == 0, f"node 0 exit {rc0}", node0)
    check(rc1 == 0, f"node 1 exit {rc1}", node1)
    for node, r in ((0, node0), (1, node1)):
        for rank in (2 * node, 2 * node + 1):
            check(f"[{node}:{rank}] allreduce ok sum=10 world=4 rank={rank} backend=gloo" in r.out, f"rank {rank} allreduce", r)


def test_two_nodes_env():
    # Two nodes of two: every variable exactly, and one MASTER_PORT agreed through the store.
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    flags = ["--nnodes", "2", "--nproc-per-node", "2", "--master-port", str(port), "--job-id", "jobE",
             "--max-restarts", "3", "--rdzv-timeout-s", "60"]
    nodes = [Run(flags + ["--node-rank", str(n)], ["--mode", "env"], env) for n in (0, 1)]
    rcs = [n.finish() for n in nodes]
    for node, (rc, r) in enumerate(zip(rcs, nodes)):
        check(rc == 0, f"node {node}: exit {rc}", r)
    master = master_port_of(nodes[0])
    check(master != port, "MASTER_PORT is tandemrun's store port", nodes[0])
    for node, r in enumerate(nodes):
        for local in (0, 1):
            rank = 2 * node + local
            got = env_of(r, node, rank)
            want = expected_env(rank, local, node, 2, 2, port, master, "jobE", max_restarts=3)
            check(got == want, f"node {node}, rank {rank}:\n got  {got}\n want {want}", r)


def test_two_nodes_teardown():
    # A rank on node 1 fails: node 0's workers are stopped too, and both nodes print
    # the same first failure.
    with tempfile.TemporaryDirectory() as d:
        nodes = two_nodes(free_port(), ["--pid-dir", d, "--mode", "pause", "--mode-for", "3=on-usr1:exit:3:5"],
                          ["--grace-s", "1"])
        for n in nodes:
            n.wait_for(r"ready rank \d+ pid", count=2)
        pids = pids_in(d, 4)
        os.kill(pids[3], signal.SIGUSR1)
        rcs = [n.finish() for n in nodes]
        for node, (rc, r) in enumerate(zip(rcs, nodes)):
            check(rc == 1, f"node {node}: exit {rc}", r)
            _, err = r.text()
            check(f"rank 3 (node 1, host {socket.gethostname()}, local rank 1, pid {pids[3]}) exited with code 3" in err,
                  f"node {node}: first failure", r)
            check("| rank 3 stderr line 4" in err, f"node {node}: stderr tail", r)
        assert_no_survivor(pids, "rank 3 on node 1 exited 3", nodes[0])
    # SIGTERM to node 1's tandemrun: node 1 exits 143, node 0 stops its workers and says why.
    with tempfile.TemporaryDirectory() as d:
        nodes = two_nodes(free_port(), ["--pid-dir", d, "--mode", "pause"], ["--grace-s", "1"])
        for n in nodes:
            n.wait_for(r"ready rank \d+ pid", count=2)
        pids = pids_in(d, 4)
        nodes[1].proc.send_signal(signal.SIGTERM)
        rc0, rc1 = nodes[0].finish(), nodes[1].finish()
        check(rc1 == 143, f"node 1: exit {rc1}", nodes[1])
        check(rc0 == 1, f"node 0: exit {rc0}", nodes[0])
        check("node 1's tandemrun" in nodes[0].text()[1] and "received SIGTERM" in nodes[0].text()[1],
              "node 0 should name node 1's SIGTERM", nodes[0])
        assert_no_survivor(pids, "SIGTERM to node 1", nodes[0])
    # SIGKILL of node 0's tandemrun takes the store with it: node 1 stops its workers.
    with tempfile.TemporaryDirectory() as d:
        nodes = two_nodes(free_port(), ["--pid-dir", d, "--mode", "pause"], ["--grace-s", "1"])
        for n in nodes:
            n.wait_for(r"ready rank \d+ pid", count=2)
        pids = pids_in(d, 4)
        nodes[0].proc.kill()
        rc1 = nodes[1].finish()
        nodes[0].finish()
        check(rc1 == 1, f"node 1: exit {rc1}", nodes[1])
        check("node 1 lost the job's store" in nodes[1].text()[1], "node 1 should say it lost the store", nodes[1])
        survivors = wait_all_dead([pids[0], pids[1]])  # node 0's workers die by PR_SET_PDEATHSIG
        check(not survivors, f"node 0's workers {survivors} outlived their tandemrun", nodes[1])
        assert_no_survivor(pids, "SIGKILL of node 0's tandemrun", nodes[1])


def test_two_nodes_restart():
    nodes = two_nodes(free_port(), ["--mode", "fail-attempt:99", "--mode-for", "2=fail-attempt:0"],
                      ["--max-restarts", "1"])
    rcs = [n.finish() for n in nodes]
    for node, (rc, r) in enumerate(zip(rcs, nodes)):
        check(rc == 0, f"node {node}: exit {rc}", r)
        _, err = r.text()
        check("attempt 0 failed: rank 2 (node 1" in err, f"node {node}: attempt 0 failure", r)
        for rank in (2 * node, 2 * node + 1):
            check(f"[{node}:{rank}] RESTART_COUNT=1 ok" in r.out, f"rank {rank} in attempt 1", r)


class Skip(Exception):
    pass


def worker_pids(launcher_pid):
    """The workers a tandemrun forked (they are children of its main thread)."""
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_kill_training():
    # SIGKILL of one rank of a real DDP job mid-training: the job ends with the report
    # and no process left. Needs tandem-train with --mode ddp (its own issue).
    train = os.path.join(BIN, "tandem-train")
    if not os.access(train, os.X_OK):
        raise Skip(f"tandem-train is not built in {BIN}")
    probe = subprocess.run([train, "--mode", "ddp", "--data", "synthetic", "--max-steps", "0"],
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
    if probe.returncode == 2 and "not built yet" in probe.stderr + probe.stdout:
        raise Skip("tandem-train has no --mode ddp yet")
    r = Run(["--nproc-per-node", "3", "--master-port", "0", "--grace-s", "2"],
            ["--mode", "ddp", "--data", "synthetic", "--max-steps", "1000000", "--log-every", "2"], program=train)
    r.wait_for(r"^\[0:0\] .* step 4/")  # mid-training (tandem-train logs to stdout)
    pids = worker_pids(r.proc.pid)
    check(len(pids) == 3, f"expected 3 workers, found {pids}", r)
    killed = time.monotonic()
    victim = pids[1]
    os.kill(victim, signal.SIGKILL)
    rc = r.finish()
    print(f"(information: the job ended {time.monotonic() - killed:.2f} s after the SIGKILL, --grace-s 2)")
    _, err = r.text()
    check(rc == 1, f"exit {rc}", r)
    check(re.search(rf"rank \d \(node 0, .*pid {victim}\) was killed by signal 9 \(SIGKILL", err),
          "the killed rank is not the reported first failure", r)
    check("out-of-memory killer" in err, "OOM hint", r)
    assert_no_survivor(dict(enumerate(pids)), "SIGKILL of one training rank", r)


def main(tests):
    """Runs the test named by argv[3] from `tests` (name -> function); exit 0 or 1."""
    name = sys.argv[3]
    try:
        tests[name]()
    except Skip as e:
        print(f"SKIP: launcher.{name}: {e}")
        sys.exit(0)
    except Failed as e:
        print(f"FAIL launcher.{name}: {e}")
        sys.exit(1)
    finally:
        # A failed test may leave a tandemrun (or a tandem-store) running: each goes by
        # the pid it was started with, and SIGKILL takes a tandemrun's workers along
        # (PR_SET_PDEATHSIG), so nothing outlives the test.
        for proc in STARTED:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"ok launcher.{name}")


TESTS = {name[5:]: fn for name, fn in globals().items() if name.startswith("test_")}

if __name__ == "__main__":
    main(TESTS)
