#include "engine/arch/text_decoder.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace vismoe {
namespace {

constexpr char kEntryPayload[] = "type.vismoe.dev/batch-entry";

}  // namespace

absl::Status EntryError(size_t entry, absl::Status status) {
  status.SetPayload(kEntryPayload, absl::Cord(std::to_string(entry)));
  return status;
}

std::optional<size_t> FailedEntry(const absl::Status& status) {
  const auto payload = status.GetPayload(kEntryPayload);  // absl::optional in this Abseil
  size_t entry = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &entry)) {
    return std::nullopt;
  }
  return entry;
}

absl::Status WithoutEntry(absl::Status status) {
  status.ErasePayload(kEntryPayload);
  return status;
}

}  // namespace vismoe
