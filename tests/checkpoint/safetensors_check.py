#!/usr/bin/env python3
"""Independent reader of a Tandem checkpoint: Python's standard library only, nothing of ours.

usage: safetensors_check.py CHECKPOINT_DIR EXPECTED_TXT

Parses model.safetensors and optimizer.safetensors from the format's description (u64
little-endian header length, JSON header, raw little-endian data), checks the header (8-byte
padding, string-only __metadata__, offsets contiguous and covering the data), every tensor's
CRC-32 against meta.json, meta.json's own CRC (over its compact sorted-key dump), and the
values listed in EXPECTED_TXT ("file name index hexbits"). Exits 0 when all hold.
"""
import json
import struct
import sys
import zlib

ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8:
        fail(f"{path}: header length {n} not a multiple of 8")
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    meta = header.pop("__metadata__", {})
    if not all(isinstance(v, str) for v in meta.values()):
        fail(f"{path}: __metadata__ values must be strings")
    pos = 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = e["data_offsets"]
        numel = 1
        for d in e["shape"]:
            numel *= d
        if begin != pos or end - begin != numel * ITEMSIZE[e["dtype"]]:
            fail(f"{path}: tensor {name} has offsets {begin}..{end}, expected {pos}..{pos + numel * ITEMSIZE[e['dtype']]}")
        pos = end
    if pos != len(data):
        fail(f"{path}: tensors cover {pos} of {len(data)} data bytes")
    return blob, header, meta, data


def main():
    ckpt, expected_path = sys.argv[1], sys.argv[2]
    with open(f"{ckpt}/meta.json") as f:
        meta = json.load(f)
    stored = meta.pop("meta_crc32")
    canonical = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if f"{zlib.crc32(canonical.encode('utf-8')):08x}" != stored:
        fail("meta.json: meta_crc32 does not match its contents")
    tensors = {}
    for file in ("model.safetensors", "optimizer.safetensors"):
        blob, header, st_meta, data = read_safetensors(f"{ckpt}/{file}")
        record = meta["files"][file]
        if record["bytes"] != len(blob) or record["crc32"] != f"{zlib.crc32(blob):08x}":
            fail(f"{file}: size or crc32 differs from meta.json")
        for name, e in header.items():
            begin, end = e["data_offsets"]
            if record["tensors"][name] != f"{zlib.crc32(data[begin:end]):08x}":
                fail(f"{file}: tensor {name} crc32 differs from meta.json")
            tensors[(file, name)] = (e, data[begin:end])
        if file == "optimizer.safetensors" and st_meta.get("steps_taken") != str(meta["optimizer"]["steps_taken"]):
            fail("optimizer.safetensors: steps_taken in __metadata__ differs from meta.json")
        print(f"ok: {file}: {len(header)} tensors, {len(blob)} bytes, metadata {st_meta}")
    checked = 0
    with open(expected_path) as f:
        for line in f:
            file, name, index, bits = line.split()
            e, raw = tensors[(file, name)]
            (got,) = struct.unpack_from("<I", raw, 4 * int(index))
            if f"{got:08x}" != bits:
                fail(f"{file}: {name}[{index}] is {got:08x}, expected {bits}")
            checked += 1
    print(f"ok: {checked} values match, shapes e.g. fc1.weight {tensors[('model.safetensors', 'fc1.weight')][0]['shape']}")


if __name__ == "__main__":
    main()
