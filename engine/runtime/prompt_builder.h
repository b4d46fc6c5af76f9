// PromptBuilder: turns a request's chat into model input -- the chat template
// rendered and tokenized (user text never yields special tokens unless the
// request allows it), each image preprocessed into patches, image pads
// expanded to the visual token count, and the M-RoPE positions.
//
// Thread safety: immutable; Build may run concurrently.
// Ownership: borrows the tokenizer, template and preprocessor, which must
// outlive it.
#ifndef VISMOE_ENGINE_RUNTIME_PROMPT_BUILDER_H_
#define VISMOE_ENGINE_RUNTIME_PROMPT_BUILDER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/request.h"
#include "engine/arch/mrope_positions.h"
#include "engine/model/chat_template.h"
#include "engine/model/grid_thw.h"
#include "engine/model/image_preprocessor.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

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
  // REQUIRES: tokenizer and chat_template non-null; preprocessor non-null
  // when config.has_vision.
  PromptBuilder(const ModelConfig& config, const Tokenizer* tokenizer,
                const ChatTemplate* chat_template, const ImagePreprocessor* preprocessor,
                int max_context_tokens)
      : config_(config),
        tokenizer_(tokenizer),
        template_(chat_template),
        preprocessor_(preprocessor),
        max_context_tokens_(max_context_tokens) {}

  // InvalidArgument naming the message or image for a bad image reference,
  // an image for a text-only model, an undecodable image, an empty prompt,
  // image placeholder tokens that are not the attached images' (text with
  // allowed special tokens may spell them), a video placeholder, or a prompt
  // with no room for a generated token.
  absl::StatusOr<Prompt> Build(const GenerateRequest& request) const;

 private:
  // The template's placeholders: one image pad per attached image, no video pad.
  absl::Status CheckPlaceholders(absl::Span<const int> ids, size_t images) const;

  ModelConfig config_;
  const Tokenizer* tokenizer_;
  const ChatTemplate* template_;
  const ImagePreprocessor* preprocessor_;
  int max_context_tokens_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_PROMPT_BUILDER_H_
