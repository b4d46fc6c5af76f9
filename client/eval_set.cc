#include "client/eval_set.h"

#include "absl/strings/str_cat.h"

namespace vismoe::client {
namespace {

absl::StatusOr<EvalItem> ParseOne(const JsonlRecord& record, const std::string& source) {
  const nlohmann::json& v = record.value;
  auto error = [&](const std::string& message) {
    return RecordError(source, record.line, message);
  };
  auto string_field = [&](const char* name, bool required, std::string* out) -> absl::Status {
    auto it = v.find(name);
    if (it == v.end()) {
      return required ? error(absl::StrCat("\"", name, "\" is required")) : absl::OkStatus();
    }
    if (!it->is_string()) {
      // Numeric answers ("answer": 3) are common in VQA dumps: accept them as text.
      if (it->is_number()) {
        *out = it->dump();
        return absl::OkStatus();
      }
      return error(absl::StrCat("\"", name, "\" must be a string, got ", it->type_name()));
    }
    *out = it->get<std::string>();
    return absl::OkStatus();
  };
  EvalItem item;
  item.line = record.line;
  std::string image_path;
  if (absl::Status s = string_field("question", true, &item.question); !s.ok()) return s;
  if (absl::Status s = string_field("answer", true, &item.answer); !s.ok()) return s;
  if (absl::Status s = string_field("category", false, &item.category); !s.ok()) return s;
  if (absl::Status s = string_field("image", false, &image_path); !s.ok()) return s;
  if (item.category.empty()) item.category = "default";
  if (auto choices = v.find("choices"); choices != v.end() && !choices->is_null()) {
    if (!choices->is_array()) return error("\"choices\" must be an array of strings");
    if (choices->size() > 26) return error("\"choices\" has more than 26 options");
    for (const nlohmann::json& c : *choices) {
      if (!c.is_string()) return error("\"choices\" entries must be strings");
      item.choices.push_back(c.get<std::string>());
    }
  }
  if (!image_path.empty()) {
    absl::StatusOr<ImageInput> image = ReadImageFile(ResolvePath(image_path, source));
    if (!image.ok()) return error(std::string(image.status().message()));
    item.image = *std::move(image);
  }
  return item;
}

}  // namespace

absl::StatusOr<std::vector<EvalItem>> ParseEvalRecords(const std::vector<JsonlRecord>& records,
                                                       const std::string& source) {
  std::vector<EvalItem> items;
  items.reserve(records.size());
  for (const JsonlRecord& record : records) {
    absl::StatusOr<EvalItem> item = ParseOne(record, source);
    if (!item.ok()) return item.status();
    items.push_back(*std::move(item));
  }
  return items;
}

absl::StatusOr<std::vector<EvalItem>> LoadEvalSet(const std::string& path) {
  absl::StatusOr<std::vector<JsonlRecord>> records = ReadJsonlFile(path);
  if (!records.ok()) return records.status();
  return ParseEvalRecords(*records, path);
}

std::string BuildEvalPrompt(const EvalItem& item) {
  std::string prompt = item.question;
  if (!item.choices.empty()) {
    for (size_t i = 0; i < item.choices.size(); ++i) {
      absl::StrAppend(&prompt, "\n", std::string(1, static_cast<char>('A' + i)), ". ",
                      item.choices[i]);
    }
    absl::StrAppend(&prompt, "\nAnswer with the option's letter from the given choices directly.");
  } else {
    absl::StrAppend(&prompt, "\nAnswer the question using a single word or phrase.");
  }
  return prompt;
}

}  // namespace vismoe::client
