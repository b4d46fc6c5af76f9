// Fuzzes config.json parsing (engine/model/model_config.h): ModelConfig::Parse
// on arbitrary text, then the per-layer MoE query over every layer it allows.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<vismoe::ModelConfig> config =
      vismoe::ModelConfig::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (config.ok()) {
    for (int layer = 0; layer < config->text.num_hidden_layers && layer < 4096; ++layer) {
      (void)config->text.IsMoeLayer(layer);
    }
  }
  return 0;
}
