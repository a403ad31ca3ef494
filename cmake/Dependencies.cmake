# Finds every dependency and says what it found. Each comes from a Debian package
# (scripts/setup-deps installs them); a missing required one stops configure with
# the package name to install.
find_package(Threads REQUIRED)

find_package(ZLIB REQUIRED)
message(STATUS "tandem: zlib ${ZLIB_VERSION_STRING}")

find_package(spdlog CONFIG REQUIRED)
message(STATUS "tandem: spdlog ${spdlog_VERSION}")
find_package(CLI11 CONFIG REQUIRED)
message(STATUS "tandem: CLI11 ${CLI11_VERSION}")
find_package(nlohmann_json CONFIG REQUIRED)
message(STATUS "tandem: nlohmann_json ${nlohmann_json_VERSION}")

# FP16 (header only): IEEE half <-> float conversions for the CPU kernels and the
# collectives' host reductions.
find_path(FP16_INCLUDE_DIR fp16.h)
if(NOT FP16_INCLUDE_DIR)
  message(FATAL_ERROR "tandem: fp16.h not found (install libfp16-dev)")
endif()
message(STATUS "tandem: FP16 (fp16.h in ${FP16_INCLUDE_DIR})")
add_library(tandem_fp16 INTERFACE)
target_include_directories(tandem_fp16 INTERFACE ${FP16_INCLUDE_DIR})

# OpenBLAS: the pthread variant, through its cblas interface, in the target's multiarch
# directories (x86_64-linux-gnu, or aarch64-linux-gnu in the cross build).
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread /usr/include/openblas NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "tandem: OpenBLAS not found (install libopenblas-dev)")
endif()
message(STATUS "tandem: OpenBLAS ${OPENBLAS_LIBRARY} (cblas.h in ${OPENBLAS_INCLUDE_DIR})")
add_library(tandem_openblas INTERFACE)
target_include_directories(tandem_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(tandem_openblas INTERFACE ${OPENBLAS_LIBRARY})

# CUDA (AUTO: on when nvcc is found).
set(TANDEM_CUDA OFF)
if(NOT TANDEM_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${TANDEM_CUDA_ARCHS})
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    set(TANDEM_CUDA ON)
    message(STATUS "tandem: CUDA ${CUDAToolkit_VERSION} (archs ${TANDEM_CUDA_ARCHS}), NCCL ${NCCL_LIBRARY}")
  elseif(TANDEM_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "tandem: TANDEM_WITH_CUDA=ON but nvcc was not found")
  else()
    message(STATUS "tandem: CUDA off (nvcc not found)")
  endif()
else()
  message(STATUS "tandem: CUDA off (TANDEM_WITH_CUDA=OFF)")
endif()

set(TANDEM_MPI OFF)
if(TANDEM_WITH_MPI)
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TANDEM_MPI ON)
    message(STATUS "tandem: MPI ${MPI_CXX_LIBRARY_VERSION_STRING}")
  else()
    message(FATAL_ERROR "tandem: MPI not found (install libopenmpi-dev openmpi-bin, or -DTANDEM_WITH_MPI=OFF)")
  endif()
else()
  message(STATUS "tandem: MPI off (TANDEM_WITH_MPI=OFF)")
endif()

set(TANDEM_GLOO OFF)
if(TANDEM_WITH_GLOO)
  find_package(Gloo CONFIG PATHS /usr/share/cmake/Gloo)
  if(Gloo_FOUND)
    set(TANDEM_GLOO ON)
    message(STATUS "tandem: Gloo ${GLOO_VERSION}")
  else()
    message(FATAL_ERROR "tandem: Gloo not found (install libgloo-dev, or -DTANDEM_WITH_GLOO=OFF)")
  endif()
else()
  message(STATUS "tandem: Gloo off (TANDEM_WITH_GLOO=OFF)")
endif()
