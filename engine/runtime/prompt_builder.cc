#include "engine/runtime/prompt_builder.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {

absl::StatusOr<Prompt> PromptBuilder::Build(const GenerateRequest& request) const {
  Prompt p;
  std::vector<int> image_order;
  for (size_t m = 0; m < request.messages.size(); ++m) {
    for (const ContentPart& part : request.messages[m].content) {
      if (part.kind != ContentPart::Kind::kImage) continue;
      if (part.image_index < 0 || part.image_index >= static_cast<int>(request.images.size())) {
        return absl::InvalidArgumentError(absl::StrCat("messages[", m, "] refers to image ",
                                                       part.image_index, " but the request has ",
                                                       request.images.size(), " images"));
      }
      image_order.push_back(part.image_index);
    }
  }
  if (!image_order.empty() && !config_.has_vision) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", config_.model_type, " does not take images"));
  }
  const auto text_tokens = request.allow_special_tokens_in_text
                               ? ChatTemplate::TextTokens::kAllowSpecial
                               : ChatTemplate::TextTokens::kPlain;
  VISMOE_ASSIGN_OR_RETURN(p.ids, template_->Tokenize(*tokenizer_, request.messages,
                                                     request.add_generation_prompt, text_tokens));
  if (p.ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  VISMOE_RETURN_IF_ERROR(CheckPlaceholders(p.ids, image_order.size()));
  for (size_t i = 0; i < image_order.size(); ++i) {
    auto img = preprocessor_->Process(request.images[image_order[i]]);
    if (!img.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("images[", image_order[i], "]: ", img.status().message()));
    }
    p.grids.push_back(img->grid);
    p.patches.insert(p.patches.end(), img->patches.begin(), img->patches.end());
  }
  if (!p.grids.empty()) {
    VISMOE_ASSIGN_OR_RETURN(p.ids, ExpandImagePads(p.ids, p.grids, config_));
    VISMOE_ASSIGN_OR_RETURN(p.mrope, ComputeMropePositions(p.ids, p.grids, config_));
  }
  // Room for the prompt and at least one generated token.
  if (static_cast<int64_t>(p.ids.size()) + 1 > max_context_tokens_) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt of ", p.ids.size(),
                     " tokens is too long for max_context_tokens = ", max_context_tokens_));
  }
  return p;
}

// Image placeholders come only from attached images (the chat template
// writes one per image); text that spells them (allowed special tokens)
// would make the model read a picture that is not there.
absl::Status PromptBuilder::CheckPlaceholders(absl::Span<const int> ids, size_t images) const {
  int64_t image_pads = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == config_.video_token_id && config_.video_token_id >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt holds a video placeholder token (id ", ids[i], ") at token ", i,
                       "; video input is not supported"));
    }
    if (ids[i] == config_.image_token_id && config_.image_token_id >= 0) ++image_pads;
  }
  if (image_pads != static_cast<int64_t>(images)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt holds ", image_pads, " image placeholder token(s) (id ", config_.image_token_id,
        ") for ", images, " attached image(s): placeholders come only from image parts"));
  }
  return absl::OkStatus();
}

}  // namespace vismoe
