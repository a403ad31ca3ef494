# TANDEM_FUZZ=ON: libFuzzer targets of tests/fuzz, clang only, CUDA off. Every C and C++
# target is compiled with coverage for the fuzzer (fuzzer-no-link) and with ASan + UBSan, UB
# being fatal, so a bug in the code under test is a crash the fuzzer reports; the fuzz targets
# alone link libFuzzer (-fsanitize=fuzzer).
#   with TANDEM_SANITIZE=address   (scripts/test --sanitize address and scripts/fuzz, in
#                                  build-asan/): the ASan build brings the sanitizers, this
#                                  adds the coverage, so the tests' programs and the fuzz
#                                  targets come from one tree instead of two
#   alone                          the same flags on a tree of its own
# The CPU kernels (runtime/cpu/ and their per-level copies) carry no coverage
# (fuzz_coverage_ignore.txt): no fuzz target reaches them, and their loops are where the
# ASan tests spend their time.
# Without it, tests/fuzz/ still builds each target with a small replay main() so the normal
# suite runs the committed corpus and regression inputs (label fuzz-regression).
option(TANDEM_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only)" OFF)
if(NOT TANDEM_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "tandem: TANDEM_FUZZ needs clang (configure with CC=clang CXX=clang++)")
endif()
if(NOT TANDEM_WITH_CUDA STREQUAL "OFF")
  message(FATAL_ERROR "tandem: TANDEM_FUZZ needs -DTANDEM_WITH_CUDA=OFF")
endif()
set(tandem_fuzz_coverage -fsanitize=fuzzer-no-link
    -fsanitize-coverage-ignorelist=${CMAKE_CURRENT_LIST_DIR}/fuzz_coverage_ignore.txt)
if(TANDEM_SANITIZE STREQUAL "address")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${tandem_fuzz_coverage}>")
  message(STATUS "tandem: fuzz targets in the ASan build (libFuzzer coverage on every target but the CPU kernels)")
  return()
endif()
if(NOT "${TANDEM_SANITIZE}" STREQUAL "")
  message(FATAL_ERROR "tandem: TANDEM_FUZZ goes with TANDEM_SANITIZE=address or alone, not with '${TANDEM_SANITIZE}'")
endif()
set(tandem_fuzz_sanitize -fsanitize=address,undefined -fno-sanitize-recover=all)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${tandem_fuzz_coverage};${tandem_fuzz_sanitize};-fno-omit-frame-pointer;-O1;-gline-tables-only>")
add_link_options(${tandem_fuzz_sanitize})
message(STATUS "tandem: fuzz build (libFuzzer, ASan + UBSan)")
