// Line-oriented JSON (JSONL) reading for request sets and evaluation sets.
#ifndef VISMOE_CLIENT_JSONL_H_
#define VISMOE_CLIENT_JSONL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace vismoe::client {

// One parsed JSONL record and where it came from (for error messages).
struct JsonlRecord {
  int line = 0;  // 1-based line number in the source
  nlohmann::json value;
};

// Parses `content`: one JSON object per line; blank lines are skipped. Errors
// are InvalidArgument and read "<source_name>:<line>: ..." for a line that is
// not valid JSON or not an object, or when there is no record at all.
absl::StatusOr<std::vector<JsonlRecord>> ParseJsonl(absl::string_view content,
                                                    const std::string& source_name);

// Reads and parses the file at `path` (NotFound when it cannot be read).
absl::StatusOr<std::vector<JsonlRecord>> ReadJsonlFile(const std::string& path);

// Reads a whole file into memory; NotFound naming the path on failure.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// "<source>:<line>: <message>" as InvalidArgument; used by record parsers.
absl::Status RecordError(const std::string& source, int line, const std::string& message);

// Resolves `path` against the directory of `relative_to_file` unless it is
// absolute (data sets name images relative to their own location).
std::string ResolvePath(const std::string& path, const std::string& relative_to_file);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_JSONL_H_
