# cmake --install BUILD --prefix P lays out:
#   P/bin/                       tandem-train, tandemrun, tandem-ckpt, tandem-trace, tandem-plan, tandem-bench-collectives
#   P/lib/                       libtandem.a (Tandem::tandem), libtandem_collectives.a (Tandem::collectives),
#                                libtandem_core.a (Tandem::core, which both link)
#   P/include/tandem/            tandem.h, collectives.h, version.h: what users include
#   P/include/tandem/<folder>/   the headers those include, and nothing else
#                                (P/include alone is on a user's include path)
#   P/lib/cmake/Tandem/          TandemConfig.cmake, its version file and the targets
#   P/share/tandem/data/         tinyshakespeare.txt (--data shakespeare of an installed tandem-train)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The public headers: the two umbrellas, and every header they reach (listed, so an
# internal header is never installed by accident; tests/install builds the examples
# against the installed tree alone, which fails if one is missing).
set(TANDEM_PUBLIC_HEADERS
  core/dtype.h core/buffer.h
  collectives/init.h collectives/process_group.h collectives/health.h collectives/flight_recorder.h
  collectives/fault_injection.h collectives/store.h collectives/types.h collectives/work.h
  runtime/tensor.h runtime/precision.h runtime/module.h runtime/model.h runtime/freeze.h runtime/kernels.h runtime/trace.h
  runtime/thread_pool.h runtime/cross_replica.h runtime/phase_times.h
  runtime/layers/activation.h runtime/layers/attention.h runtime/layers/conv2d.h runtime/layers/dropout.h
  runtime/layers/embedding.h runtime/layers/flatten.h runtime/layers/layer_util.h runtime/layers/layernorm.h
  runtime/layers/linear.h runtime/layers/loss.h runtime/layers/metric.h runtime/layers/regression_loss.h runtime/layers/info_nce.h
  runtime/layers/maxpool2d.h runtime/layers/batchnorm.h runtime/layers/activation_checkpoint.h
  runtime/layers/global_avg_pool.h
  runtime/layers/tied_linear.h
  runtime/layers/transformer_block.h
  runtime/optim/optimizer.h
  runtime/data/dataset.h runtime/data/loader.h runtime/data/sampler.h runtime/data/text.h
  runtime/checkpoint/checkpoint.h runtime/checkpoint/checkpoint_meta.h runtime/checkpoint/file_io.h
  runtime/checkpoint/safetensors.h
  runtime/strategy/strategy.h runtime/strategy/single.h runtime/strategy/data_parallel.h runtime/strategy/ddp.h
  runtime/strategy/reducer.h runtime/strategy/comm_hook.h runtime/strategy/parallel.h runtime/layers/gather.h
  runtime/strategy/replica_sync.h runtime/strategy/zero.h runtime/strategy/powersgd.h runtime/plan/cost_model.h
  zoo/zoo.h zoo/gpt.h zoo/resnet.h zoo/generate.h runtime/strategy/summary.h)

# Every public header includes the others as "tandem/runtime/tensor.h" (tandem.h and
# collectives.h too), as a user's code does, and the exported targets put P/include alone on
# the include path: a user's own runtime/, collectives/ or zoo/ folder earlier on that path
# cannot shadow Tandem's headers (tests/install/examples.sh builds the examples with a decoy
# of each installed header there). The installed headers are the source files as they are:
# in the build tree, BUILD/include/tandem/<header> is a symbolic link to each public header,
# made below at configure time, so "tandem/..." resolves before install to exactly the set
# that is installed. What is compiled and tested here is what users get, and a public header
# that includes one outside the set fails to compile here already. (Rewriting the includes
# while installing would ship files nothing here compiled; moving the public headers into a
# real include/tandem/ tree would move half the runtime.) Internal headers and sources keep
# including "runtime/tensor.h" from the source root; both paths reach the same file, once
# (#pragma once). A public header that includes a Tandem header without tandem/ stops
# configure here, and the install test greps the installed tree for one.
set(_tandem_header_links ${CMAKE_BINARY_DIR}/include/tandem)
foreach(top core runtime collectives zoo models)  # links of headers no longer public go too
  file(REMOVE_RECURSE ${_tandem_header_links}/${top})
