// Incremental detokenisation for streaming: turns generated ids into text
// deltas without ever emitting part of a UTF-8 character. The concatenation of
// every Push() result and the final Flush() equals Tokenizer::Decode of all
// pushed ids (invalid byte sequences become U+FFFD exactly as Decode does).
// Not thread-safe (one per sequence); borrows the tokenizer, which must
// outlive it.
#ifndef VISMOE_ENGINE_MODEL_STREAM_DECODER_H_
#define VISMOE_ENGINE_MODEL_STREAM_DECODER_H_

#include <string>

#include "engine/model/tokenizer.h"

namespace vismoe {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  StreamDecoder(const StreamDecoder&) = delete;
  StreamDecoder& operator=(const StreamDecoder&) = delete;

  // Adds one token; returns the text it completes (often empty while a
  // multi-byte character is still split across tokens).
  std::string Push(int id);

  // Returns what is left (a truncated character becomes U+FFFD) and resets.
  std::string Flush();

  // Bytes held back waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // raw bytes not yet emitted: a truncated UTF-8 prefix
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_STREAM_DECODER_H_
