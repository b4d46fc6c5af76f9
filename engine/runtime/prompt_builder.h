// PromptBuilder: turns a request's chat into model input -- the chat template
// rendered and tokenized (user text never yields special tokens unless the
// request allows it), each image preprocessed into patches, image pads
// expanded to the visual token count, and the M-RoPE positions.
// DeepSeek-VL2 (config.vl2_vision) has its own conversation format and image
// path instead: each image planned and cut into tiles (its grid is the local
// tile grid {1, height_tiles, width_tiles}), its <image> run written by the
// conversation (engine/model/vl2_conversation.h), and plain 1-D positions.
//
// Thread safety: immutable; Build may run concurrently.
// Ownership: borrows the tokenizer, template and preprocessor, which must
// outlive it.
#ifndef VISMOE_ENGINE_RUNTIME_PROMPT_BUILDER_H_
#define VISMOE_ENGINE_RUNTIME_PROMPT_BUILDER_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/request.h"
#include "engine/arch/mrope_positions.h"
#include "engine/model/chat_template.h"
#include "engine/model/grid_thw.h"
#include "engine/model/image_preprocessor.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "engine/model/vl2_conversation.h"

namespace vismoe {

// What a request turns into before the model runs.
struct Prompt {
  std::vector<int> ids;
  std::vector<GridThw> grids;
  std::vector<float> patches;  // all images' patch rows, in order
  MropePositions mrope;        // filled only when there are images
};

class PromptBuilder {
 public:
  // REQUIRES: tokenizer non-null; with config.vl2_vision, vl2_ids set and
  // config.image_token_id its image id (the template and preprocessor are
  // unused); otherwise chat_template non-null
  // and preprocessor non-null when config.has_vision.
  PromptBuilder(const ModelConfig& config, const Tokenizer* tokenizer,
                const ChatTemplate* chat_template, const ImagePreprocessor* preprocessor,
                int max_context_tokens, std::optional<Vl2SpecialIds> vl2_ids = std::nullopt)
      : config_(config),
        tokenizer_(tokenizer),
        template_(chat_template),
        preprocessor_(preprocessor),
        max_context_tokens_(max_context_tokens),
        vl2_ids_(vl2_ids) {}

  // InvalidArgument naming the message or image for a bad image reference,
  // an image for a text-only model, an undecodable image, an empty prompt,
  // image placeholder tokens that are not the attached images' (text with
  // allowed special tokens may spell them), a video placeholder, or a prompt
  // with no room for a generated token.
  absl::StatusOr<Prompt> Build(const GenerateRequest& request) const;

 private:
  // The chat template's ids, images and positions.
  absl::Status BuildChat(const GenerateRequest& request, const std::vector<int>& image_order,
                         Prompt* p) const;
  // DeepSeek-VL2's.
  absl::Status BuildVl2(const GenerateRequest& request, const std::vector<int>& image_order,
                        Prompt* p) const;
  // The placeholders come from image parts only: `pads` image pads for the
  // attached `images`, no video pad.
  absl::Status CheckPlaceholders(absl::Span<const int> ids, int64_t pads, size_t images) const;

  ModelConfig config_;
  const Tokenizer* tokenizer_;
  const ChatTemplate* template_;
  const ImagePreprocessor* preprocessor_;
  int max_context_tokens_;
  std::optional<Vl2SpecialIds> vl2_ids_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_PROMPT_BUILDER_H_
