#include "engine/runtime/prompt_builder.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/image/vl2_tiles.h"
#include "engine/model/image/vl2_tiling.h"

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
  if (config_.vl2_vision.has_value()) {
    VISMOE_RETURN_IF_ERROR(BuildVl2(request, image_order, &p));
  } else {
    VISMOE_RETURN_IF_ERROR(BuildChat(request, image_order, &p));
  }
  // Room for the prompt and at least one generated token.
  if (static_cast<int64_t>(p.ids.size()) + 1 > max_context_tokens_) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt of ", p.ids.size(),
                     " tokens is too long for max_context_tokens = ", max_context_tokens_));
  }
  return p;
}

absl::Status PromptBuilder::BuildChat(const GenerateRequest& request,
                                      const std::vector<int>& image_order, Prompt* p) const {
  const auto text_tokens = request.allow_special_tokens_in_text
                               ? ChatTemplate::TextTokens::kAllowSpecial
                               : ChatTemplate::TextTokens::kPlain;
  VISMOE_ASSIGN_OR_RETURN(p->ids, template_->Tokenize(*tokenizer_, request.messages,
                                                      request.add_generation_prompt, text_tokens));
  if (p->ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  VISMOE_RETURN_IF_ERROR(
      CheckPlaceholders(p->ids, static_cast<int64_t>(image_order.size()), image_order.size()));
  for (size_t i = 0; i < image_order.size(); ++i) {
    auto img = preprocessor_->Process(request.images[image_order[i]]);
    if (!img.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("images[", image_order[i], "]: ", img.status().message()));
    }
    p->grids.push_back(img->grid);
    p->patches.insert(p->patches.end(), img->patches.begin(), img->patches.end());
  }
  if (!p->grids.empty()) {
    VISMOE_ASSIGN_OR_RETURN(p->ids, ExpandImagePads(p->ids, p->grids, config_));
    VISMOE_ASSIGN_OR_RETURN(p->mrope, ComputeMropePositions(p->ids, p->grids, config_));
  }
  return absl::OkStatus();
}

// As the published processor: tiling (cropping) only for at most two images.
absl::Status PromptBuilder::BuildVl2(const GenerateRequest& request,
                                     const std::vector<int>& image_order, Prompt* p) const {
  const Vl2VisionConfig& vc = *config_.vl2_vision;
  const bool cropping = image_order.size() <= 2;
  std::vector<int64_t> tokens;
  for (const int index : image_order) {
    // The published loader drops alpha instead of compositing it.
    const RgbImage& given = request.images[index];
    RgbImage dropped;
    if (!given.alpha_dropped.empty()) {
      dropped = RgbImage{given.width, given.height, given.alpha_dropped, {}};
    }
    const RgbImage& image = given.alpha_dropped.empty() ? given : dropped;
    if (image.width < 1 || image.height < 1 ||
        image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "images[", index, "]: a ", image.width, "x", image.height, " image must hold ",
          int64_t{image.width} * image.height * 3, " RGB bytes, not ", image.pixels.size()));
    }
    absl::StatusOr<Vl2Tiling> plan =
        PlanVl2Tiling({image.width, image.height}, vc.image_size, vc.candidates, cropping);
    if (!plan.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("images[", index, "]: ", plan.status().message()));
    }
    const std::vector<float> tiles = Vl2Tiles(image, *plan, vc.image_size);
    p->patches.insert(p->patches.end(), tiles.begin(), tiles.end());
    p->grids.push_back({1, plan->height_tiles, plan->width_tiles});
    tokens.push_back(Vl2ImageTokens(*plan, vc.image_size, vc.patch_size, vc.downsample));
  }
  std::vector<ChatMessage> messages = request.messages;
  if (request.add_generation_prompt) messages.push_back({"assistant", {}});
  VISMOE_ASSIGN_OR_RETURN(p->ids, Vl2ConversationIds(*tokenizer_, *vl2_ids_, messages, tokens,
                                                     request.allow_special_tokens_in_text));
  VISMOE_RETURN_IF_ERROR(CheckPlaceholders(
      p->ids, std::accumulate(tokens.begin(), tokens.end(), int64_t{0}), image_order.size()));
  if (!p->grids.empty()) {
    // Plain positions, as three equal axes (what the decoder takes with images).
    const int64_t n = static_cast<int64_t>(p->ids.size());
    p->mrope.positions.resize(static_cast<size_t>(3 * n));
    for (int64_t a = 0; a < 3; ++a) {
      std::iota(p->mrope.positions.begin() + a * n, p->mrope.positions.begin() + (a + 1) * n,
                int64_t{0});
    }
  }
  return absl::OkStatus();
}

// Image placeholders come only from attached images (the chat template
// writes one per image); text that spells them (allowed special tokens)
// would make the model read a picture that is not there.
absl::Status PromptBuilder::CheckPlaceholders(absl::Span<const int> ids, int64_t pads,
                                              size_t images) const {
  int64_t image_pads = 0;
  const int image_id = config_.image_token_id;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == config_.video_token_id && config_.video_token_id >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt holds a video placeholder token (id ", ids[i], ") at token ", i,
                       "; video input is not supported"));
    }
    if (ids[i] == image_id && image_id >= 0) ++image_pads;
  }
  if (image_pads != pads) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt holds ", image_pads, " image placeholder token(s) (id ", image_id,
                     ") for ", images, " attached image(s), which make ", pads,
                     ": placeholders come only from image parts"));
  }
  return absl::OkStatus();
}

}  // namespace vismoe
