// Vl2VisionConfig: the vision half of a DeepSeek-VL2 (deepseek_vl_v2)
// config.json, as the published code reads it (engine/model/deepseek_vl2.md):
// the SigLIP tower's vision_config, the projector_config, the tiling's
// candidate_resolutions, tile_tag and global_view_pos.
// Thread safety: a value type.
#ifndef VISMOE_ENGINE_MODEL_VL2_VISION_CONFIG_H_
#define VISMOE_ENGINE_MODEL_VL2_VISION_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/image/vl2_tiling.h"

namespace vismoe {

struct Vl2VisionConfig {
  int image_size = 384;
  int patch_size = 14;
  int width = 1152;
  int layers = 27;
  int heads = 16;
  int mlp_dim = 4304;  // int(width * mlp_ratio), as timm
  float eps = 1e-6f;
  int downsample = 2;  // projector_config.downsample_ratio
  int n_embed = 2048;  // the language model's hidden size
  int projector_depth = 2;
  bool global_view_head = true;  // global_view_pos "head" (else "tail")
  std::vector<Vl2Size> candidates;

  // InvalidArgument naming the field for a malformed or unsupported config
  // (a projector other than downsample_mlp_gelu, token pooling, a tile_tag
  // other than 2D, sizes that do not divide).
  static absl::StatusOr<Vl2VisionConfig> Parse(const std::string& config_json);
  int grid() const { return image_size / patch_size; }                 // patches per side
  int side() const { return (grid() + downsample - 1) / downsample; }  // tokens per side
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_VL2_VISION_CONFIG_H_