endforeach()
foreach(h ${TANDEM_PUBLIC_HEADERS} include/tandem/tandem.h include/tandem/collectives.h)
  file(STRINGS ${PROJECT_SOURCE_DIR}/${h} _tandem_includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS _tandem_includes)
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"tandem/")
      message(FATAL_ERROR "tandem: the public header ${h} has '${line}': public headers include Tandem's "
                          "headers as \"tandem/<folder>/<file>.h\" (cmake/Package.cmake says why)")
    endif()
  endforeach()
endforeach()
foreach(h ${TANDEM_PUBLIC_HEADERS})
  get_filename_component(dir ${h} DIRECTORY)
  file(MAKE_DIRECTORY ${_tandem_header_links}/${dir})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${h} ${_tandem_header_links}/${h} SYMBOLIC)
  install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/tandem/tandem.h ${PROJECT_SOURCE_DIR}/include/tandem/collectives.h
              ${CMAKE_BINARY_DIR}/include/tandem/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem)

# tandem_fp16 and tandem_openblas are the build's handles on two system libraries; they go
# into the export only as link dependencies of the static libraries.
install(TARGETS tandem_runtime tandem_collectives tandem_core tandem_fp16 tandem_openblas EXPORT TandemTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tandem-train tandemrun tandem-store tandem-ckpt tandem-trace tandem-plan tandem-bench-collectives
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/data/tinyshakespeare.txt DESTINATION ${CMAKE_INSTALL_DATADIR}/tandem/data)

install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TandemConfig.cmake.in
  ${CMAKE_BINARY_DIR}/TandemConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TandemConfig.cmake ${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)

# cpack -G DEB: tandem_<version>_<arch>.deb, the install above under /usr. Made from a
# CPU-only tree configured with -DCMAKE_INSTALL_PREFIX=/usr (the libraries then land in
# Debian's lib/<triplet>); scripts/check-deb makes one and installs it with apt into a fresh
# chroot. It is made for the Debian release it is built on: the static libraries are bound to
# that release's spdlog, Open MPI and Gloo.
#   Depends     what find_package(Tandem) and a link of Tandem::tandem need: the -dev package
#               of each find_dependency() of TandemConfig.cmake.in and each exported link
#               dependency (OpenBLAS), for the backends this build has; and, through
#               dpkg-shlibdeps, the shared libraries the programs load.
#   Recommends  cmake and g++: the programs run without them, a user's build needs them.
#   Suggests    dataset-fashion-mnist, the data of tandem-train's default and of examples/.
# Never a CUDA library: cudart, cuBLAS and NCCL are no Debian packages, so a CUDA build is
# refused at cpack time (cmake/CPackProject.cmake).
set(CPACK_PACKAGE_NAME tandem)
set(CPACK_PACKAGE_VENDOR "Tandem")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "data-parallel training runtime for C++ (library, headers, programs)")
set(CPACK_PACKAGE_DESCRIPTION "Tandem trains a model in one process, one process driving several devices,
or one process per device with the gradient all-reduce overlapped with
backward (DDP), over Open MPI, Gloo or shared memory. This package has the
static libraries, headers and CMake package (find_package(Tandem),
Tandem::tandem, Tandem::collectives) for programs of your own, and the
programs tandem-train, tandemrun, tandem-ckpt, tandem-trace, tandem-plan and
tandem-bench-collectives. CPU only.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "Tandem Dev <dev@tandem.local>" CACHE STRING "Maintainer field of the .deb")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tandem_<version>_<arch>.deb; arch from dpkg --print-architecture
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)  # the programs; cmake --install never strips a static library
set(_tandem_deb_depends libopenblas-dev libspdlog-dev nlohmann-json3-dev zlib1g-dev libssl-dev)
if(TANDEM_MPI)
  list(APPEND _tandem_deb_depends libopenmpi-dev)
endif()
if(TANDEM_GLOO)
  list(APPEND _tandem_deb_depends libgloo-dev)
endif()
list(JOIN _tandem_deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "cmake (>= 3.25), g++ (>= 4:12), make")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "dataset-fashion-mnist")
set(CPACK_TANDEM_CUDA ${TANDEM_CUDA})
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/CPackProject.cmake)
include(CPack)
