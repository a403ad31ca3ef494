// The nccl backend of a CUDA build, as the program sees it: process_group_nccl.cpp itself is
// compiled into the CUDA plugin (core/cuda_plugin.h), so this program links no NCCL
// and maps none until a job asks for --backend nccl, which loads the plugin here.
#include <stdexcept>
#include <string>

#include "collectives/backends.h"
#include "core/cuda_plugin.h"

namespace tandem {

const bool kNcclBuilt = true;

std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args) {
  const CudaPlugin* plugin = nullptr;
  try {
    plugin = &cuda_plugin();
  } catch (const std::runtime_error& e) {
    // A failure to create the group, like any other: the caller reports it as such.
    throw CollectiveError(std::string("the nccl backend cannot start: ") + e.what());
  }
  return plugin->make_nccl_group(args);
}

}  // namespace tandem
