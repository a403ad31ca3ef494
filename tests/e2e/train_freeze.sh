# Fine-tuning end to end (runtime/freeze.h, --init-from/--init-skip/--freeze): a short
# single-process pretraining run, then a fine-tune from its checkpoint in DDP(2) on shm with
# fc1 and fc2.weight frozen, plain and ZeRO-1. Checks, with python3 reading the files
# (the safetensors format by hand):
#  1. the frozen tensors are bit-identical between the init checkpoint and the fine-tuned
#     one (AdamW's decoupled weight decay would move them if they were stepped), the others
#     moved; the fine-tune's optimizer file has no state for them; the summary's buckets
#     hold exactly the trained parameters' bytes; ZeRO-1 gives the same parameters;
#  2. resuming the fine-tune without --freeze is refused, naming the parameters (exit 1);
#  3. --init-from into another --hidden exits 2 naming every mismatched tensor, and
#     --init-skip lets it start; usage errors exit 2;
#  4. a GPT fine-tuned on another text encodes it with the checkpoint's vocabulary, and a
#     byte outside that vocabulary is a usage error (exit 2) naming it.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
COMMON=(--data synthetic --synthetic-train 2048 --synthetic-test 256 --model mlp --hidden 32 --no-progress
        --threads 1 --epochs 100 --batch-size 32 --bucket-cap-mb 0.02)
FREEZE=(--freeze fc1.weight,fc1.bias --freeze fc2.weight)
ddp() {  # ddp ARGS...: DDP(2) on shared memory
  "$RUN" --nproc-per-node 2 --master-port 0 -- "$T" "${COMMON[@]}" --mode ddp --backend shm --batch-size 16 "$@"
}

# 1. Pretrain, then fine-tune from it with fc1 and fc2.weight frozen.
expect 0 "done:" -- "$T" "${COMMON[@]}" --max-steps 20 --checkpoint-dir "$TMP/pre"
PRE="$TMP/pre/step-00000020"
TUNE=(--init-from "$TMP/pre" "${FREEZE[@]}" --optimizer adamw --lr 1e-3 --weight-decay 0.1 --max-steps 10)
expect 0 "freeze: 3 parameters frozen" -- ddp "${TUNE[@]}" --checkpoint-dir "$TMP/ft" --summary-json "$TMP/ft.json"
expect 0 "done:" -- ddp "${TUNE[@]}" --zero 1 --checkpoint-dir "$TMP/ftz" --summary-json "$TMP/ftz.json"
expect 0 "frozen kept" -- python3 - "$PRE" "$TMP/ft/step-00000010" "$TMP/ft.json" "$TMP/ftz/step-00000010" <<'PY'
import json, struct, sys
def tensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["shape"], blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in header.items()}
pre, ft, summary, ftz = tensors(sys.argv[1] + "/model.safetensors"), tensors(sys.argv[2] + "/model.safetensors"), \
    json.load(open(sys.argv[3])), tensors(sys.argv[4] + "/model.safetensors")
frozen = {"fc1.weight", "fc1.bias", "fc2.weight"}
assert set(pre) == set(ft), (sorted(pre), sorted(ft))
for name in pre:
    same = pre[name][1] == ft[name][1]
    assert same == (name in frozen), f"{name}: {'unchanged' if same else 'changed'} by the fine-tune"
assert ft == ftz, "ZeRO-1 fine-tune differs from plain DDP's"
state = tensors(sys.argv[2] + "/optimizer.safetensors")
for name in state:
    assert name.rsplit(".", 1)[0] not in frozen, f"optimizer state for frozen {name}"
assert len(state) == 2 * (len(pre) - len(frozen)), sorted(state)
trained_bytes = sum(len(b) for k, (s, b) in ft.items() if k not in frozen)
buckets = summary["buckets"]
assert sum(b["bytes"] for b in buckets) == trained_bytes, (buckets, trained_bytes)
assert sum(b["parameters"] for b in buckets) == len(ft) - len(frozen), buckets
print("frozen kept", len(buckets), "buckets of", trained_bytes, "bytes")
PY

