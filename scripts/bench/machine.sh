# shellcheck shell=bash
# The machine a benchmark ran on, as one line: sourced by every scripts/bench-* so that each
# table says where its figures come from, in the same words. bench_machine prints
#   machine: MODEL (CORES, MEMORY, KERNEL), SIMD FLAGS; OpenBLAS kernel: CORE (VARIABLES)
# The OpenBLAS kernel is the one OpenBLAS chooses under the environment the caller passes
# (the benchmark's own ENV prefix), not under this shell's: OPENBLAS_CORETYPE decides it.
# Bash; it reads /proc/cpuinfo, /proc/meminfo and lscpu (where present) and asks the
# OpenBLAS library through python3's ctypes. Always returns 0: a part it cannot read says
# "unknown".

# bench_machine PROGRAM [ENV-COMMAND...]: the line, with the OpenBLAS that PROGRAM links
# (libopenblas.so.0 where it links none), asked under ENV-COMMAND, e.g. "${ENV[@]}" =
# env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1.
bench_machine() {
  local program="$1"; shift
  local model flags simd=() f lib blas
  model="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  flags=" $(awk -F': *' '/^flags/ { print $2; exit }' /proc/cpuinfo) "
  # What decides OpenBLAS's kernel and Tandem's bf16 GEMM: AVX2 (Haswell), AVX-512
  # (SkylakeX), AVX512-BF16 (Cooperlake, the native bf16 GEMM), AMX (SapphireRapids).
  for f in avx2 avx512f avx512_bf16 avx512_fp16; do
    if [[ "$flags" == *" $f "* ]]; then simd+=("$f"); fi
  done
  for f in $flags; do
    if [[ "$f" == amx_* ]]; then simd+=("$f"); fi
  done
  if [ ${#simd[@]} -eq 0 ]; then simd=("no AVX2 or AVX-512"); fi
  lib="$(ldd "$program" 2>/dev/null | awk '/libopenblas/ && $3 ~ /^\// && !found { print $3; found = 1 }')" || true
  blas="$("$@" /usr/bin/python3 - "${lib:-libopenblas.so.0}" <<'PY' 2>/dev/null
import ctypes, os, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
except (OSError, AttributeError):
    core = f"none ({sys.argv[1]} not loadable)"
names = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
given = [f"{n}={os.environ[n]}" for n in names if n in os.environ]
unset = [n for n in names if n not in os.environ]
print(f"{core} ({', '.join(given + ([' and '.join(unset) + ' unset'] if unset else []))})")
PY
)" || blas="unknown"
  printf 'machine: %s (%s, %s, %s), %s; OpenBLAS kernel: %s\n' "${model:-$(uname -m)}" "$(bench_cores)" \
    "$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)" "$(uname -sr)" "${simd[*]}" \
    "${blas:-unknown}"
}

# The CPUs this process may use (nproc) and, where lscpu shows another layout (SMT, more
# sockets, CPUs outside this process's affinity), that layout: "2 cores", or
# "4 CPUs: 1 socket x 2 cores x 2 threads", or "2 of 16 CPUs: 1 socket x 8 cores x 2 threads".
bench_cores() {
  local n layout
  n="$(nproc)"
  layout="$(LC_ALL=C lscpu 2>/dev/null | awk -F': *' '
    /^CPU\(s\):/ { cpus = $2 } /^Socket\(s\):/ { s = $2 } /^Core\(s\) per socket:/ { c = $2 }
    /^Thread\(s\) per core:/ { t = $2 }
    END { if (cpus + 0 > 0 && s + 0 > 0 && c + 0 > 0 && t + 0 > 0) print cpus, s, c, t }')" || true
  if [ -z "$layout" ]; then echo "$n cores"; return 0; fi
  local cpus s c t
  read -r cpus s c t <<<"$layout"
  if [ "$cpus" = "$n" ] && [ "$s" = 1 ] && [ "$t" = 1 ] && [ "$c" = "$n" ]; then echo "$n cores"; return 0; fi
  local of="$n"
  if [ "$cpus" != "$n" ]; then of="$n of $cpus"; fi
  echo "$of CPUs: $s socket$([ "$s" = 1 ] || echo s) x $c core$([ "$c" = 1 ] || echo s) x $t thread$([ "$t" = 1 ] || echo s)"
}
