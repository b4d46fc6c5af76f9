#include "client/cli_output.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vismoe::client {
namespace {

std::string Percent(uint64_t num, uint64_t den) {
  if (den == 0) return "n/a";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(num) / static_cast<double>(den));
}

}  // namespace

std::string FinishReasonName(vismoe::v1::FinishReason reason) {
  switch (reason) {
    case vismoe::v1::FINISH_REASON_EOS:
      return "eos";
    case vismoe::v1::FINISH_REASON_LENGTH:
      return "length";
    case vismoe::v1::FINISH_REASON_STOP_STRING:
      return "stop_string";
    case vismoe::v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

std::string FormatStats(const GenerateOutcome& outcome) {
  const vismoe::v1::FinalResult& f = outcome.final_result;
  const vismoe::v1::Usage& u = f.usage();
  const vismoe::v1::Timings& t = f.timings();
  const vismoe::v1::OffloadStats& o = f.offload();
  std::string out;
  absl::StrAppendFormat(&out, "finish    %s  (request %s)\n", FinishReasonName(f.finish_reason()),
                        f.request_id());
  absl::StrAppendFormat(
      &out, "usage     prompt %d tokens (visual %d -> %d), completion %d tokens\n",
      u.prompt_tokens(), u.visual_tokens_before(), u.visual_tokens_after(), u.completion_tokens());
  absl::StrAppendFormat(
      &out, "timings   server: queue %.3f s, TTFT %.3f s, TPOT %.1f ms, total %.3f s\n",
      t.queue_seconds(), t.ttft_seconds(), t.tpot_seconds() * 1e3, t.total_seconds());
  absl::StrAppendFormat(&out, "          client: TTFT %s, total %.3f s\n",
                        outcome.ttft_seconds >= 0 ? absl::StrFormat("%.3f s", outcome.ttft_seconds)
                                                  : std::string("n/a"),
                        outcome.total_seconds);
  absl::StrAppendFormat(&out, "offload   cache hits %d/%d (%s), Hot Recall %d/%d (%s)\n",
                        o.cache_hits(), o.cache_queries(),
                        Percent(o.cache_hits(), o.cache_queries()), o.prefetch_recalled(),
                        o.prefetch_needed(), Percent(o.prefetch_recalled(), o.prefetch_needed()));
  absl::StrAppendFormat(
      &out, "          prefetch issued %d used %d, %.2f MiB host->device, stall %.3f s\n",
      o.prefetch_issued(), o.prefetch_used(), static_cast<double>(o.bytes_h2d()) / (1 << 20),
      o.stall_seconds());
  return out;
}

nlohmann::json OutcomeToJson(const GenerateOutcome& outcome) {
  const vismoe::v1::FinalResult& f = outcome.final_result;
  const vismoe::v1::Usage& u = f.usage();
  const vismoe::v1::Timings& t = f.timings();
  const vismoe::v1::OffloadStats& o = f.offload();
  return nlohmann::json{
      {"text", outcome.text},
      {"reasoning", outcome.reasoning},
      {"token_ids", outcome.token_ids},
      {"finish_reason", FinishReasonName(f.finish_reason())},
      {"request_id", f.request_id()},
      {"usage",
       {{"prompt_tokens", u.prompt_tokens()},
        {"visual_tokens_before", u.visual_tokens_before()},
        {"visual_tokens_after", u.visual_tokens_after()},
        {"completion_tokens", u.completion_tokens()}}},
      {"timings",
       {{"queue_seconds", t.queue_seconds()},
        {"ttft_seconds", t.ttft_seconds()},
        {"tpot_seconds", t.tpot_seconds()},
        {"total_seconds", t.total_seconds()},
        {"client_ttft_seconds", outcome.ttft_seconds >= 0 ? nlohmann::json(outcome.ttft_seconds)
                                                          : nlohmann::json(nullptr)},
        {"client_total_seconds", outcome.total_seconds}}},
      {"offload",
       {{"cache_queries", o.cache_queries()},
        {"cache_hits", o.cache_hits()},
        {"hit_ratio", o.hit_ratio()},
        {"prefetch_needed", o.prefetch_needed()},
        {"prefetch_recalled", o.prefetch_recalled()},
        {"hot_recall", o.hot_recall()},
        {"prefetch_issued", o.prefetch_issued()},
        {"prefetch_used", o.prefetch_used()},
        {"bytes_h2d", o.bytes_h2d()},
        {"stall_seconds", o.stall_seconds()}}},
  };
}

nlohmann::json ModelInfoToJson(const vismoe::v1::ModelInfo& info) {
  const vismoe::v1::ServerLimits& l = info.limits();
  return nlohmann::json{
      {"model_type", info.model_type()},
      {"model_path", info.model_path()},
      {"backend", info.backend()},
      {"num_layers", info.num_layers()},
      {"num_experts", info.num_experts()},
      {"experts_per_token", info.experts_per_token()},
      {"hidden_size", info.hidden_size()},
      {"vocab_size", info.vocab_size()},
      {"max_context_tokens", info.max_context_tokens()},
      {"has_vision", info.has_vision()},
      {"limits",
       {{"max_images", l.max_images()},
        {"max_image_bytes", l.max_image_bytes()},
        {"max_image_pixels", l.max_image_pixels()},
        {"max_prompt_tokens", l.max_prompt_tokens()},
        {"max_new_tokens", l.max_new_tokens()},
        {"max_message_bytes", l.max_message_bytes()}}},
  };
}

std::string FormatModelInfo(const vismoe::v1::ModelInfo& info) {
  std::string out;
  const nlohmann::json j = ModelInfoToJson(info);
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) continue;
    absl::StrAppendFormat(&out, "%-25s %s\n", key,
                          value.is_string() ? value.get<std::string>() : value.dump());
  }
  for (const auto& [key, value] : j["limits"].items()) {
    absl::StrAppendFormat(&out, "limits.%-18s %s\n", key, value.dump());
  }
  return out;
}

}  // namespace vismoe::client
