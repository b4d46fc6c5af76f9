// Whether this process can run the CUDA backend: built with CUDA and a usable
// device present. Tests whose expectation depends on the backend `auto`
// picks (or on `cuda` being refused) branch on it.
#ifndef VISMOE_TESTS_TESTING_CUDA_DEVICE_H_
#define VISMOE_TESTS_TESTING_CUDA_DEVICE_H_

namespace vismoe::testing {

bool CudaDeviceUsable();

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_CUDA_DEVICE_H_
