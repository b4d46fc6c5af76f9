// TextDecoder: what the engine needs from a backend's language model. The CPU
// reference (Qwen3VlMoeModel) and the CUDA backend
// (cuda::Qwen3VlMoeCudaModel) implement it; both take the same DecoderInput,
// get experts from an ExpertProvider and return host fp32 logits, so the
// engine's sampling, stop handling and observers are backend-independent.
// Thread safety: as the implementations say (immutable after Create; one
// Forward per KV cache at a time).
#ifndef VISMOE_ENGINE_ARCH_TEXT_DECODER_H_
#define VISMOE_ENGINE_ARCH_TEXT_DECODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_provider.h"
#include "engine/runtime/kv_cache.h"

namespace vismoe {

struct DecoderInput;  // engine/arch/qwen3_vl_moe.h

class TextDecoder {
 public:
  virtual ~TextDecoder() = default;

  // A KV cache of `capacity` tokens in the backend's memory (device memory on
  // CUDA, so this can fail).
  virtual absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const = 0;
  // Runs the new tokens, appending to `cache` (from this decoder's
  // CreateKvCache), and writes host logits [tokens or 1, vocab]. The contract
  // of Qwen3VlMoeModel::Forward.
  virtual absl::Status Forward(const DecoderInput& input, KvCache* cache, ExpertProvider* experts,
                               std::vector<float>* logits) const = 0;
  virtual const ModelConfig& config() const = 0;
  // "cpu" or "cuda".
  virtual const char* backend() const = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_TEXT_DECODER_H_
