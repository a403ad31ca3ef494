# Cross build for 64-bit Arm Linux with Debian's cross compiler and the arm64 multiarch
# libraries (scripts/setup-deps --arm64 installs both; scripts/test --arm64 uses this file):
#   cmake -S . -B build-arm64 --toolchain cmake/toolchains/aarch64-linux-gnu.cmake
# Invariant: every library and arch-specific header comes from the arm64 packages
# (/usr/lib/aarch64-linux-gnu, /usr/include/aarch64-linux-gnu), never from the amd64 ones,
# and every test program CTest starts runs under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# find_package and find_library search <prefix>/lib/aarch64-linux-gnu (and the config
# packages under it, e.g. lib/aarch64-linux-gnu/cmake/spdlog) instead of the amd64 ones.
# CMake reads this from the compiler too; set here, it holds before the compiler is checked.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Debian's multiarch layout keeps both architectures under /usr, so there is no sysroot to
# confine the search to; the amd64 directories are ruled out by name instead.
set(CMAKE_IGNORE_PATH
  /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/include/x86_64-linux-gnu
  /usr/lib/x86_64-linux-gnu/cmake /usr/lib/x86_64-linux-gnu/pkgconfig)
# pkg-config (FindOpenSSL and others may ask it) reads the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# CTest, add_test(NAME ... COMMAND <target>) and gtest_discover_tests start the test
# programs through this. -L / : the multiarch libc6:arm64 puts the loader
# (/lib/ld-linux-aarch64.so.1) and every library the programs link where the arm64
# loader looks. -L /usr/aarch64-linux-gnu (the cross compiler's own libc) is not usable
# as the prefix: its loader is another glibc build than the multiarch libc.so.6 the
# programs then load, and a hello-world linked with OpenBLAS hung under it.
find_program(TANDEM_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${TANDEM_QEMU_AARCH64} -L /)
