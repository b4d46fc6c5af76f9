// Fuzzes config.json parsing (engine/model/model_config.h): ModelConfig::Parse
// on arbitrary text, then the per-layer MoE query over every layer it allows;
// and DeepSeek-VL2's vision half (engine/model/vl2_vision_config.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/model/model_config.h"
#include "engine/model/vl2_vision_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<vismoe::ModelConfig> config =
      vismoe::ModelConfig::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (config.ok()) {
    for (int layer = 0; layer < config->text.num_hidden_layers && layer < 4096; ++layer) {
      (void)config->text.IsMoeLayer(layer);
    }
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<vismoe::Vl2VisionConfig> vl2 = vismoe::Vl2VisionConfig::Parse(std::string(text));
  if (vl2.ok()) (void)vl2->side();
  return 0;
}
