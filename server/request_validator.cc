#include "server/request_validator.h"

#include <chrono>
#include <cmath>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/commit_miss_policy.h"  // kMaxOwaAlpha
#include "engine/core/status_macros.h"
#include "server/policy_names.h"

namespace vismoe::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsKnownRole(absl::string_view role) {
  return role == "system" || role == "user" || role == "assistant";
}

}  // namespace

RequestValidator::RequestValidator(const Options& options, const ImageDecoder* decoder)
    : options_(options), decoder_(decoder) {}

absl::StatusOr<ValidatedRequest> RequestValidator::Validate(
    const v1::GenerateRequest& proto) const {
  ValidatedRequest out;
  GenerateRequest& req = out.request;
  if (proto.request_id().size() > options_.max_request_id_bytes) {
    return Invalid("request_id",
                   absl::StrCat("is ", proto.request_id().size(), " bytes, over the limit of ",
                                options_.max_request_id_bytes));
  }
  for (size_t i = 0; i < proto.request_id().size(); ++i) {
    const auto c = static_cast<unsigned char>(proto.request_id()[i]);
    if (c < 0x20 || c > 0x7E) {
      return Invalid("request_id", absl::StrFormat("byte %d is 0x%02x; only printable ASCII "
                                                   "(0x20-0x7e) is allowed",
                                                   i, c));
    }
  }
  req.request_id = proto.request_id();
  req.allow_special_tokens_in_text = options_.allow_special_tokens_in_text;
  if (proto.messages_size() == 0) {
    return Invalid("messages", "at least one message is required");
  }
  bool has_content = false;
  int num_images = 0;
  int64_t text_bytes = 0;
  for (int i = 0; i < proto.messages_size(); ++i) {
    const v1::ChatMessage& m = proto.messages(i);
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!IsKnownRole(m.role())) {
      return Invalid(
          absl::StrCat(field, ".role"),
          absl::StrCat("unknown role \"", m.role(), "\"; valid: system, user, assistant"));
    }
    if (m.parts_size() == 0) return Invalid(absl::StrCat(field, ".parts"), "message has no parts");
    ChatMessage msg;
    msg.role = m.role();
    for (int j = 0; j < m.parts_size(); ++j) {
      const v1::ContentPart& p = m.parts(j);
      const std::string pfield = absl::StrCat(field, ".parts[", j, "]");
      ContentPart part;
      switch (p.part_case()) {
        case v1::ContentPart::kText:
          part.kind = ContentPart::Kind::kText;
          text_bytes += static_cast<int64_t>(p.text().size());
          if (text_bytes > options_.max_prompt_bytes) {
            return Invalid("messages",
                           absl::StrCat("text is over the limit of ", options_.max_prompt_bytes,
                                        " bytes per request (max_prompt_bytes)"));
          }
          part.text = p.text();
          if (!p.text().empty()) has_content = true;
          break;
        case v1::ContentPart::kImage: {
          if (m.role() != "user") {
            return Invalid(
                pfield, absl::StrCat("images are only accepted in user messages, not ", m.role()));
          }
          if (p.image().data().empty()) {
            return Invalid(absl::StrCat(pfield, ".image.data"), "image data is empty");
          }
          if (++num_images > options_.max_images) {
            return Invalid("messages", absl::StrCat("too many images: more than the limit of ",
                                                    options_.max_images, " per request"));
          }
          absl::Status limits = decoder_->CheckLimits(p.image().data());
          if (!limits.ok()) return Invalid(absl::StrCat(pfield, ".image"), limits.message());
          part.kind = ContentPart::Kind::kImage;
          part.image_index = static_cast<int>(out.image_data.size());
          out.image_data.push_back(p.image().data());
          has_content = true;
          break;
        }
        case v1::ContentPart::PART_NOT_SET:
          return Invalid(pfield, "neither text nor image is set");
      }
      msg.content.push_back(std::move(part));
    }
    req.messages.push_back(std::move(msg));
  }
  if (!has_content) return Invalid("messages", "request has no text and no image");

  // ---- sampling ----
  const v1::SamplingParams& s = proto.sampling();
  SamplingParams& sp = req.sampling;
  if (s.max_new_tokens() < 0 || s.max_new_tokens() > options_.max_new_tokens_limit) {
    return Invalid("sampling.max_new_tokens",
                   absl::StrCat(s.max_new_tokens(), " is out of range [0, ",
                                options_.max_new_tokens_limit, "] (0 = default)"));
  }
  sp.max_new_tokens = s.max_new_tokens() == 0
                          ? std::min(options_.default_max_new_tokens, options_.max_new_tokens_limit)
                          : s.max_new_tokens();
  if (!std::isfinite(s.temperature()) || s.temperature() < 0) {
    return Invalid("sampling.temperature",
                   absl::StrCat(s.temperature(), " must be a finite number >= 0"));
  }
  sp.temperature = s.temperature();
  if (s.top_k() < 0) {
    return Invalid("sampling.top_k", absl::StrCat(s.top_k(), " must be >= 0 (0 = off)"));
  }
  sp.top_k = s.top_k();
  if (s.has_top_p()) {
    if (!(s.top_p() > 0 && s.top_p() <= 1)) {  // NaN fails too
      return Invalid("sampling.top_p", absl::StrCat(s.top_p(), " must be in (0, 1]"));
    }
    sp.top_p = s.top_p();
  }
  sp.seed = s.seed();
  if (s.stop_size() > options_.max_stop_strings) {
    return Invalid("sampling.stop", absl::StrCat("too many stop strings: ", s.stop_size(),
                                                 ", limit ", options_.max_stop_strings));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string field = absl::StrCat("sampling.stop[", i, "]");
    if (s.stop(i).empty()) return Invalid(field, "stop string is empty");
    if (s.stop(i).size() > options_.max_stop_string_bytes) {
      return Invalid(field,
                     absl::StrCat("stop string is ", s.stop(i).size(), " bytes, over the limit of ",
                                  options_.max_stop_string_bytes));
    }
    sp.stop.push_back(s.stop(i));
  }

  // ---- policy overrides, then server defaults ----
  const v1::PolicyOverrides& po = proto.policy();
  PolicyOverrides& pol = req.policy;
  if (po.has_token_compressor()) {
    absl::Status st = ValidateTokenCompressorName("policy.token_compressor", po.token_compressor());
    if (!st.ok()) return st;
    pol.token_compressor = po.token_compressor();
  } else if (!options_.default_token_compressor.empty()) {
    pol.token_compressor = options_.default_token_compressor;
  }
  if (po.has_keep_ratio()) {
    if (!(po.keep_ratio() > 0 && po.keep_ratio() <= 1)) {
      return Invalid("policy.keep_ratio", absl::StrCat(po.keep_ratio(), " must be in (0, 1]"));
    }
    pol.keep_ratio = po.keep_ratio();
  } else if (options_.default_keep_ratio > 0) {
    pol.keep_ratio = static_cast<float>(options_.default_keep_ratio);
  }
  if (po.has_expert_predictor()) {
    absl::Status st = ValidateExpertPredictorName("policy.expert_predictor", po.expert_predictor());
    if (!st.ok()) return st;
    pol.expert_predictor = po.expert_predictor();
  } else if (!options_.default_expert_predictor.empty()) {
    pol.expert_predictor = options_.default_expert_predictor;
  }
  // Expert skipping: the server's default is the engine's (EngineOptions::skipping).
  if (po.has_expert_skipping()) {
    absl::Status st = ValidateExpertSkippingName("policy.expert_skipping", po.expert_skipping());
    if (!st.ok()) return st;
    pol.expert_skipping = po.expert_skipping();
  }
  for (const auto& [field, has, value, out] :
       {std::tuple{"policy.skip_tau_text", po.has_skip_tau_text(), po.skip_tau_text(),
                   &pol.skip_tau_text},
        std::tuple{"policy.skip_tau_visual", po.has_skip_tau_visual(), po.skip_tau_visual(),
                   &pol.skip_tau_visual}}) {
    if (!has) continue;
    if (!(std::isfinite(value) && value >= 0)) {
      return Invalid(field, absl::StrCat(value, " must be a finite threshold >= 0"));
    }
    *out = value;
  }
  // Miss policy: the server's default is the engine's (EngineOptions::miss_policy).
  if (po.has_miss_policy()) {
    absl::Status st = ValidateMissPolicyName("policy.miss_policy", po.miss_policy());
    if (!st.ok()) return st;
    pol.miss_policy = po.miss_policy();
  }
  if (po.has_commit_threshold()) {
    if (!(std::isfinite(po.commit_threshold()) && po.commit_threshold() >= 0)) {
      return Invalid("policy.commit_threshold",
                     absl::StrCat(po.commit_threshold(), " must be a finite threshold >= 0"));
    }
    pol.commit_threshold = po.commit_threshold();
  }
  if (po.has_commit_owa_alpha1()) {
    if (!(po.commit_owa_alpha1() >= 0 && po.commit_owa_alpha1() <= kMaxOwaAlpha)) {
      return Invalid("policy.commit_owa_alpha1",
                     absl::StrCat(po.commit_owa_alpha1(), " must be in [0, ", kMaxOwaAlpha,
                                  "] (0 = OWA off)"));
    }
    pol.commit_owa_alpha1 = po.commit_owa_alpha1();
  }
  if (po.has_commit_owa_alpha2()) {
    if (!(po.commit_owa_alpha2() > 0 && po.commit_owa_alpha2() <= kMaxOwaAlpha)) {
      return Invalid("policy.commit_owa_alpha2",
                     absl::StrCat(po.commit_owa_alpha2(), " must be in (0, ", kMaxOwaAlpha, "]"));
    }
    pol.commit_owa_alpha2 = po.commit_owa_alpha2();
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PreparedRequest>> RequestValidator::Complete(
    ValidatedRequest validated, ImageDecoder& decoder, Engine& engine, double* decode_seconds,
    const std::function<absl::Status()>& cancel_status) const {
  GenerateRequest req = std::move(validated.request);
  if (!validated.image_data.empty()) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<RgbImage>> images =
        decoder.DecodeAll(validated.image_data, cancel_status);
    if (decode_seconds != nullptr) {
      *decode_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (!images.ok()) return images.status();
    req.images = std::move(*images);
  }
  if (cancel_status) VISMOE_RETURN_IF_ERROR(cancel_status());
  absl::StatusOr<std::unique_ptr<PreparedRequest>> prepared = engine.Prepare(req);
  if (!prepared.ok()) return prepared.status();
  const int prompt_tokens = (*prepared)->prompt_tokens();
  if (prompt_tokens > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt is ", prompt_tokens,
                                                   " tokens, over the limit of ",
                                                   options_.max_prompt_tokens, " tokens"));
  }
  const int context = engine.info().max_context_tokens;
  if (context > 0 && !validated.up_to_context &&
      prompt_tokens + req.sampling.max_new_tokens > context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt_tokens, " tokens) + sampling.max_new_tokens (",
        req.sampling.max_new_tokens, ") exceeds the model context of ", context, " tokens"));
  }
  return prepared;
}

}  // namespace vismoe::server
