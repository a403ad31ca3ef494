// A stand-in for libtandem_cuda.so built by another Tandem version: the entry point answers
// with the same table layout but version "0.0.0-fake", and nothing else. The loader must
// refuse it naming both versions, before it calls anything in the table (whose entries are
// all null: a call would crash the test).
#include "core/cuda_plugin.h"

extern "C" __attribute__((visibility("default"))) const tandem::CudaPlugin* tandem_cuda_plugin() {
  static const tandem::CudaPlugin table = [] {
    tandem::CudaPlugin t{};
    t.abi = tandem::kCudaPluginAbi;
    t.size = sizeof(tandem::CudaPlugin);
    t.version = "0.0.0-fake";
    return t;
  }();
  return &table;
}
