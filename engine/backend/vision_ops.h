// VisionOps: the operations a backend provides to run a ViT-style vision
// tower (Qwen3-VL's), the vision counterpart of DecoderOps.
//
// The tower (engine/arch/qwen3_vl_vision.h) is written once over these ops:
// input checks, the host-side tables (resampled position embeddings, 2-D
// rotary), the block loop, which merger runs after which block (DeepStack),
// the saliency reduction and the output layout. A backend
// (engine/backends/cpu, engine/backends/cuda) implements the math on its own
// memory. One Forward's activations live in a VisionStep: the residual stream
// `hs` [n patches, hidden] in the backend's memory and precision. The ops are
// coarse (a whole attention half-block) so a backend can fuse inside them.
//
// Exactness: the CPU backend is the fp32 reference and matches transformers;
// other backends are compared against it op by op
// (tests/engine/backend/vision_ops_test.cc) and end to end.
//
// Thread safety: VisionOps is immutable after creation; BeginStep may be
// called from several threads (a backend that cannot run steps concurrently
// serialises them for the life of the VisionStep). A VisionStep is used by
// one thread.
// Ownership: a VisionStep borrows its input's buffers, the output vectors
// given to Merge and the VisionOps that made it; all must outlive it.
#ifndef VISMOE_ENGINE_BACKEND_VISION_OPS_H_
#define VISMOE_ENGINE_BACKEND_VISION_OPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/model/grid_thw.h"
#include "engine/model/model_config.h"

namespace vismoe {

// What a vision step starts from, validated by the tower: n patches in the
// image processor's merge-block order.
struct VisionStepInput {
  absl::Span<const float> patches;   // [n, patch_dim]
  absl::Span<const GridThw> grids;   // frames of g.h * g.w patches, in order
  absl::Span<const float> position;  // [n, hidden] resampled position embeddings
  absl::Span<const float> cos;       // [n, head_dim] 2-D rotary tables
  absl::Span<const float> sin;
};

// The rows n of a step after checking that the input's sizes agree with each
// other and the config (n >= 1; patches n * patch_dim, position n * hidden,
// cos and sin n * head_dim, the grids n patches). InvalidArgument otherwise.
// Backends call it in BeginStep.
absl::StatusOr<int64_t> VisionStepRows(const VisionConfig& config, const VisionStepInput& input);

// InvalidArgument naming `what` unless 0 <= index < count.
absl::Status CheckVisionIndex(const char* what, int index, size_t count);

// Which merger Merge runs: the final one, or DeepStack merger k (>= 0).
inline constexpr int kFinalMerger = -1;

class VisionStep {
 public:
  virtual ~VisionStep() = default;

  // hs += proj(attention within each frame of rotary(qkv(LayerNorm1(hs))))
  // for `block`. With `saliency`, also records the attention each patch
  // receives, averaged over heads and the query patches of its frame.
  virtual absl::Status Attention(int block, bool saliency) = 0;
  // hs += fc2(GELU(fc1(LayerNorm2(hs)))) for `block`.
  virtual absl::Status Mlp(int block) = 0;
  // Merger `which` (kFinalMerger or a DeepStack index) of hs: LayerNorm (on
  // each patch for the final merger, on each merged row for DeepStack), the
  // merge x merge rows concatenated, fc1, exact GELU, fc2. `out` is resized to
  // [n / merge^2, out_hidden] now and holds the values once Finish returns.
  virtual absl::Status Merge(int which, std::vector<float>* out) = 0;
  // Completes everything queued (a backend surfaces its asynchronous errors
  // here at the latest) and returns the patch saliency [n] recorded by the
  // Attention call with `saliency` (zeros if none).
  virtual absl::Status Finish(std::vector<float>* patch_saliency) = 0;
  // [n, hidden] host fp32 copy of hs, valid until the next op (for tests).
  virtual absl::StatusOr<const float*> HostResidual() = 0;
};

class VisionOps {
 public:
  virtual ~VisionOps() = default;

  // "cpu" or "cuda".
  virtual const char* name() const = 0;
  // The learned position table [num_position_embeddings, hidden] on the host,
  // any float dtype: the tower resamples it per image.
  virtual const TensorView& position_table() const = 0;
  // InvalidArgument when one step of `patches` rows exceeds what the backend
  // was sized for.
  virtual absl::Status CheckPatches(int64_t /*patches*/) const { return absl::OkStatus(); }
  // Device bytes the ops hold beyond the weights (scratch, workspaces), for
  // the memory plan's activation reservation; 0 on the host.
  virtual int64_t device_scratch_bytes() const { return 0; }
  // hs = patch_embed(patches) + bias + position (the Conv3d as one Linear
  // over the flattened patch). REQUIRES: input validated by the tower, n >= 1.
  virtual absl::StatusOr<std::unique_ptr<VisionStep>> BeginStep(
      const VisionStepInput& input) const = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_VISION_OPS_H_