# 2. A resume must freeze what the checkpoint's run froze.
expect 1 "trained now but frozen then, without optimizer state: fc1.weight, fc1.bias, fc2.weight" -- \
  "$T" "${COMMON[@]}" --optimizer adamw --max-steps 12 --resume "$TMP/ft/step-00000010"
expect 0 "done:" -- "$T" "${COMMON[@]}" --optimizer adamw --max-steps 12 "${FREEZE[@]}" --resume "$TMP/ft/step-00000010"

# 3. Another architecture: every mismatched tensor named, exit 2; --init-skip lets it start.
out="$("$T" "${COMMON[@]}" --hidden 48 --max-steps 2 --init-from "$PRE" 2>&1)"; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL: mismatched --init-from exited $rc, expected 2:"; echo "$out" | tail -5; FAILED=1; fi
for needle in "5 tensor(s) do not match" "fc1.weight (F32 [32, 784] in the checkpoint, F32 [48, 784] in the model)" \
              "fc1.bias (" "fc2.weight (" "fc2.bias (" "fc3.weight (F32 [10, 32] in the checkpoint"; do
  if ! grep -qF -- "$needle" <<<"$out"; then echo "FAIL: mismatch message lacks '$needle':"; echo "$out"; FAILED=1; fi
done
if grep -qF "fc3.bias" <<<"$out"; then echo "FAIL: fc3.bias matches but was named:"; echo "$out"; FAILED=1; fi
[ "$FAILED" -eq 0 ] && echo "ok: exit 2, every mismatched tensor named"
expect 0 "init-from: 1 tensors" -- "$T" "${COMMON[@]}" --hidden 48 --max-steps 2 --init-from "$PRE" \
  --init-skip 'fc1.*,fc2.*' --init-skip fc3.weight
expect 2 "--init-skip needs --init-from" -- "$T" "${COMMON[@]}" --init-skip fc1.weight
expect 2 "pattern 'head.*' matches no parameter" -- "$T" "${COMMON[@]}" --max-steps 1 --freeze fc1.weight,head.*
expect 2 "nothing would train" -- "$T" "${COMMON[@]}" --max-steps 1 --freeze '*'
expect 2 "no such checkpoint" -- "$T" "${COMMON[@]}" --max-steps 1 --init-from "$TMP/none"

# 4. A language model fine-tuned on another text keeps its vocabulary: a tiny GPT pretrained on
#    one text, fine-tuned on a second one written in a subset of its bytes (body frozen); a
#    text with a byte the vocabulary lacks is a usage error naming the byte.
GPT=(--model gpt --n-layer 1 --n-head 2 --n-embd 16 --context 8 --batch-size 4 --threads 1 --no-progress)
python3 - "$TMP" <<'PY'
import sys
d = sys.argv[1]
open(d + "/first.txt", "w").write("the quick brown fox jumps over the lazy dog.\n" * 40)
open(d + "/second.txt", "w").write("a dog jumps. the fox is quick.\n" * 40)
open(d + "/third.txt", "w").write("42 dogs\n" * 40)
PY
expect 0 "done:" -- "$T" "${GPT[@]}" --data "text:$TMP/first.txt" --max-steps 5 --checkpoint-dir "$TMP/gpt"
expect 0 "encoded with the checkpoint's vocabulary of 29 bytes" -- "$T" "${GPT[@]}" --data "text:$TMP/second.txt" \
  --max-steps 5 --init-from "$TMP/gpt" --freeze 'wte.*,wpe.*'
expect 2 "holds byte 0x34 at offset 0, which the given vocabulary of 29 bytes lacks" -- \
  "$T" "${GPT[@]}" --data "text:$TMP/third.txt" --max-steps 5 --init-from "$TMP/gpt"
finish
