#!/usr/bin/env bash
# install.examples: the installed package as a user meets it. Installs BUILD_DIR into a fresh
# prefix, copies each of examples/ out of the repository and builds it against that prefix
# alone, fails if any compile or link command names the source or build tree (such a leak
# works here and breaks on every other machine) or if an installed header includes another
# without tandem/ (a decoy of each, earlier on the examples' include path, must not be
# reached), then runs the programs:
#   allreduce     tandemrun -np 2 (and mpirun -np 2): the exact sums on both ranks
#   custom_model  tandemrun ddp to the end (test_accuracy >= 0.85); short dp, single and
#                 mpirun ddp runs (exit 0); a bad flag (exit 2)
#   contrastive   single, dp 2, tandemrun ddp 2 and 3, mpirun ddp 2: InfoNCE over the global
#                 batch; retrieval >= 0.95 (from about 0.1) and the held-out loss within 1e-4
#                 relative of single's in every mode; a bad flag (exit 2)
#   regression    single, dp 2, tandemrun ddp 2 and 3, mpirun ddp 2: each recovers the known
#                 coefficients within 1e-3 and equals single within 1e-6; a bad flag (exit 2)
#   tests/install/examples.sh BUILD_DIR SOURCE_DIR
# TANDEM_EXAMPLES_DIR (default SOURCE_DIR/examples) is where the examples are copied from:
# for checking this check, with a planted leak in a copy.
set -uo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 BUILD_DIR SOURCE_DIR"; exit 2; fi
BUILD_DIR="$(cd "$1" && pwd -P)" || exit 2
SOURCE_DIR="$(cd "$2" && pwd -P)" || exit 2
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tandem-install.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
PREFIX="$TMP/prefix"
PASSED=0
FAILED=()
RUN_TIMEOUT=240  # seconds, per program run: a hung rank fails the check instead of ctest's timeout

