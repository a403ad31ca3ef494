# --model gpt end to end, through the real programs on the shipped tiny Shakespeare:
#  1. bad flags and bad text files exit 2 naming the flag or the file;
#  2. a small GPT trains in single, DP(2) and DDP(2) under tandemrun, and the three end
#     at the same validation loss (within 1e-4: only float summation order differs);
#  3. resumed from its step-10 checkpoint, a run ends bit-identical to the run that went
#     on (the window stream continues exactly);
#  4. --sample prints the same text twice for the same seed (with either --attention), and
#     other text for another.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T="$BIN/tandem-train"
RUN="$BIN/tandemrun"
GPT=(--model gpt --data shakespeare --n-layer 1 --n-head 2 --n-embd 16 --context 16 --optimizer adamw --lr 3e-3
     --warmup-steps 2 --weight-decay 0.1 --clip-grad-norm 1 --no-progress --threads 1 --max-steps 20)

# 1. Usage errors.
expect 2 "--n-layer is a flag of --model gpt" -- "$T" --n-layer 2
expect 2 "--hidden is a flag of --model mlp" -- "$T" --model gpt --data shakespeare --hidden 64
expect 2 "--n-embd (10) must be divisible by --n-head (4)" -- "$T" --model gpt --data shakespeare --n-embd 10 --n-head 4
expect 2 "--context must be positive" -- "$T" --model gpt --data shakespeare --context 0
expect 2 "--attention: flash not in {materialized,tiled}" -- "$T" --model gpt --data shakespeare --attention flash
expect 2 "--attention is a flag of --model gpt" -- "$T" --attention tiled
expect 2 "--model gpt needs --data shakespeare or --data text:PATH" -- "$T" --model gpt
expect 2 "is text: it needs --model gpt" -- "$T" --data shakespeare
expect 2 "--data" -- "$T" --model gpt --data text:
expect 2 "--sample needs --resume" -- "$T" --model gpt --data shakespeare --sample 10
: > "$TMP/empty.txt"
expect 2 "$TMP/empty.txt" -- "$T" "${GPT[@]}" --data "text:$TMP/empty.txt"
expect 2 "empty" -- "$T" "${GPT[@]}" --data "text:$TMP/empty.txt"
expect 2 "$TMP/missing.txt" -- "$T" "${GPT[@]}" --data "text:$TMP/missing.txt"
printf 'to be or not to be' > "$TMP/short.txt"
expect 2 "$TMP/short.txt" -- "$T" "${GPT[@]}" --data "text:$TMP/short.txt"
mkdir -p "$TMP/tampered"
head -c 200000 "$(dirname "$0")/../../data/tinyshakespeare.txt" > "$TMP/tampered/tinyshakespeare.txt"
expect 2 "sha256" -- env TANDEM_DATA_DIR="$TMP/tampered" "$T" "${GPT[@]}"
# Any text file trains (a byte-level vocabulary of its own).
head -c 20000 "$(dirname "$0")/../../data/tinyshakespeare.txt" > "$TMP/small.txt"
expect 0 "done:" -- "$T" "${GPT[@]}" --data "text:$TMP/small.txt" --max-steps 3

# 2. Single, DP(2) and DDP(2) agree.
expect 0 "tokens/s" -- "$T" "${GPT[@]}" --batch-size 8 --summary-json "$TMP/single.json" \
  --checkpoint-dir "$TMP/ckpt" --save-every 10
expect 0 "done:" -- "$T" "${GPT[@]}" --mode dp --devices 2 --batch-size 4 --summary-json "$TMP/dp.json"
expect 0 "done:" -- "$RUN" --nproc-per-node 2 --master-port 0 -- "$T" "${GPT[@]}" --mode ddp --backend gloo \
  --batch-size 4 --summary-json "$TMP/ddp.json"
expect 0 "agree" -- python3 - "$TMP/single.json" "$TMP/dp.json" "$TMP/ddp.json" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
s = runs[0]
assert s["model"] == "gpt" and s["tokens_per_s"] > 0, s
assert abs(s["tokens_per_s"] - s["samples_per_s"] * 16) < 1e-6 * s["tokens_per_s"], "tokens_per_s = samples_per_s x context"
for r in runs[1:]:
    assert r["global_batch"] == 8 and r["steps"] == 20, r
    assert abs(r["test_loss"] - s["test_loss"]) < 1e-4, (r["mode"], r["test_loss"], s["test_loss"])
assert runs[2]["replicas_identical"], "DDP replicas identical"
print("single, dp and ddp agree: test_loss", [round(r["test_loss"], 6) for r in runs])
PY

# 3. Resumed from the step-10 checkpoint of the run above (same schedule, same flags):
#    bit-identical at step 20.
expect 0 "done:" -- "$T" "${GPT[@]}" --batch-size 8 --resume "$TMP/ckpt/step-00000010" \
  --summary-json "$TMP/resumed.json"
expect 0 "same" -- python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a['param_checksum'] == b['param_checksum'], (a['param_checksum'], b['param_checksum'])
print('same checksum', a['param_checksum'])" "$TMP/single.json" "$TMP/resumed.json"

# 4. Sampling from the checkpoint: a pure function of (checkpoint, prompt, seed).
"$T" --model gpt --resume "$TMP/ckpt/step-00000020" --sample 60 --seed 3 --prompt "ROMEO:" > "$TMP/a.txt" 2>/dev/null
"$T" --model gpt --resume "$TMP/ckpt/step-00000020" --sample 60 --seed 3 --prompt "ROMEO:" > "$TMP/b.txt" 2>/dev/null
"$T" --model gpt --resume "$TMP/ckpt/step-00000020" --sample 60 --seed 4 --prompt "ROMEO:" > "$TMP/c.txt" 2>/dev/null
# The tiled attention's logits differ from the materialized ones by float rounding only: the
# same draws pick the same characters (deterministic, so this either always holds or never).
"$T" --model gpt --resume "$TMP/ckpt/step-00000020" --sample 60 --seed 3 --prompt "ROMEO:" --attention tiled \
  > "$TMP/d.txt" 2>/dev/null
if [ -s "$TMP/a.txt" ] && cmp -s "$TMP/a.txt" "$TMP/b.txt" && ! cmp -s "$TMP/a.txt" "$TMP/c.txt" \
   && cmp -s "$TMP/a.txt" "$TMP/d.txt" \
   && [ "$(head -c 6 "$TMP/a.txt")" = "ROMEO:" ] && [ "$(wc -c < "$TMP/a.txt")" -eq 67 ]; then
  echo "ok: --sample is reproducible per seed: $(head -c 40 "$TMP/a.txt" | tr '\n' ' ')"
else
  echo "FAIL: --sample output: a='$(cat "$TMP/a.txt")' b='$(cat "$TMP/b.txt")' c='$(cat "$TMP/c.txt")'"; FAILED=1
fi
expect 2 "not in the model's vocabulary" -- "$T" --model gpt --resume "$TMP/ckpt/step-00000020" --sample 5 --prompt "é"
finish
