// RequestValidator: checks a v1::GenerateRequest and turns it into the
// engine's GenerateRequest. Validation is split in two:
//   Validate()  cheap, on the gRPC thread: request id, structure, text bytes,
//               sampling ranges, policy names, image count, encoded size and
//               header pixel limits.
//   Complete()  on an engine worker: decodes the images, prepares the request
//               with Engine::Prepare (template, tokenizer, image
//               preprocessing: done once, Generate reuses it) and checks the
//               prompt length.
// Every failure is InvalidArgument with a message naming the field and value.
//
// Thread safety: const methods, safe from any thread.
// Ownership: borrows the ImageDecoder (for limits), which must outlive it.
#ifndef VISMOE_SERVER_REQUEST_VALIDATOR_H_
#define VISMOE_SERVER_REQUEST_VALIDATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/api/engine.h"
#include "engine/api/request.h"
#include "server/image_decoder.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::server {

// A request that passed Validate(): the engine request without pixels, and
// views of the encoded images (into the proto, which must outlive this).
struct ValidatedRequest {
  GenerateRequest request;                    // images empty until Complete()
  std::vector<absl::string_view> image_data;  // by ContentPart::image_index
  // max_new_tokens is a ceiling the client did not ask for (the HTTP API's
  // default): a prompt that leaves less room in the context is not refused;
  // generation stops at the context's end (finish reason length).
  bool up_to_context = false;
};

class RequestValidator {
 public:
  struct Options {
    int max_images = 8;
    int max_new_tokens_limit = 4096;
    int default_max_new_tokens = 128;  // when the request says 0
    int max_stop_strings = 16;
    int max_prompt_tokens = 16384;
    // Bytes of all text parts together, checked in Validate() so that an
    // oversized text is rejected before it is tokenized.
    int64_t max_prompt_bytes = 1 << 20;
    size_t max_request_id_bytes = 128;
    size_t max_stop_string_bytes = 256;
    // GenerateRequest::allow_special_tokens_in_text of every request.
    bool allow_special_tokens_in_text = false;
    // Server default policies applied when the request leaves them unset.
    std::string default_token_compressor;  // "" = engine default
    double default_keep_ratio = 0;         // 0 = engine default
    std::string default_expert_predictor;  // "" = engine default
  };

  // REQUIRES: decoder != nullptr and outlives the validator.
  RequestValidator(const Options& options, const ImageDecoder* decoder);

  absl::StatusOr<ValidatedRequest> Validate(const v1::GenerateRequest& proto) const;

  // Decodes the images, prepares the request on `engine` and checks the
  // prompt length. `decode_seconds` (optional) receives the wall time spent
  // decoding. `cancel_status` (optional) is polled before each image and
  // before Engine::Prepare; a non-OK answer is returned at once.
  absl::StatusOr<std::unique_ptr<PreparedRequest>> Complete(
      ValidatedRequest validated, ImageDecoder& decoder, Engine& engine, double* decode_seconds,
      const std::function<absl::Status()>& cancel_status = {}) const;

  const Options& options() const { return options_; }

 private:
  Options options_;
  const ImageDecoder* decoder_;
};

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_REQUEST_VALIDATOR_H_
