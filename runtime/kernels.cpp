// Kernel dispatch by device, and the process-wide BLAS thread setting.
#include "runtime/kernels.h"

#include "runtime/cuda_device.h"

namespace tandem {

Kernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu::kernels();
  return cuda::kernels(device.index);
}

}  // namespace tandem
