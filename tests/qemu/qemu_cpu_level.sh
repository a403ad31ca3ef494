# The CPU kernel dispatch (runtime/cpu/cpu_isa.h) on CPUs this machine is not: the real
# binaries under qemu-user's TCG emulation of an older x86-64 model. Nehalem has no AVX,
# so the process must pick (and run correctly) the baseline kernels; Haswell has AVX2,
# FMA and F16C but no AVX-512, so it must pick avx2, refuse TANDEM_CPU_KERNELS=avx512
# naming avx2 as the best, and give the baseline's bits (CpuDispatch.*). An instruction
# above the model's level anywhere in the run (a leaked AVX-512 or AVX2 copy) would end it
# with SIGILL. Skipped (exit 77, reason printed) where qemu-x86_64 is absent.
#   qemu_cpu_level.sh BIN CPU_MODEL LEVEL unit|train
source "$(dirname "$0")/../e2e/lib.sh"
CPU_MODEL="$2" LEVEL="$3" WHAT="$4"
QEMU="$(command -v qemu-x86_64 || true)"
if [ -z "$QEMU" ]; then
  echo "SKIP: qemu-x86_64 not found (scripts/setup-deps installs qemu-user)"
  exit 77
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "SKIP: the binaries are $(uname -m), not x86-64"
  exit 77
fi
# OpenBLAS 0.3.21 takes its Haswell kernels under qemu-user whatever the model emulates
# (its own SIGILL on a Nehalem), so it is told the model: the test is of Tandem's kernels.
Q=(env OPENBLAS_CORETYPE="$CPU_MODEL" "$QEMU" -cpu "$CPU_MODEL")
start=$(date +%s)
case "$WHAT" in
  unit)
    # A subset that runs in about 10 s emulated on a 2-vCPU machine: the dispatch tests
    # themselves (bit equality of every level this model has with the baseline), and the
    # kernels, layers and optimizers at the chosen level against their references.
    FILTER='CpuDispatch.*:CpuKernels.*:TransformerKernels.*:Bf16Gemm.*:Bf16Autocast.*:LayerGradcheck.*'
    FILTER+=':RegressionLoss.*:BatchNorm.*:Loader.*:Optimizer.*:OptimizerRanges.*:GptReference.*'
    FILTER+='-Bf16Gemm.NativeAndFallbackMatchTheExactSumAndEachOther'  # 4 s natively: exact sums in long double
    out="$("${Q[@]}" "$BIN/tandem_unit_tests" --gtest_filter="$FILTER" --gtest_brief=1 2>&1)"
    rc=$?
    grep -E '^cpu kernels|^\[  (PASSED|FAILED|SKIPPED) ' <<<"$out"
    if [ "$rc" -ne 0 ]; then
      echo "FAIL: the unit tests exited $rc under qemu -cpu $CPU_MODEL:"; tail -20 <<<"$out"; FAILED=1
    elif ! grep -qF "cpu kernels: best $LEVEL, chosen $LEVEL, set $LEVEL" <<<"$out"; then
      echo "FAIL: qemu -cpu $CPU_MODEL did not choose the $LEVEL kernels"; FAILED=1
    fi ;;
  train)
    ARGS=(--data synthetic --synthetic-train 1024 --synthetic-test 256 --epochs 1 --batch-size 64 --hidden 64
          --lr 0.05 --no-progress --seed 7)
    expect 0 "CPU kernels $LEVEL" -- "${Q[@]}" "$BIN/tandem-train" "${ARGS[@]}" --summary-json "$TMP/q.json"
    expect 0 "summary ok" -- python3 "$(dirname "$0")/../e2e/check_summary.py" "$TMP/q.json" --cpu-kernels "$LEVEL" \
      --mode single --steps 16
    grep -E '"(cpu_kernels|samples_per_s|final_train_loss|param_checksum)"' "$TMP/q.json"
    # The same run natively at the same level (and OpenBLAS core: its kernels sum in
    # different orders) computes the same parameters, bit for bit.
    expect 0 "done:" -- env OPENBLAS_CORETYPE="$CPU_MODEL" TANDEM_CPU_KERNELS="$LEVEL" "$BIN/tandem-train" "${ARGS[@]}" \
      --summary-json "$TMP/n.json"
    expect 0 "summary ok" -- python3 "$(dirname "$0")/../e2e/check_summary.py" "$TMP/q.json" --same-checksum "$TMP/n.json"
    if [ "$LEVEL" != avx512 ]; then
      expect 1 "at most the '$LEVEL' kernels" -- env TANDEM_CPU_KERNELS=avx512 "${Q[@]}" "$BIN/tandem-train" "${ARGS[@]}"
    fi ;;
  *) echo "qemu_cpu_level.sh: unknown test '$WHAT' (unit or train)"; exit 2 ;;
esac
echo "qemu -cpu $CPU_MODEL ($WHAT): $(( $(date +%s) - start )) s"
finish