pass() { echo "ok: $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $1"; FAILED+=("$1"); }
# finish: the summary line, and the exit code.
finish() {
  echo "install.examples: $PASSED passed, ${#FAILED[@]} failed"
  if [ ${#FAILED[@]} -ne 0 ]; then
    printf '  failed: %s\n' "${FAILED[@]}"
    exit 1
  fi
  exit 0
}
# cached NAME: a variable of BUILD_DIR's CMakeCache ("" when absent).
cached() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt" | head -1; }
# run_ok NAME LOG -- CMD...: runs CMD (bounded) into LOG; passes NAME when it exits 0.
run_ok() {
  local name="$1" log="$2"; shift 3
  timeout "$RUN_TIMEOUT" "$@" >"$log" 2>&1
  local rc=$?
  if [ "$rc" -eq 0 ]; then pass "$name"; return 0; fi
  fail "$name (exit $rc: $*)"; tail -15 "$log" | sed 's/^/    /'
  return 1
}

case "$TMP/" in "$SOURCE_DIR/"* | "$BUILD_DIR/"*)
  echo "FAIL: the temporary directory $TMP is inside the source or build tree; set TMPDIR elsewhere"; exit 1 ;;
esac
[ -f "$BUILD_DIR/CMakeCache.txt" ] || { echo "FAIL: $BUILD_DIR is not a CMake build directory"; exit 1; }
EXAMPLES="${TANDEM_EXAMPLES_DIR:-$SOURCE_DIR/examples}"
[ -d "$EXAMPLES" ] || { echo "FAIL: $EXAMPLES does not exist"; exit 1; }

# --- install --------------------------------------------------------------------------
if ! run_ok "install into a fresh prefix" "$TMP/install.log" -- cmake --install "$BUILD_DIR" --prefix "$PREFIX"; then
  finish
fi
for f in bin/tandemrun lib/cmake/Tandem/TandemConfig.cmake include/tandem/tandem.h include/tandem/collectives.h \
         include/tandem/version.h; do
  [ -e "$PREFIX/$f" ] || fail "the prefix lacks $f"
done

# --- the installed headers name each other tandem/... ---------------------------------------
# A user's project with a runtime/ (or core/, collectives/, zoo/) folder of its own earlier on its
# include path must not shadow Tandem's headers (cmake/Package.cmake): every include of a
# Tandem header in the installed tree is "tandem/...", and the exported targets put
# PREFIX/include alone on the path. Checked by a grep of the installed tree and of the
# exported targets, and by building every example below with a decoy of each installed
# header (an #error) at its path without tandem/, in a directory searched before the prefix.
mapfile -t installed_headers < <(find "$PREFIX/include" -type f -name '*.h')
if grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*("|<(core|runtime|collectives|zoo|train|launcher)/)' \
     "${installed_headers[@]}" | grep -vE '#[[:space:]]*include[[:space:]]*"tandem/' >"$TMP/includes.bad"; then
  fail "an installed header includes a Tandem header without tandem/ (a user's own folder of that name would shadow it)"
  head -5 "$TMP/includes.bad" | sed "s|$PREFIX/||; s/^/    /"
else
  pass "every installed header includes the others as tandem/... (${#installed_headers[@]} headers)"
fi
if grep -q 'INTERFACE_INCLUDE_DIRECTORIES.*/include/tandem' "$PREFIX/lib/cmake/Tandem/TandemTargets.cmake"; then
  fail "the exported targets put PREFIX/include/tandem on the include path; PREFIX/include alone belongs there"
  grep 'INTERFACE_INCLUDE_DIRECTORIES' "$PREFIX/lib/cmake/Tandem/TandemTargets.cmake" | sed 's/^/    /'
else
  pass "the exported targets put PREFIX/include alone on the include path"
fi
DECOY="$TMP/decoy-include"
while read -r rel; do
  mkdir -p "$DECOY/$(dirname "$rel")"
  printf '#error "decoy header reached: %s (an installed Tandem header includes it without tandem/)"\n' \
    "$rel" >"$DECOY/$rel"
done < <(cd "$PREFIX/include/tandem" && find . -name '*.h' | sed 's|^\./||')

# --- configure and build each example out of tree ----------------------------------------
# The same compiler as the build (a user's would be ABI-compatible with it). With CUDA the
# package's config runs find_dependency(CUDAToolkit): point it at the build's toolkit.
# -I puts the decoys before the prefix, as a user's target_include_directories(app PRIVATE dir)
# would: imported targets' directories come as -isystem, searched after every -I.
CONFIGURE=(-DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
           -DCMAKE_CXX_FLAGS="-I$DECOY")
CXX_COMPILER="$(cached CMAKE_CXX_COMPILER)"
[ -n "$CXX_COMPILER" ] && CONFIGURE+=(-DCMAKE_CXX_COMPILER="$CXX_COMPILER")
NVCC="$(cached CMAKE_CUDA_COMPILER)"
if [ -n "$NVCC" ] && [ "${NVCC%NOTFOUND}" = "$NVCC" ]; then
  CONFIGURE+=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$(readlink -f "$NVCC")")")")
fi

# leaks FILE...: lines naming the source or build tree (as given or resolved), a path
# component exactly (so /src/tandem does not match /src/tandem2).
LEAK_PATHS=("$SOURCE_DIR" "$BUILD_DIR")
for given in "${1%/}" "${2%/}"; do  # as given too, when absolute and not already resolved
  case "$given" in /*) [ "$given" != "$SOURCE_DIR" ] && [ "$given" != "$BUILD_DIR" ] && LEAK_PATHS+=("$given") ;; esac
done
leaks() {
  local p pattern=""
  for p in "${LEAK_PATHS[@]}"; do
    # shellcheck disable=SC2016  # a sed expression, not a shell one
    p="$(printf '%s' "$p" | sed 's/[][\.*^$()+?{}|]/\\&/g')"
    pattern="${pattern:+$pattern|}${p}([/\"' ;:,]|\$)"
  done
  grep -HnE "$pattern" "$@" 2>/dev/null
}

# build_example NAME LIBRARY: copies examples/NAME to $TMP/NAME, builds it in $TMP/build-NAME
# and checks its commands; LIBRARY is the archive its link line must take from the prefix.
build_example() {
  local name="$1" library="$2" src="$TMP/$1" bld="$TMP/build-$1"
  cp -r "$EXAMPLES/$name" "$src"
  rm -rf "$src/build"*  # a build folder someone left in the example is not part of it
  run_ok "$name: configure against the prefix" "$TMP/$name.configure.log" -- \
    cmake -S "$src" -B "$bld" "${CONFIGURE[@]}" || return 1
  if ! run_ok "$name: build" "$TMP/$name.build.log" -- cmake --build "$bld" --verbose -j 2; then
    echo "    the first errors:"; grep -m 3 -F 'error' "$TMP/$name.build.log" | cut -c1-300 | sed 's/^/    /'
    return 1
  fi
  local commands=("$bld/compile_commands.json" "$TMP/$name.build.log")
  mapfile -t -O ${#commands[@]} commands < <(find "$bld/CMakeFiles" -name link.txt)
  if [ ! -s "$bld/compile_commands.json" ]; then
    fail "$name: no compile_commands.json to check"
  elif ! grep -qF "$PREFIX/include" "$bld/compile_commands.json"; then
    fail "$name: the compile commands do not take headers from $PREFIX/include"
  elif ! grep -qF -- "-I$DECOY" "$bld/compile_commands.json"; then
    fail "$name: the compile commands do not put the decoy headers ($DECOY) on the include path"
  elif ! grep -qF "$PREFIX/lib/$library" "$TMP/$name.build.log"; then
    fail "$name: the link command does not take $PREFIX/lib/$library"
  elif leaks "${commands[@]}" >"$TMP/$name.leaks"; then
    fail "$name: a compile or link command names the source or build tree"
    head -5 "$TMP/$name.leaks" | cut -c1-400 | sed 's/^/    /'
  else
    pass "$name: no compile or link command names $SOURCE_DIR or $BUILD_DIR (${#commands[@]} files checked)"
  fi
  [ -x "$bld/$name" ] || { fail "$name: $bld/$name was not built"; return 1; }
}

# The config and the headers are what a user's build reads: they must not name the trees either.
mapfile -t installed < <(find "$PREFIX/lib/cmake" "$PREFIX/include" -type f)
if leaks "${installed[@]}" >"$TMP/prefix.leaks"; then
  fail "the installed CMake files or headers name the source or build tree"
  head -5 "$TMP/prefix.leaks" | cut -c1-400 | sed 's/^/    /'
else
  pass "the installed CMake files and headers name neither tree"
fi

TANDEMRUN=("$PREFIX/bin/tandemrun" --nproc-per-node 2 --master-port 0 --)
MPIRUN=()
if grep -q "set(Tandem_WITH_MPI ON)" "$PREFIX/lib/cmake/Tandem/TandemConfig.cmake"; then
  mpiexec="$(cached MPIEXEC_EXECUTABLE)"
  [ -x "$mpiexec" ] || mpiexec="$(command -v mpirun)"
  MPIRUN=("$mpiexec" --oversubscribe -np 2)
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
else
  echo "note: the package is built without MPI: the mpirun runs are left out"
fi

# --- allreduce ----------------------------------------------------------------------------
# expect_lines NAME LOG LINE...: LOG holds every LINE.
expect_lines() {
  local name="$1" log="$2" line missing=0; shift 2
  for line in "$@"; do grep -qF -- "$line" "$log" || { missing=1; echo "    missing: $line"; }; done
  if [ "$missing" -eq 0 ]; then pass "$name"; else fail "$name"; tail -8 "$log" | sed 's/^/    /'; fi
}
if build_example allreduce libtandem_collectives.a; then
  cd "$TMP/build-allreduce" || exit 1
  run_ok "allreduce: tandemrun -np 2 exits 0" "$TMP/ar.tandemrun.log" -- "${TANDEMRUN[@]}" ./allreduce &&
    expect_lines "allreduce: tandemrun: both ranks have the exact sums" "$TMP/ar.tandemrun.log" \
      "rank 0 of 2: allreduce of 65536 floats ok, x[0] = 3, x[65535] = 196608" \
      "rank 1 of 2: allreduce of 65536 floats ok, x[0] = 3, x[65535] = 196608"
  if [ ${#MPIRUN[@]} -gt 0 ]; then
    run_ok "allreduce: mpirun -np 2 exits 0" "$TMP/ar.mpirun.log" -- "${MPIRUN[@]}" ./allreduce 1000 &&
      expect_lines "allreduce: mpirun: both ranks have the exact sums" "$TMP/ar.mpirun.log" \
        "rank 0 of 2: allreduce of 1000 floats ok, x[0] = 3, x[999] = 3000" \
        "rank 1 of 2: allreduce of 1000 floats ok, x[0] = 3, x[999] = 3000"
  fi
fi

# --- custom_model -------------------------------------------------------------------------
if build_example custom_model libtandem.a; then
  cd "$TMP/build-custom_model" || exit 1
  start=$SECONDS
  if run_ok "custom_model: tandemrun ddp -np 2 exits 0" "$TMP/cm.ddp.log" -- "${TANDEMRUN[@]}" ./custom_model --mode ddp; then
    acc="$(sed -n 's/.*custom_model: mode ddp, world 2, test_accuracy \([0-9.]*\)$/\1/p' "$TMP/cm.ddp.log" | tail -1)"
    if [ -z "$acc" ]; then
      fail "custom_model: ddp printed no 'custom_model: mode ddp, world 2, test_accuracy' line"
      tail -8 "$TMP/cm.ddp.log" | sed 's/^/    /'
    elif awk -v a="$acc" 'BEGIN { exit !(a >= 0.85) }'; then
      pass "custom_model: ddp test_accuracy $acc >= 0.85 ($((SECONDS - start)) s)"
    else
      fail "custom_model: ddp test_accuracy $acc < 0.85"
    fi
  fi
  run_ok "custom_model: dp --devices 2, 100 steps" "$TMP/cm.dp.log" -- \
    ./custom_model --mode dp --devices 2 --max-steps 100 &&
    expect_lines "custom_model: dp prints its result" "$TMP/cm.dp.log" "custom_model: mode dp, world 1, test_accuracy"
  run_ok "custom_model: single, 50 steps" "$TMP/cm.single.log" -- ./custom_model --max-steps 50 &&
    expect_lines "custom_model: single prints its result" "$TMP/cm.single.log" "custom_model: mode single, world 1,"
  if [ ${#MPIRUN[@]} -gt 0 ]; then
    run_ok "custom_model: mpirun ddp -np 2, 60 steps" "$TMP/cm.mpirun.log" -- \
      "${MPIRUN[@]}" ./custom_model --mode ddp --max-steps 60 &&
      expect_lines "custom_model: mpirun prints its result" "$TMP/cm.mpirun.log" \
        "custom_model: mode ddp, world 2, test_accuracy"
  fi
  ./custom_model --mode nonsense >"$TMP/cm.usage.log" 2>&1
  rc=$?
  if [ "$rc" -eq 2 ] && grep -qF "unknown mode 'nonsense'" "$TMP/cm.usage.log"; then
    pass "custom_model: a bad flag exits 2 naming it"
  else
    fail "custom_model: --mode nonsense exited $rc"; sed 's/^/    /' "$TMP/cm.usage.log" | head -3
  fi
fi

# --- regression ---------------------------------------------------------------------------
# Every mode recovers the known coefficients within 1e-3, and every mode's coefficients are
# within 1e-6 relative of single's (the same global batches; only float summation order differs).
if build_example regression libtandem.a; then
  cd "$TMP/build-regression" || exit 1
  reg_runs=("single:./regression" "dp:./regression --mode dp --devices 2"
            "tandemrun-2:${TANDEMRUN[*]} ./regression --mode ddp"
            "tandemrun-3:$PREFIX/bin/tandemrun --nproc-per-node 3 --master-port 0 -- ./regression --mode ddp")
  [ ${#MPIRUN[@]} -gt 0 ] && reg_runs+=("mpirun-2:${MPIRUN[*]} ./regression --mode ddp")
  for run in "${reg_runs[@]}"; do
    name=${run%%:*}
    # shellcheck disable=SC2086  # the command line is meant to split
    run_ok "regression: $name exits 0" "$TMP/reg.$name.log" -- ${run#*:} || continue
    err="$(sed -n 's/.*regression: mode [a-z]*, world [0-9]*, max coefficient error \([0-9.e-]*\)$/\1/p' "$TMP/reg.$name.log")"
    sed -n 's/^\(\[0:0\] \)\{0,1\}coefficients //p' "$TMP/reg.$name.log" >"$TMP/reg.$name.coef"
    if [ -n "$err" ] && awk -v e="$err" 'BEGIN { exit !(e < 1e-3) }'; then
      pass "regression: $name recovers every coefficient within 1e-3 (max error $err)"
    else
      fail "regression: $name max coefficient error '${err}' (want < 1e-3)"; tail -4 "$TMP/reg.$name.log" | sed 's/^/    /'
    fi
    [ "$name" = single ] && continue
    if python3 - "$TMP/reg.single.coef" "$TMP/reg.$name.coef" <<'PY'
import sys
a = [float(v) for v in open(sys.argv[1]).read().split()]
b = [float(v) for v in open(sys.argv[2]).read().split()]
worst = max(abs(x - y) / max(abs(x), 1e-6) for x, y in zip(a, b)) if a and len(a) == len(b) else 1.0
print(f"    max relative difference from single: {worst:.3g}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
    then
      same="$(grep -h param_checksum "$TMP/reg.single.log" "$TMP/reg.$name.log" | sed 's/.*param_checksum //' | sort -u | wc -l)"
      pass "regression: $name's coefficients are within 1e-6 relative of single's ($([ "$same" -eq 1 ] && echo bit-identical || echo "not bit-identical"))"
    else
      fail "regression: $name's coefficients differ from single's by more than 1e-6 relative"
    fi
  done
  ./regression --epochs -3 >"$TMP/reg.usage.log" 2>&1
  rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "--epochs must be a number" "$TMP/reg.usage.log"; then
    pass "regression: a bad flag exits 2 naming it"
  else
    fail "regression: --epochs -3 exited $rc"; sed 's/^/    /' "$TMP/reg.usage.log" | head -3
  fi
fi

# --- contrastive --------------------------------------------------------------------------
if build_example contrastive libtandem.a; then
  cd "$TMP/build-contrastive" || exit 1
  con_runs=("single:./contrastive" "dp:./contrastive --mode dp --devices 2"
            "tandemrun-2:${TANDEMRUN[*]} ./contrastive --mode ddp"
            "tandemrun-3:$PREFIX/bin/tandemrun --nproc-per-node 3 --master-port 0 -- ./contrastive --mode ddp")
  [ ${#MPIRUN[@]} -gt 0 ] && con_runs+=("mpirun-2:${MPIRUN[*]} ./contrastive --mode ddp")
  single_loss=""
  for run in "${con_runs[@]}"; do
    name=${run%%:*}
    # shellcheck disable=SC2086  # the command line is meant to split
    run_ok "contrastive: $name exits 0" "$TMP/con.$name.log" -- ${run#*:} || continue
    retrieval="$(sed -n 's/.*contrastive: mode [a-z]*, world [0-9]*, retrieval \([0-9.]*\) .*/\1/p' "$TMP/con.$name.log")"
    loss="$(sed -n 's/^\(\[0:0\] \)\{0,1\}test_loss //p' "$TMP/con.$name.log")"
    [ "$name" = single ] && single_loss=$loss
    if [ -n "$retrieval" ] && awk -v r="$retrieval" 'BEGIN { exit !(r >= 0.95) }'; then
      pass "contrastive: $name retrieval $retrieval >= 0.95"
    else
      fail "contrastive: $name retrieval '$retrieval' (want >= 0.95)"; tail -4 "$TMP/con.$name.log" | sed 's/^/    /'
    fi
    [ "$name" = single ] && continue
    if [ -n "$loss" ] && [ -n "$single_loss" ] &&
       awk -v a="$loss" -v b="$single_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'; then
      pass "contrastive: $name held-out loss $loss within 1e-4 relative of single's $single_loss"
    else
      fail "contrastive: $name held-out loss '$loss' against single's '$single_loss' (want within 1e-4 relative)"
    fi
  done
  ./contrastive --mode dp --devices 0 >"$TMP/con.usage.log" 2>&1
  rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "--devices must be a number" "$TMP/con.usage.log"; then
    pass "contrastive: a bad flag exits 2 naming it"
  else
    fail "contrastive: --devices 0 exited $rc"; sed 's/^/    /' "$TMP/con.usage.log" | head -3
  fi
fi

finish
