#include "client/request_builder.h"

namespace vismoe::client {

vismoe::v1::GenerateRequest BuildGenerateRequest(const PromptSpec& spec,
                                                 const vismoe::v1::SamplingParams& sampling,
                                                 const vismoe::v1::PolicyOverrides& policy,
                                                 const std::string& request_id) {
  vismoe::v1::GenerateRequest request;
  request.set_request_id(request_id);
  if (!spec.system.empty()) {
    vismoe::v1::ChatMessage* system = request.add_messages();
    system->set_role("system");
    system->add_parts()->set_text(spec.system);
  }
  vismoe::v1::ChatMessage* user = request.add_messages();
  user->set_role("user");
  for (const ImageInput& image : spec.images) {
    vismoe::v1::ImagePart* part = user->add_parts()->mutable_image();
    part->set_data(image.bytes);
    part->set_media_type(image.media_type);
  }
  if (!spec.prompt.empty()) user->add_parts()->set_text(spec.prompt);
  *request.mutable_sampling() = sampling;
  if (spec.max_new_tokens > 0) request.mutable_sampling()->set_max_new_tokens(spec.max_new_tokens);
  *request.mutable_policy() = policy;
  return request;
}

}  // namespace vismoe::client
