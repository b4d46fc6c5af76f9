#include "tests/testing/cuda_device.h"

#ifdef VISMOE_HAVE_CUDA
#include "engine/device/cuda/device.h"
#endif

namespace vismoe::testing {

bool CudaDeviceUsable() {
#ifdef VISMOE_HAVE_CUDA
  return cuda::ProbeCudaDevice(0).ok();
#else
  return false;
#endif
}

}  // namespace vismoe::testing
