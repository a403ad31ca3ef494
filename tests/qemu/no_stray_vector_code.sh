# The invariant of runtime/cpu/cpu_isa_region.h, checked on the linked program: AVX
# instructions (VEX or EVEX encoded, ymm or zmm registers) appear only in the functions
# meant to hold them: the avx2 and avx512 kernel copies, the AVX512-BF16 GEMM and the
# loader's AVX2 loop. Anything else would run on a CPU without AVX and die with SIGILL
# there (e.g. std:: code the linker kept from an AVX copy). Native, so it runs in every CI;
# the qemu tests beside it prove the same at run time. Skipped (77) without objdump.
#   no_stray_vector_code.sh PROGRAM
PROGRAM="$1"
command -v objdump >/dev/null || { echo "SKIP: objdump not found (binutils)"; exit 77; }
stray="$(objdump -d --no-show-raw-insn -C "$PROGRAM" | awk '
  /^[0-9a-f]+ <.*>:$/ { name = $0; sub(/^[0-9a-f]+ </, "", name); sub(/>:$/, "", name); next }
  /%[yz]mm|\tv[a-z]/ { if (!(name in seen)) { seen[name] = 1; print name } }' |
  # A function template's demangled name starts with its return type ("void
  # tandem::cpu::avx2::...maxpool_plane<2>(...)", as clang emits them out of line).
  grep -v -E -e '^([^(]*[ *&])?tandem::cpu::(avx2|avx512|detail)::' -e 'normalise_pixels_avx2')"
if [ -n "$stray" ]; then
  echo "FAIL: AVX instructions outside the kernel copies in $PROGRAM:"; head -20 <<<"$stray"; exit 1
fi
echo "ok: AVX instructions only in the kernel copies of $PROGRAM"
