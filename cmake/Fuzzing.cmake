# TANDEM_FUZZ=ON (scripts/fuzz, in build-fuzz/): libFuzzer targets (tests/fuzz/). Needs clang
# and CUDA off. Every C and C++ target is compiled with coverage for the fuzzer
# (fuzzer-no-link) and with ASan + UBSan, UB being fatal, so a bug in the code under test
# is a crash the fuzzer reports; the fuzz targets alone link libFuzzer (-fsanitize=fuzzer).
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
if(NOT "${TANDEM_SANITIZE}" STREQUAL "")
  message(FATAL_ERROR "tandem: TANDEM_FUZZ brings its own sanitizers; leave TANDEM_SANITIZE empty")
endif()
set(tandem_fuzz_sanitize -fsanitize=address,undefined -fno-sanitize-recover=all)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link;${tandem_fuzz_sanitize};-fno-omit-frame-pointer;-O1;-gline-tables-only>")
add_link_options(${tandem_fuzz_sanitize})
message(STATUS "tandem: fuzz build (libFuzzer, ASan + UBSan)")
