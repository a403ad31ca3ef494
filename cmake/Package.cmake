# cmake --install BUILD --prefix P lays out:
#   P/bin/                       tandem-train, tandemrun, tandem-ckpt, tandem-trace, tandem-bench-collectives
#   P/lib/                       libtandem.a (Tandem::tandem), libtandem_collectives.a (Tandem::collectives)
#   P/include/tandem/            tandem.h, collectives.h, version.h: what users include
#   P/include/tandem/<folder>/   the headers those include, and nothing else
#   P/lib/cmake/Tandem/          TandemConfig.cmake, its version file and the targets
#   P/share/tandem/data/         tinyshakespeare.txt (--data shakespeare of an installed tandem-train)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The public headers: the two umbrellas, and every header they reach (listed, so an
# internal header is never installed by accident; tests/install builds the examples
# against the installed tree alone, which fails if one is missing).
set(TANDEM_PUBLIC_HEADERS
  collectives/init.h collectives/process_group.h collectives/health.h collectives/flight_recorder.h
  collectives/fault_injection.h collectives/store.h collectives/types.h collectives/work.h
  runtime/tensor.h runtime/precision.h runtime/module.h runtime/model.h runtime/freeze.h runtime/kernels.h runtime/trace.h
  runtime/thread_pool.h runtime/cross_replica.h
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
  runtime/strategy/reducer.h runtime/strategy/comm_hook.h runtime/strategy/parallel.h runtime/strategy/gather.h
  runtime/strategy/replica_sync.h
  models/zoo.h models/gpt.h models/resnet.h models/generate.h models/summary.h)
foreach(h ${TANDEM_PUBLIC_HEADERS})
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/tandem/tandem.h ${PROJECT_SOURCE_DIR}/include/tandem/collectives.h
              ${CMAKE_BINARY_DIR}/include/tandem/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem)

# tandem_fp16 and tandem_openblas are the build's handles on two system libraries; they go
# into the export only as link dependencies of the static libraries.
install(TARGETS tandem_runtime tandem_collectives tandem_fp16 tandem_openblas EXPORT TandemTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tandem-train tandemrun tandem-ckpt tandem-trace tandem-bench-collectives
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/data/tinyshakespeare.txt DESTINATION ${CMAKE_INSTALL_DATADIR}/tandem/data)

install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TandemConfig.cmake.in
  ${CMAKE_BINARY_DIR}/TandemConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TandemConfig.cmake ${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
