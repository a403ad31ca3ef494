# Read by cpack for each generator (CPACK_PROJECT_CONFIG_FILE, cmake/Package.cmake): the
# .deb must never depend on a CUDA library, as the CUDA runtime, cuBLAS and NCCL are no
# Debian packages. A CUDA build links them, so it makes no .deb.
if(CPACK_GENERATOR STREQUAL "DEB" AND CPACK_TANDEM_CUDA)
  message(FATAL_ERROR "tandem: cpack -G DEB needs a CPU-only build (-DTANDEM_WITH_CUDA=OFF): this one links "
                      "the CUDA runtime, cuBLAS and NCCL, which no Debian package provides")
endif()
