// The dtype experts are kept in for the offload runtime (--expert_dtype,
// parsed by ParseExpertDType in engine/core/dtype.h):
// "auto" keeps the checkpoint's (what the backend reads: bf16 on CUDA),
// "fp8" quantises bf16/f16/f32 experts at load into 128 x 128-block FP8
// (ExpertFormat, engine/core/fp8_block.h), so every copy, slab and host
// store byte is half a bf16 expert's. Lossy, so opt-in; the CPU backend
// computes with it, the CUDA backend widens each to bf16 before its GEMMs.
// Thread safety: pure functions, except PackedExpertBytes (the provider's
// forward thread).
#ifndef VISMOE_ENGINE_OFFLOAD_EXPERT_DTYPE_H_
#define VISMOE_ENGINE_OFFLOAD_EXPERT_DTYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

// Bytes of one expert of `layer` (a MoE layer of `source`) packed as `dtype`
// (its ExpertFormat): what each slab, copy and host-store entry then holds.
absl::StatusOr<int64_t> PackedExpertBytes(ExpertProvider& source, int layer, DType dtype);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_EXPERT_DTYPE_H_
