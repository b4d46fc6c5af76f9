// VisionTower: the interface the engine runs images through, implemented once
// per model family over a backend's VisionOps (Qwen3VlVisionModel,
// engine/arch/qwen3_vl_vision.h). It takes host fp32 patches and returns a
// host fp32 VisionOutput whatever the backend.
//
// Thread safety: Forward() may be called from several threads (as far as the
// backend's ops allow: the CPU runs them concurrently, CUDA serialises them).
// Ownership: implementations own their ops.
#ifndef VISMOE_ENGINE_ARCH_VISION_TOWER_H_
#define VISMOE_ENGINE_ARCH_VISION_TOWER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/grid_thw.h"

namespace vismoe {

struct VisionOutput {
  int64_t num_tokens = 0;  // merged tokens over all images
  int64_t out_hidden = 0;
  std::vector<int64_t> tokens_per_image;      // in input order
  std::vector<float> embeds;                  // [num_tokens, out_hidden]
  std::vector<std::vector<float>> deepstack;  // one per deepstack index, [num_tokens, out_hidden]
  // [num_tokens]: mean over the token's patches of the attention they receive;
  // a frame's patches sum to 1, so a frame's tokens sum to 1 / merge^2.
  std::vector<float> saliency;
  // [num_tokens], or empty when there are none: 1 for a row that only marks
  // the layout (DeepSeek-VL2's newlines and view separator). Token
  // compression keeps these rows and ranks the others.
  std::vector<uint8_t> layout;
};

class VisionTower {
 public:
  virtual ~VisionTower() = default;

  // Columns of one patch row: in_channels * temporal_patch_size * patch_size^2.
  virtual int64_t patch_dim() const = 0;

  // patches: the images' patch rows concatenated in order, [sum num_patches,
  // patch_dim]. InvalidArgument when the size does not match the grids or a
  // grid is not divisible by the merge size (implementations may add limits).
  virtual absl::StatusOr<VisionOutput> Forward(absl::Span<const float> patches,
                                               absl::Span<const GridThw> grids) const = 0;

  // "cpu" or "cuda".
  virtual const char* backend() const = 0;
  // Device bytes the tower holds beyond its weights (scratch, workspaces),
  // for the memory plan's activation reservation; 0 on the host.
  virtual int64_t device_scratch_bytes() const { return 0; }
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_VISION_TOWER_H_
