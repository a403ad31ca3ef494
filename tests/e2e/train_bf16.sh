# --precision bf16 end to end (docs/precision.md): the MLP and the CNN learn a synthetic
# set as well as fp32 does, on the CPU's native bf16 GEMM when it has one and on the
# forced f32 fallback; the two paths end close to each other; a short GPT run learns;
# DDP with --grad-reduce-dtype bf16 keeps its replicas identical; the summary records it.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
CHECK=(python3 "$(dirname "$0")/check_summary.py")
ARGS=(--data synthetic --synthetic-train 4096 --synthetic-test 1024 --epochs 2 --batch-size 64
      --hidden 64 --lr 0.05 --no-progress --seed 7)
NATIVE=$(grep -qw avx512_bf16 /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && echo native || echo fallback)

expect 0 "done:" -- "$T" "${ARGS[@]}" --summary-json "$TMP/fp32.json"
expect 0 "precision bf16" -- "$T" "${ARGS[@]}" --precision bf16 --summary-json "$TMP/bf16.json"
expect 0 "fallback (f32 sgemm)" -- env TANDEM_BF16_GEMM=fallback "$T" "${ARGS[@]}" --precision bf16 \
  --summary-json "$TMP/fallback.json"
expect 0 "summary ok" -- "${CHECK[@]}" "$TMP/fp32.json" --precision fp32 --grad-reduce-dtype fp32 --bf16-gemm none
expect 0 "summary ok" -- "${CHECK[@]}" "$TMP/bf16.json" --min-accuracy 0.9 --precision bf16 \
  --grad-reduce-dtype fp32 --bf16-gemm "$NATIVE" --other-checksum "$TMP/fp32.json" \
  --accuracy-near "$TMP/fp32.json" 0.02
expect 0 "summary ok" -- "${CHECK[@]}" "$TMP/fallback.json" --min-accuracy 0.9 --precision bf16 \
  --bf16-gemm fallback --accuracy-near "$TMP/bf16.json" 0.02 --loss-near "$TMP/bf16.json" 0.05
expect 1 "TANDEM_BF16_GEMM='sometimes'" -- env TANDEM_BF16_GEMM=sometimes "$T" "${ARGS[@]}" --precision bf16 --max-steps 2

# The CNN (Conv2d's im2col GEMMs in bf16), briefly.
expect 0 "done:" -- "$T" --model cnn --data synthetic --synthetic-train 1024 --synthetic-test 256 --epochs 1 \
  --batch-size 32 --lr 0.05 --no-progress --precision bf16 --summary-json "$TMP/cnn.json"
expect 0 "summary ok" -- "${CHECK[@]}" "$TMP/cnn.json" --min-accuracy 0.5 --precision bf16

# A short GPT run (attention stays f32; qkv, projections, MLP and the tied LM head in bf16).
GPT=(--model gpt --data shakespeare --n-layer 2 --n-head 2 --n-embd 64 --context 32 --batch-size 8
     --optimizer adamw --lr 3e-3 --max-steps 60 --no-progress --log-level warn)
# Both start near ln(65) = 4.17 and end near 3.17 after 60 steps.
expect 0 "" -- "$T" "${GPT[@]}" --summary-json "$TMP/gpt32.json"
expect 0 "" -- "$T" "${GPT[@]}" --precision bf16 --summary-json "$TMP/gpt.json"
expect 0 "summary ok" -- "${CHECK[@]}" "$TMP/gpt.json" --precision bf16 --max-test-loss 3.4 \
  --loss-near "$TMP/gpt32.json" 0.05

# DDP over 2 ranks, gradients all-reduced in bf16: replicas stay identical.
expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$T" "${ARGS[@]}" --mode ddp \
  --batch-size 32 --precision bf16 --grad-reduce-dtype bf16 --summary-json "$TMP/ddp.json"
expect 0 "summary ok" -- "${CHECK[@]}" "$TMP/ddp.json" --mode ddp --min-accuracy 0.9 --precision bf16 \
  --grad-reduce-dtype bf16 --replicas-identical
finish
