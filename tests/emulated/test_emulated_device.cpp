// The emulated GPU itself: host code that reads device memory dies, as on a GPU, and
// copies and kernels see through the device pointers.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/allocator.h"
#include "runtime/kernels.h"
#include "runtime/tensor.h"

namespace tandem {
namespace {

TEST(EmulatedDevice, HostReadsOfDeviceMemoryFault) {
  Tensor t = Tensor::zeros({16}, DType::f32, Device::cuda(0));
  EXPECT_EQ(t.to_vector(), std::vector<float>(16, 0.f));  // through a copy: fine
  volatile float* p = t.f32();
  EXPECT_DEATH({ float v = p[3]; (void)v; }, "");
}

TEST(EmulatedDevice, KernelsAndCopiesSeeThroughDevicePointers) {
  Tensor a = Tensor::from_vector({1.f, 2.f, 3.f}, {3}).to(Device::cuda(1));
  kernels_for(Device::cuda(1)).scale(a.f32() + 1, 2, 10.f);  // a view: pointer arithmetic
  EXPECT_EQ(a.to(Device::cuda(0)).to_vector(), (std::vector<float>{1.f, 20.f, 30.f}));
}

}  // namespace
}  // namespace tandem
