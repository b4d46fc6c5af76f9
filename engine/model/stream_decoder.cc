#include "engine/model/stream_decoder.h"

#include "engine/model/utf8.h"

namespace vismoe {

std::string StreamDecoder::Push(int id) {
  if (skip_special_ && tokenizer_->IsSpecial(id)) return "";
  pending_ += tokenizer_->TokenBytes(id);
  // Emit everything up to a trailing, still-completable prefix. Lossy UTF-8
  // decoding is prefix-stable, so emitting early never changes the total.
  std::string out;
  size_t pos = 0;
  size_t emitted = 0;
  while (pos < pending_.size()) {
    const utf8::Unit u = utf8::ScanUnit(pending_, pos);
    if (u.kind == utf8::Unit::Kind::kIncomplete) break;
    pos += u.length;
    if (u.kind == utf8::Unit::Kind::kInvalid) {
      out.append(pending_, emitted, pos - u.length - emitted);
      out.append(utf8::kReplacement.data(), utf8::kReplacement.size());
      emitted = pos;
    }
  }
  out.append(pending_, emitted, pos - emitted);
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = utf8::Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace vismoe
