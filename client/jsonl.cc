#include "client/jsonl.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vismoe::client {

absl::Status RecordError(const std::string& source, int line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", message));
}

absl::StatusOr<std::vector<JsonlRecord>> ParseJsonl(absl::string_view content,
                                                    const std::string& source_name) {
  std::vector<JsonlRecord> records;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    nlohmann::json value = nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr,
                                                 /*allow_exceptions=*/false);
    if (value.is_discarded()) return RecordError(source_name, line_number, "invalid JSON");
    if (!value.is_object()) {
      return RecordError(source_name, line_number,
                         absl::StrCat("expected a JSON object, got ", value.type_name()));
    }
    records.push_back({line_number, std::move(value)});
  }
  if (records.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": no records (file is empty)"));
  }
  return records;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::move(buf).str();
}

absl::StatusOr<std::vector<JsonlRecord>> ReadJsonlFile(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFileToString(path);
  if (!content.ok()) return content.status();
  return ParseJsonl(*content, path);
}

std::string ResolvePath(const std::string& path, const std::string& relative_to_file) {
  std::filesystem::path p(path);
  if (p.is_absolute() || relative_to_file.empty()) return path;
  return (std::filesystem::path(relative_to_file).parent_path() / p).lexically_normal().string();
}

}  // namespace vismoe::client
