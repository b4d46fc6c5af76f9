#include "engine/model/tokenizer.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/byte_level.h"
#include "engine/model/utf8.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

// Only the ByteLevel decoder (alone or as the sole step of a Sequence) is
// supported: it is the inverse of the ByteLevel pre-tokeniser.
absl::Status CheckDecoder(const nlohmann::json& spec) {
  const nlohmann::json* d = &spec;
  if (d->is_object() && d->value("type", std::string()) == "Sequence") {
    const auto it = d->find("decoders");
    if (it == d->end() || !it->is_array() || it->size() != 1) {
      return absl::UnimplementedError(
          "tokenizer.json: decoder Sequence must hold exactly one ByteLevel decoder");
    }
    d = &(*it)[0];
  }
  if (!d->is_object() || d->value("type", std::string()) != "ByteLevel") {
    return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported decoder ",
                                                 d->dump().substr(0, 80),
                                                 " (only ByteLevel is supported)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/tokenizer.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return FromJsonText(buffer.str(), path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonText(absl::string_view json_text,
                                                                   const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  auto with_source = [&source](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(source, ": ", s.message()));
  };
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());
  // Field accessors below check types first; this guards what slips through
  // (nlohmann throws on type mismatches), so no exception leaves the module.
  try {
    auto normalizer = Normalizer::FromJson(j.value("normalizer", nlohmann::json()));
    if (!normalizer.ok()) return with_source(normalizer.status());
    tok->normalizer_ = *std::move(normalizer);

    auto pre = PreTokenizer::FromJson(j.value("pre_tokenizer", nlohmann::json()));
    if (!pre.ok()) return with_source(pre.status());
    tok->pre_tokenizer_ = *std::move(pre);

    if (!j.contains("model")) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": tokenizer.json has no \"model\""));
    }
    auto model = BpeModel::FromJson(j["model"]);
    if (!model.ok()) return with_source(model.status());
    tok->model_ = *std::move(model);

    auto added =
        AddedVocabulary::FromJson(j.value("added_tokens", nlohmann::json()), tok->normalizer_);
    if (!added.ok()) return with_source(added.status());
    tok->added_ = *std::move(added);

    if (auto s = CheckDecoder(j.value("decoder", nlohmann::json())); !s.ok()) {
      return with_source(s);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unexpected value type in tokenizer.json: ", e.what()));
  }

  int size = tok->model_->size();
  for (const AddedToken& t : tok->added_.tokens()) size = std::max(size, t.id + 1);
  tok->token_bytes_.resize(static_cast<size_t>(size));
  tok->special_.assign(static_cast<size_t>(size), false);
  for (int id = 0; id < size; ++id) {
    const AddedToken* added = tok->added_.FindById(id);
    const std::string& text = added != nullptr ? added->content : tok->model_->IdToToken(id);
    // ByteLevel decoder: a token whose characters are all in the byte table
    // becomes those bytes; any other token is taken as its own UTF-8 text.
    if (!byte_level::Decode(text, &tok->token_bytes_[id])) tok->token_bytes_[id] = text;
    tok->special_[id] = added != nullptr && added->special;
  }
  return tok;
}

std::vector<int> Tokenizer::Encode(absl::string_view text, AddedTokens added) const {
  std::string repaired;
  if (!utf8::IsValid(text)) {
    repaired = utf8::Lossy(text);
    text = repaired;
  }
  std::vector<int> ids;
  if (added == AddedTokens::kIgnore) {
    EncodePlain(normalizer_.Apply(text), &ids);
    return ids;
  }
  std::vector<AddedVocabulary::Segment> raw;
  added_.Split(text, /*normalized_pass=*/false, &raw);
  for (const auto& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    EncodeNormalized(normalizer_.Apply(text.substr(seg.begin, seg.end - seg.begin)), &ids);
  }
  return ids;
}

void Tokenizer::EncodeNormalized(absl::string_view norm, std::vector<int>* ids) const {
  std::vector<AddedVocabulary::Segment> pieces;
  added_.Split(norm, /*normalized_pass=*/true, &pieces);
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      ids->push_back(piece.id);
    } else {
      EncodePlain(norm.substr(piece.begin, piece.end - piece.begin), ids);
    }
  }
}

std::vector<int> Tokenizer::EncodeMarked(
    absl::string_view text, absl::Span<const std::pair<size_t, size_t>> untrusted) const {
  const auto touches_untrusted = [&](size_t b, size_t e) {
    for (const auto& [ub, ue] : untrusted) {
      if (ub < e && b < ue) return true;
    }
    return false;
  };
  std::vector<AddedVocabulary::Segment> raw;
  added_.Split(text, /*normalized_pass=*/false, &raw);
  // Added tokens over untrusted bytes fall back to text; neighbouring text merges.
  std::vector<AddedVocabulary::Segment> merged;
  for (AddedVocabulary::Segment seg : raw) {
    if (seg.id >= 0 && touches_untrusted(seg.begin, seg.end)) seg.id = -1;
    if (seg.id < 0 && !merged.empty() && merged.back().id < 0 && merged.back().end == seg.begin) {
      merged.back().end = seg.end;
    } else {
      merged.push_back(seg);
    }
  }
  std::vector<int> ids;
  for (const auto& seg : merged) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string norm = normalizer_.Apply(text.substr(seg.begin, seg.end - seg.begin));
    if (touches_untrusted(seg.begin, seg.end)) {
      EncodePlain(norm, &ids);
    } else {
      EncodeNormalized(norm, &ids);
    }
  }
  return ids;
}

void Tokenizer::EncodePlain(absl::string_view text, std::vector<int>* ids) const {
  std::vector<std::string> pieces;
  pre_tokenizer_->Split(text, &pieces);
  for (const std::string& piece : pieces) model_->EncodeWord(piece, ids);
}

std::string Tokenizer::Decode(absl::Span<const int> ids, bool skip_special) const {
  std::string bytes;
  for (const int id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && special_[id]) continue;
    bytes += token_bytes_[id];
  }
  return utf8::Lossy(bytes);
}

const std::string& Tokenizer::TokenBytes(int id) const {
  static const std::string* const kEmpty = new std::string();
  return id >= 0 && id < vocab_size() ? token_bytes_[id] : *kEmpty;
}

int Tokenizer::TokenToId(absl::string_view token) const {
  if (const AddedToken* t = added_.FindByContent(token)) return t->id;
  return model_->TokenToId(token);
}

std::string Tokenizer::IdToToken(int id) const {
  if (const AddedToken* t = added_.FindById(id)) return t->content;
  return model_->IdToToken(id);
}

bool Tokenizer::IsSpecial(int id) const { return id >= 0 && id < vocab_size() && special_[id]; }

}  // namespace vismoe
