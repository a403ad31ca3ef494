# shellcheck shell=bash
# The sanitizer trees, built by scripts/test --sanitize and scripts/fuzz: sourced, not run.
#   sanitizer_build address|thread   configures (clang, RelWithDebInfo, CPU only, unity
#                                    batches) and builds build-asan/ or build-tsan/, only the
#                                    programs the sanitizer subset runs; sets BUILD_DIR
# build-asan/ also holds the libFuzzer targets (-DTANDEM_FUZZ=ON, cmake/Fuzzing.cmake): the
# same ASan + UBSan objects serve the tests and the fuzzers, so CI compiles them once, and
# scripts/fuzz after scripts/test --sanitize address finds every target current.
# clang: it compiles this code under ASan + UBSan in 0.64 of g++'s time (the same targets
# from scratch on 2 cores: 5 min 40 s against 8 min 49 s, measured; under TSan both take
# about 3.5 min). A tree configured otherwise (another compiler, or build-asan/ without the
# fuzz targets) is started afresh.
sanitizer_build() {
  local kind="$1" targets extra=""
  # Only the programs the subsets run are built (a test whose program is missing fails as
  # not built, it is not skipped); the benchmarks and tandem-trace are left out.
  targets="tandem_unit_tests tandem_collectives_tests tandem_test_spawn tandem_collectives_worker ddp_worker
           batchnorm_worker launcher-test-worker store-intruder tandem_launcher_unit_tests tandemrun tandem-store
           tandem-train"
  case "$kind" in
    address)
      BUILD_DIR=build-asan
      targets="$targets tandem_api_tests zero_worker contrastive_worker tandem-ckpt ckpt_helper tandem_rounds_worker
               tandem_shared_buffers_worker tandem_fuzz"
      extra="-DTANDEM_FUZZ=ON"
      ;;
    thread) BUILD_DIR=build-tsan ;;
    *) echo "sanitizer_build: unknown sanitizer '$kind'" >&2; return 2 ;;
  esac
  if ! command -v clang++ >/dev/null; then
    echo "scripts: clang++ not found (scripts/setup-deps installs it; libFuzzer comes with it)" >&2
    return 1
  fi
  local cache="$BUILD_DIR/CMakeCache.txt"
  if [ -f "$cache" ] && { ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache" ||
                          { [ -n "$extra" ] && ! grep -q '^TANDEM_FUZZ:BOOL=ON' "$cache"; }; }; then
    rm -rf "$BUILD_DIR"
  fi
  CC=clang CXX=clang++ TANDEM_BUILD_DIR=$BUILD_DIR TANDEM_BUILD_TARGET="$(echo $targets)" \
    TANDEM_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_WITH_CUDA=OFF -DTANDEM_SANITIZE=$kind -DTANDEM_UNITY_BUILD=ON $extra" \
    scripts/build
}
