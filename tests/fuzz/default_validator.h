// The RequestValidator of a server with default options, shared by the fuzz
// targets of the request paths (request_fuzzer, openai_request_fuzzer).
#ifndef VISMOE_TESTS_FUZZ_DEFAULT_VALIDATOR_H_
#define VISMOE_TESTS_FUZZ_DEFAULT_VALIDATOR_H_

#include "server/image_decoder.h"
#include "server/request_validator.h"

namespace vismoe::server {

inline const RequestValidator& DefaultValidator() {
  static const RequestValidator* const validator = [] {
    ImageDecoder::Options decoder_options;
    decoder_options.num_threads = 1;
    static const ImageDecoder* const decoder = ImageDecoder::Create(decoder_options)->release();
    return new RequestValidator(RequestValidator::Options(), decoder);
  }();
  return *validator;
}

}  // namespace vismoe::server

#endif  // VISMOE_TESTS_FUZZ_DEFAULT_VALIDATOR_H_
