#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<target>/ from the real formats.

Small, valid inputs (and a few near-misses that reach each refusal early), deterministic, so
re-running it rewrites the same bytes. Checkpoint files (safetensors, meta.json) written by
the real checkpoint code are passed in with --checkpoint DIR (a step-NNNNNNNN directory made
by tandem-train --save-every): they are copied as model-<i>.safetensors, meta-<i>.json.

usage: tests/fuzz/make_seeds.py [--checkpoint DIR]...
"""
import argparse
import gzip
import json
import os
import re
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- store_server: byte 0 = chunk size (bits 0-5, 0: all at once), 0x80 the server with a job
# secret, 0x40 (with 0x80) the harness passes the handshake first; then frames (store_protocol.h) --
def protocol_version():
    """kVersion of collectives/store_protocol.h: the seeds speak the version the server does."""
    header = os.path.join(HERE, "..", "..", "collectives", "store_protocol.h")
    with open(header) as f:
        m = re.search(r"constexpr uint32_t kVersion = (\d+);", f.read())
    return int(m.group(1))


MAGIC, VERSION = 0x54444D53, protocol_version()
SET, GET, WAIT, ADD, CSET, DELETE, CHECK, NUM_KEYS, READ_AGED = range(1, 10)


def u32(v):
    return struct.pack("<I", v)


def i64(v):
    return struct.pack("<q", v)


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return u32(len(b)) + b


def frame(body):
    return u32(len(body)) + body


def hello(job="fuzz", version=VERSION, magic=MAGIC, nonce=b"n" * 32):
    return frame(u32(magic) + u32(version) + s(job) + s(nonce))


AUTHENTICATED, HANDSHAKE_FIRST = 0x80, 0x40


def store_seeds():
    h = hello()
    seeds = {
        "hello": h,
        "set_get": h + frame(bytes([SET]) + s("k") + s("v")) + frame(bytes([GET]) + s("k") + i64(0)),
        "get_absent_now": h + frame(bytes([GET]) + s("absent") + i64(0)),
        "get_parked": h + frame(bytes([GET]) + s("never") + i64(60_000)),
        "wait_parked_then_more": h + frame(bytes([WAIT]) + u32(2) + s("a") + s("never") + i64(60_000))
        + frame(bytes([NUM_KEYS])),
        "wait_present": h + frame(bytes([SET]) + s("a") + s("1")) + frame(bytes([WAIT]) + u32(1) + s("a") + i64(10)),
        "add": h + frame(bytes([ADD]) + s("n") + i64(5)) + frame(bytes([ADD]) + s("n") + i64(-7)),
        "add_not_integer": h + frame(bytes([SET]) + s("t") + s("text")) + frame(bytes([ADD]) + s("t") + i64(1)),
        "compare_set": h + frame(bytes([CSET]) + s("c") + s("") + s("first"))
        + frame(bytes([CSET]) + s("c") + s("wrong") + s("second")),
        "delete": h + frame(bytes([SET]) + s("d") + s("x")) + frame(bytes([DELETE]) + s("d"))
        + frame(bytes([DELETE]) + s("d")),
        "check": h + frame(bytes([CHECK]) + u32(2) + s("a") + s("b")),
        "num_keys": h + frame(bytes([NUM_KEYS])),
        "read_aged": h + frame(bytes([SET]) + s("a") + s("1")) + frame(bytes([READ_AGED]) + u32(2) + s("a") + s("b")),
        "every_command": h + frame(bytes([SET]) + s("k") + s("v")) + frame(bytes([GET]) + s("k") + i64(1))
        + frame(bytes([WAIT]) + u32(1) + s("k") + i64(1)) + frame(bytes([ADD]) + s("n") + i64(1))
        + frame(bytes([CSET]) + s("k") + s("v") + s("w")) + frame(bytes([DELETE]) + s("k"))
        + frame(bytes([CHECK]) + u32(1) + s("n")) + frame(bytes([NUM_KEYS]))
        + frame(bytes([READ_AGED]) + u32(1) + s("n")),
        "wrong_job": hello("other-job"),
        "bad_version": hello(version=VERSION + 1),
        "bad_magic": hello(magic=0x12345678),
        "oversized_frame": h + u32(0xFFFFFFF0) + b"\x01",
        "truncated_frame": h + u32(100) + bytes([SET]) + s("k"),
        "unknown_command": h + frame(bytes([99])),
        "trailing_field": h + frame(bytes([NUM_KEYS]) + b"x"),
        "no_hello": frame(bytes([SET]) + s("k") + s("v")),
        "hello_v2": frame(u32(MAGIC) + u32(2) + s("fuzz")),
        "hello_short_nonce": hello(nonce=b"short"),
    }
    # The handshake's limits (store_server.cpp): a job id of at most 4096 bytes, so a hello
    # of at most 4144; before the handshake is over one such frame at a time.
    longest_job = "j" * 4096
    seeds.update({
        "hello_longest_job": hello(longest_job),
        "hello_job_one_past": hello(longest_job + "j"),
        "declared_at_handshake_cap": u32(4144) + b"x" * 64,
        "declared_past_handshake_cap": u32(4145) + b"x" * 64,
        "hello_then_flood": h + b"x" * 5000,
        "proof_before_hello": frame(s(b"w" * 32)),
        "num_keys_before_hello": frame(bytes([NUM_KEYS])),
        "hello_twice": h + h,
        "declared_at_frame_limit": h + u32(64 << 20) + bytes([SET]),
        "declared_past_frame_limit": h + u32((64 << 20) + 1) + bytes([SET]),
    })
    for name, data in seeds.items():
        put("store_server", name, b"\x00" + data)
    # The same streams cut into small pieces: frames split across reads.
    for name, chunk in [("every_command", 1), ("set_get", 3), ("wait_parked_then_more", 7)]:
        put("store_server", f"{name}_chunk{chunk}", bytes([chunk]) + seeds[name])
    # The server with a job secret: a hello and a proof the fuzzer cannot get right, or
    # a proof of the wrong length, or none; and requests after the harness's own handshake.
    put("store_server", "auth_wrong_proof", bytes([AUTHENTICATED]) + hello() + frame(s(b"w" * 32)))
    put("store_server", "auth_no_proof", bytes([AUTHENTICATED]) + hello() + frame(s(b"")))
    put("store_server", "auth_long_proof", bytes([AUTHENTICATED]) + hello() + frame(s(b"w" * 33)))
    put("store_server", "auth_requests_before_proof", bytes([AUTHENTICATED]) + hello() + frame(bytes([NUM_KEYS])))
    # Every message in the challenged state, and past its limits.
    put("store_server", "auth_hello_again", bytes([AUTHENTICATED]) + hello() + hello())
    put("store_server", "auth_set_before_proof", bytes([AUTHENTICATED]) + hello() + frame(bytes([SET]) + s("k") + s("v")))
    put("store_server", "auth_proof_past_cap", bytes([AUTHENTICATED]) + hello() + u32(4145) + s(b"w" * 32))
    put("store_server", "auth_proof_then_requests", bytes([AUTHENTICATED]) + hello() + frame(s(b"w" * 32))
        + frame(bytes([NUM_KEYS])))
    put("store_server", "auth_longest_hello", bytes([AUTHENTICATED]) + hello(longest_job))
    put("store_server", "auth_wrong_job", bytes([AUTHENTICATED]) + hello("other-job"))
    # And in the greeted state: a hello or a proof again, the general limit.
    put("store_server", "auth_then_hello", bytes([AUTHENTICATED | HANDSHAKE_FIRST]) + hello())
    put("store_server", "auth_then_proof", bytes([AUTHENTICATED | HANDSHAKE_FIRST]) + frame(s(b"w" * 32)))
    put("store_server", "auth_then_past_frame_limit",
        bytes([AUTHENTICATED | HANDSHAKE_FIRST]) + u32((64 << 20) + 1) + bytes([SET]))
    put("store_server", "auth_then_every_command", bytes([AUTHENTICATED | HANDSHAKE_FIRST]) + seeds["every_command"][len(h):])
    put("store_server", "auth_then_every_command_chunk1",
        bytes([AUTHENTICATED | HANDSHAKE_FIRST | 1]) + seeds["every_command"][len(h):])


# ---- idx: magic 00 00 08 NDIMS, big-endian u32 sizes, then the bytes -----------------------
def idx(dims, data=None):
    n = 1
    for d in dims:
        n *= d
    if data is None:
        data = bytes(i % 251 for i in range(n))
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


def idx_seeds():
    put("idx", "labels_1d", idx([10]))
    put("idx", "images_3d", idx([2, 3, 3]))
    put("idx", "images_3d.gz", gzip.compress(idx([2, 3, 3]), mtime=0))
    put("idx", "empty_dim", idx([0, 28, 28]))
    put("idx", "truncated_data", idx([4, 4])[:-3])
    put("idx", "trailing_bytes", idx([3]) + b"xyz")
    put("idx", "float_type", bytes([0, 0, 0x0D, 1]) + struct.pack(">I", 1) + b"\0\0\0\0")
    put("idx", "gzip_cut.gz", gzip.compress(idx([8, 8]), mtime=0)[:-10])
    put("idx", "header_claims_64gib", idx([65536, 1024, 1000], b"abc"))


# ---- safetensors: u64 N, N bytes of JSON header (space padded to 8), data --------------------
def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes), in data order."""
    header, offset, blob = {}, 0, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + blob


