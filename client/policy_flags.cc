#include "client/policy_flags.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace vismoe::client {

vismoe::v1::PolicyOverrides MakePolicyOverrides(const std::string& token_compressor,
                                                double keep_ratio,
                                                const std::string& expert_predictor) {
  vismoe::v1::PolicyOverrides policy;
  if (!token_compressor.empty()) policy.set_token_compressor(token_compressor);
  if (keep_ratio >= 0) policy.set_keep_ratio(static_cast<float>(keep_ratio));
  if (!expert_predictor.empty()) policy.set_expert_predictor(expert_predictor);
  return policy;
}

void AddSkippingOverrides(const std::string& kind, double tau_text, double tau_visual,
                          vismoe::v1::PolicyOverrides* policy) {
  if (!kind.empty()) policy->set_expert_skipping(kind);
  if (tau_text >= 0) policy->set_skip_tau_text(static_cast<float>(tau_text));
  if (tau_visual >= 0) policy->set_skip_tau_visual(static_cast<float>(tau_visual));
}

void AddMissPolicyOverrides(const std::string& miss_policy, double commit_threshold,
                            double owa_alpha1, double owa_alpha2,
                            vismoe::v1::PolicyOverrides* policy) {
  if (!miss_policy.empty()) policy->set_miss_policy(miss_policy);
  if (commit_threshold >= 0) policy->set_commit_threshold(static_cast<float>(commit_threshold));
  if (owa_alpha1 >= 0) policy->set_commit_owa_alpha1(static_cast<float>(owa_alpha1));
  if (owa_alpha2 >= 0) policy->set_commit_owa_alpha2(static_cast<float>(owa_alpha2));
}

nlohmann::json PolicyToJson(const vismoe::v1::PolicyOverrides& policy) {
  nlohmann::json j = nlohmann::json::object();
  if (policy.has_token_compressor()) j["token_compressor"] = policy.token_compressor();
  if (policy.has_keep_ratio()) j["keep_ratio"] = policy.keep_ratio();
  if (policy.has_expert_predictor()) j["expert_predictor"] = policy.expert_predictor();
  if (policy.has_expert_skipping()) j["expert_skipping"] = policy.expert_skipping();
  if (policy.has_skip_tau_text()) j["skip_tau_text"] = policy.skip_tau_text();
  if (policy.has_skip_tau_visual()) j["skip_tau_visual"] = policy.skip_tau_visual();
  if (policy.has_miss_policy()) j["miss_policy"] = policy.miss_policy();
  if (policy.has_commit_threshold()) j["commit_threshold"] = policy.commit_threshold();
  if (policy.has_commit_owa_alpha1()) j["commit_owa_alpha1"] = policy.commit_owa_alpha1();
  if (policy.has_commit_owa_alpha2()) j["commit_owa_alpha2"] = policy.commit_owa_alpha2();
  return j;
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot open ", path, " for writing"));
  out << value.dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace vismoe::client
