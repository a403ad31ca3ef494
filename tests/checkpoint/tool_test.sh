#!/usr/bin/env bash
# tandem-ckpt end to end: inspect / verify / list on a good checkpoint (made by ckpt_helper)
# and on corrupted copies, asserting exit codes (0 fine, 1 problem, 2 usage) and that each
# message names the damaged file; plus the independent Python reader of the safetensors files.
# usage: tool_test.sh BIN_DIR CKPT_HELPER
source "$(dirname "$0")/../e2e/lib.sh"  # expect, finish, $BIN, $TMP
HELPER="$2"
HERE="$(dirname "$0")"
CKPT="$BIN/tandem-ckpt"

G="$("$HELPER" make "$TMP/root" 12 sgd)" || { echo "FAIL: ckpt_helper make"; exit 1; }
"$HELPER" make "$TMP/root" 13 sgd >/dev/null   # a newer one, for list and auto

expect 0 "OK $G"                -- "$CKPT" verify "$G"
expect 0 "fc1.weight.momentum_buffer" -- "$CKPT" inspect "$G"
expect 0 "[64, 784]"            -- "$CKPT" inspect "$G"
expect 0 "step 12, epoch 1, step_in_epoch 2" -- "$CKPT" inspect "$G"
expect 0 "model mlp, hidden 64" -- "$CKPT" inspect "$G"
expect 0 '"ok": true'           -- "$CKPT" inspect --json "$G"
expect 0 "resume from $TMP/root/step-00000013" -- "$CKPT" list "$TMP/root"

# The files are real safetensors: an independent reader agrees on headers, checksums, values.
expect 0 "values match"         -- python3 "$HERE/safetensors_check.py" "$G" "$TMP/root/expected-12.txt"
"$CKPT" inspect --json "$G" | python3 -c '
import json, sys
j = json.load(sys.stdin)
t = {x["name"]: x for x in j["files"]["model.safetensors"]["tensors"]}
assert t["fc1.weight"]["shape"] == [64, 784] and t["fc3.bias"]["bytes"] == 40, t
assert j["meta"]["step"] == 12 and j["meta"]["optimizer"]["kind"] == "sgd", j["meta"]
' && echo "ok: inspect --json parses" || { echo "FAIL: inspect --json"; FAILED=1; }

# flip_byte FILE OFFSET: XOR one byte with 1 (a negative OFFSET counts from the end).
flip_byte() {
  python3 - "$1" "$2" <<'PY'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off, 0 if off >= 0 else 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 1]))
PY
}
# damaged NAME: a fresh copy of the good checkpoint, for one kind of damage.
damaged() {
  local d="$TMP/bad-$1/step-00000012"
  mkdir -p "$(dirname "$d")" && cp -r "$G" "$d" && echo "$d"
}

D="$(damaged truncated)"; truncate -s 1000 "$D/model.safetensors"
expect 1 "model.safetensors: 1000 bytes, but meta.json records" -- "$CKPT" verify "$D"
expect 1 "truncated"            -- "$CKPT" inspect "$D"
D="$(damaged data)"; flip_byte "$D/model.safetensors" -7
expect 1 "model.safetensors: tensor 'fc3.weight' checksum mismatch" -- "$CKPT" verify "$D"
D="$(damaged optdata)"; flip_byte "$D/optimizer.safetensors" -300
expect 1 "optimizer.safetensors: tensor" -- "$CKPT" verify "$D"
D="$(damaged header)"; flip_byte "$D/model.safetensors" 8
expect 1 "model.safetensors: header does not start with '{'" -- "$CKPT" verify "$D"
D="$(damaged length)"; printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$D/model.safetensors" conv=notrunc status=none
expect 1 "model.safetensors: header length" -- "$CKPT" verify "$D"
D="$(damaged nometa)"; rm "$D/meta.json"
expect 1 "meta.json: missing"   -- "$CKPT" verify "$D"
expect 1 "meta.json: missing"   -- "$CKPT" inspect "$D"
D="$(damaged metaedit)"; sed -i 's/"step": 12/"step": 11/' "$D/meta.json"
expect 1 "meta.json: checksum mismatch" -- "$CKPT" verify "$D"
D="$(damaged noopt)"; rm "$D/optimizer.safetensors"
expect 1 "optimizer.safetensors: missing" -- "$CKPT" verify "$D"
expect 1 "no such checkpoint directory" -- "$CKPT" verify "$TMP/nowhere"

# A corrupt newest checkpoint: list reports it and --resume auto would take the previous one.
flip_byte "$TMP/root/step-00000013/model.safetensors" -3
expect 0 "resume from $TMP/root/step-00000012" -- "$CKPT" list "$TMP/root"
expect 0 "INVALID"              -- "$CKPT" list "$TMP/root"

# Usage errors: exit 2, naming what is wrong.
expect 2 "subcommand"           -- "$CKPT"
expect 2 "DIR"                  -- "$CKPT" verify
expect 2 "--bogus"              -- "$CKPT" inspect --bogus "$G"
expect 2 "unknown command 'frob'" -- "$CKPT" frob "$G"
expect 0 "inspect"              -- "$CKPT" --help
finish
