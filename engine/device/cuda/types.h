// Plain C++ vocabulary of the CUDA backend's host API, so that engine code can
// include the kernel headers without cuda_runtime.h:
//   Bf16        one bfloat16 value as its 16 raw bits (the safetensors layout;
//               bit-identical to __nv_bfloat16, see engine/core/dtype.h).
//   StreamHandle a cudaStream_t (nullptr = the legacy default stream).
// All pointers passed to kernels in engine/ops/cuda are device pointers unless
// a parameter says "host".
#ifndef VISMOE_ENGINE_DEVICE_CUDA_TYPES_H_
#define VISMOE_ENGINE_DEVICE_CUDA_TYPES_H_

#include <cstdint>

struct CUstream_st;     // cudaStream_t is CUstream_st*
struct CUevent_st;      // cudaEvent_t is CUevent_st*
struct CUgraphExec_st;  // cudaGraphExec_t is CUgraphExec_st*

namespace vismoe::cuda {

using Bf16 = uint16_t;
using StreamHandle = CUstream_st*;
using EventHandle = CUevent_st*;
using GraphExecHandle = CUgraphExec_st*;

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_DEVICE_CUDA_TYPES_H_