def safetensors_seeds():
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    put("safetensors", "two_tensors", safetensors(
        [("bias", "F32", [2], struct.pack("<2f", 0.5, -0.5)), ("weight", "F32", [2, 3], f32)],
        {"format": "pt", "tandem.content": "model"}))
    put("safetensors", "every_dtype", safetensors([
        ("a", "BF16", [2], b"\x80\x3f\x00\x40"), ("b", "F16", [1], b"\x00\x3c"), ("c", "F32", [], b"\0\0\x80\x3f"),
        ("d", "I32", [1, 1], struct.pack("<i", -3)), ("e", "I64", [1], struct.pack("<q", 7)), ("f", "U8", [3], b"xyz")]))
    put("safetensors", "empty_tensor", safetensors([("z", "F32", [0, 4], b"")]))
    put("safetensors", "empty_header", safetensors([]))
    put("safetensors", "overlap", struct.pack("<Q", 104) + json.dumps(
        {"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
         "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, separators=(",", ":")).encode().ljust(104) + b"abc")


# ---- text: 8 settings bytes (text.cpp: context, batch, replicas, rank, seed, windows, step,
# sha256 check), then the text ---------------------------------------------------------------
def text_seeds():
    verse = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
             "First Citizen:\nYou are all resolved rather to die than to famish?\n")
    put("text", "shakespeare", bytes([7, 3, 1, 0, 42, 5, 0, 0]) + verse.encode())
    put("text", "two_replicas", bytes([3, 2, 2, 1, 7, 9, 2, 0]) + verse.encode())
    put("text", "utf8", bytes([4, 1, 1, 0, 1, 3, 1, 0]) + ("naïve café — ünïcödé, 日本語のテキスト。" * 3).encode())
    put("text", "binary", bytes([2, 2, 3, 2, 9, 2, 3, 0]) + bytes(range(256)))
    put("text", "too_short", bytes([60, 1, 1, 0, 0, 1, 0, 0]) + b"short text")
    put("text", "sha_check", bytes([3, 1, 1, 0, 0, 1, 0, 1]) + verse.encode())


# ---- flags: one argument per line -----------------------------------------------------------
def flag_seeds():
    run = {
        "single_node": ["--nproc-per-node", "2", "--", "build/bin/tandem-train", "--mode", "ddp"],
        "two_nodes": ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500",
                      "--rdzv-timeout-s", "60", "--grace-s", "1", "--", "tandem-train", "--mode", "ddp"],
        "free_port": ["--master-port", "0", "--max-restarts", "2", "--log-dir", "logs", "--rank-filter", "0,1",
                      "--nproc-per-node", "4", "--job-id", "demo", "--", "prog"],
        "gpu": ["--nproc-per-node", "gpu", "--", "prog"],
        "help": ["--help"],
        "version": ["--version"],
        "no_program": ["--nproc-per-node", "2"],
        "bad_rank_filter": ["--nproc-per-node", "2", "--rank-filter", "0,,5", "--", "prog"],
    }
    for name, args in run.items():
        put("tandemrun_flags", name, "\n".join(args))
    train = {
        "mlp": ["--model", "mlp", "--epochs", "10", "--summary-json", "run.json"],
        "cnn_dp": ["--model", "cnn", "--mode", "dp", "--devices", "2", "--batch-size", "64"],
        "ddp": ["--mode", "ddp", "--backend", "shm", "--comm-hook", "fp16", "--bucket-cap-mb", "4",
                "--collective-timeout-s", "120", "--grad-accum", "2", "--no-overlap"],
        "gpt": ["--model", "gpt", "--data", "shakespeare", "--optimizer", "adamw", "--lr", "1e-3", "--max-steps",
                "2000", "--clip-grad-norm", "1", "--checkpoint-dir", "ckpt", "--n-layer", "2", "--n-head", "2",
                "--n-embd", "64", "--context", "32", "--dropout", "0.1"],
        "sample": ["--model", "gpt", "--resume", "ckpt/step-00002000", "--sample", "300", "--temperature", "0.8",
                   "--prompt", "ROMEO:"],
        "resume_auto": ["--checkpoint-dir", "ckpt", "--save-every", "200", "--resume", "auto", "--keep-last", "2"],
        "synthetic": ["--data", "synthetic", "--synthetic-train", "512", "--synthetic-test", "128", "--seed", "7",
                      "--warmup-steps", "10", "--min-lr", "0.001", "--momentum", "0.8", "--nesterov",
                      "--weight-decay", "1e-4", "--threads", "1", "--log-level", "warn", "--no-progress"],
        "help": ["--help"],
        "bad_value": ["--lr", "-1"],
    }
    for name, args in train.items():
        put("train_flags", name, "\n".join(args))


# ---- slurm_hostlist: the text of SLURM_STEP_NODELIST (or SLURM_STEP_TASKS_PER_NODE): every
# expression of tests/data/slurm_hostlists.txt (scontrol's oracle), and a few task counts ----
def slurm_hostlist_seeds():
    oracle = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "data", "slurm_hostlists.txt")
    with open(oracle) as f:
        for i, line in enumerate(f):
            put("slurm_hostlist", f"oracle-{i:02d}", line.split("\t")[0])
    for i, counts in enumerate(["4", "2(x3),1", "1,3(x2)", "2(x", "0"]):
        put("slurm_hostlist", f"tasks-{i}", counts)


def checkpoint_seeds(dirs):
    for i, d in enumerate(dirs):
        for f in sorted(os.listdir(d)):
            src = os.path.join(d, f)
            if f == "meta.json":
                shutil.copyfile(src, os.path.join(CORPUS, "checkpoint_meta", f"meta-{i}.json"))
            elif f.endswith(".safetensors"):
                shutil.copyfile(src, os.path.join(CORPUS, "safetensors", f"{f[:-len('.safetensors')]}-{i}.safetensors"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", action="append", default=[], help="a checkpoint step directory to copy from")
    a = p.parse_args()
    store_seeds()
    idx_seeds()
    safetensors_seeds()
    text_seeds()
    flag_seeds()
    slurm_hostlist_seeds()
    os.makedirs(os.path.join(CORPUS, "checkpoint_meta"), exist_ok=True)
    checkpoint_seeds(a.checkpoint)


if __name__ == "__main__":
    main()
