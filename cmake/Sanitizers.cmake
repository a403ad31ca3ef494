# TANDEM_SANITIZE=address|thread: every C and C++ target (libraries, programs, tests) is
# compiled and linked with AddressSanitizer + UndefinedBehaviorSanitizer, or with
# ThreadSanitizer. CPU only: nvcc does not take these flags, so CUDA must be off.
# scripts/test --sanitize builds these into build-asan/ and build-tsan/ (docs/reference.md).
set(TANDEM_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan + UBSan), thread (TSan), or empty")
set_property(CACHE TANDEM_SANITIZE PROPERTY STRINGS "" address thread)

if(TANDEM_SANITIZE STREQUAL "")
  return()
endif()
if(TANDEM_SANITIZE STREQUAL "address")
  set(tandem_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
elseif(TANDEM_SANITIZE STREQUAL "thread")
  set(tandem_sanitize_flags -fsanitize=thread)
else()
  message(FATAL_ERROR "tandem: TANDEM_SANITIZE must be address, thread or empty (got '${TANDEM_SANITIZE}')")
endif()
if(NOT TANDEM_WITH_CUDA STREQUAL "OFF")
  message(FATAL_ERROR "tandem: TANDEM_SANITIZE needs -DTANDEM_WITH_CUDA=OFF (nvcc takes no sanitizer flags)")
endif()
# -O1 after the build type's flags: a bearable speed. -g1 (line tables, no variables) after
# its -g: the reports' stacks still name file and line, and a file compiles in 0.7 of the
# time of -g (tools/ckpt/ckpt_main.cpp under ASan with g++: 26.5 s against 38.1 s).
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${tandem_sanitize_flags};-fno-omit-frame-pointer;-O1;-g1>")
add_link_options(${tandem_sanitize_flags})
message(STATUS "tandem: sanitizer build (${TANDEM_SANITIZE}: ${tandem_sanitize_flags})")
