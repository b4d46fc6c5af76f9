#include "engine/core/policy_names.h"

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

template <typename Kind>
struct Entry {
  Kind kind;
  const char* name;
  bool alias;  // accepted, never listed or printed
};

constexpr Entry<CompressorKind> kCompressors[] = {
    {CompressorKind::kNone, "none", false},
    {CompressorKind::kRandom, "random", false},
    {CompressorKind::kSaliency, "saliency", false},
    {CompressorKind::kAffinity, "affinity", false},
};
constexpr Entry<PredictorKind> kPredictors[] = {
    {PredictorKind::kNone, "none", false},
    {PredictorKind::kHistory, "history", false},
    {PredictorKind::kRouterLookahead, "router-lookahead", false},
    {PredictorKind::kMlpLookahead, "mlp-lookahead", false},
};
constexpr Entry<EvictionPolicy> kEvictions[] = {
    {EvictionPolicy::kLru, "lru", false},
    {EvictionPolicy::kLfu, "lfu", false},
    {EvictionPolicy::kGuardedPriority, "guarded", false},
    {EvictionPolicy::kGuardedPriority, "guarded-priority", true},
};
constexpr Entry<SkipKind> kSkips[] = {
    {SkipKind::kNone, "none", false},
    {SkipKind::kDualThreshold, "dual-threshold", false},
};
constexpr Entry<PreloadKind> kPreloads[] = {
    {PreloadKind::kNone, "none", false},
    {PreloadKind::kPrefillRouting, "prefill-routing", false},
};
constexpr Entry<MissPolicy> kMissPolicies[] = {
    {MissPolicy::kFetch, "fetch", false},
    {MissPolicy::kCommit, "commit", false},
    {MissPolicy::kCpu, "cpu", false},
};
constexpr Entry<HostStoreMode> kHostStoreModes[] = {
    {HostStoreMode::kAuto, "auto", false},
    {HostStoreMode::kMapped, "mapped", false},
    {HostStoreMode::kPacked, "packed", false},
};

template <typename Kind>
struct Table;
template <>
struct Table<CompressorKind> {
  static constexpr const auto& entries = kCompressors;
};
template <>
struct Table<PredictorKind> {
  static constexpr const auto& entries = kPredictors;
};
template <>
struct Table<EvictionPolicy> {
  static constexpr const auto& entries = kEvictions;
};
template <>
struct Table<SkipKind> {
  static constexpr const auto& entries = kSkips;
};
template <>
struct Table<PreloadKind> {
  static constexpr const auto& entries = kPreloads;
};
template <>
struct Table<MissPolicy> {
  static constexpr const auto& entries = kMissPolicies;
};
template <>
struct Table<HostStoreMode> {
  static constexpr const auto& entries = kHostStoreModes;
};

template <typename Kind>
const char* NameOf(Kind kind) {
  for (const auto& e : Table<Kind>::entries) {
    if (e.kind == kind && !e.alias) return e.name;
  }
  return "?";
}

}  // namespace

template <typename Kind>
std::optional<Kind> PolicyFromName(absl::string_view name) {
  for (const auto& e : Table<Kind>::entries) {
    if (name == e.name) return e.kind;
  }
  return std::nullopt;
}

template <typename Kind>
std::string PolicyNames(absl::string_view separator) {
  std::string out;
  for (const auto& e : Table<Kind>::entries) {
    if (e.alias) continue;
    absl::StrAppend(&out, out.empty() ? "" : separator, e.name);
  }
  return out;
}

const char* PolicyName(CompressorKind kind) { return NameOf(kind); }
const char* PolicyName(PredictorKind kind) { return NameOf(kind); }
const char* PolicyName(EvictionPolicy kind) { return NameOf(kind); }
const char* PolicyName(SkipKind kind) { return NameOf(kind); }
const char* PolicyName(PreloadKind kind) { return NameOf(kind); }
const char* PolicyName(MissPolicy kind) { return NameOf(kind); }
const char* PolicyName(HostStoreMode kind) { return NameOf(kind); }

template std::optional<CompressorKind> PolicyFromName<CompressorKind>(absl::string_view);
template std::optional<PredictorKind> PolicyFromName<PredictorKind>(absl::string_view);
template std::optional<EvictionPolicy> PolicyFromName<EvictionPolicy>(absl::string_view);
template std::string PolicyNames<CompressorKind>(absl::string_view);
template std::string PolicyNames<PredictorKind>(absl::string_view);
template std::string PolicyNames<EvictionPolicy>(absl::string_view);
template std::optional<SkipKind> PolicyFromName<SkipKind>(absl::string_view);
template std::string PolicyNames<SkipKind>(absl::string_view);
template std::optional<PreloadKind> PolicyFromName<PreloadKind>(absl::string_view);
template std::string PolicyNames<PreloadKind>(absl::string_view);
template std::optional<MissPolicy> PolicyFromName<MissPolicy>(absl::string_view);
template std::string PolicyNames<MissPolicy>(absl::string_view);
template std::optional<HostStoreMode> PolicyFromName<HostStoreMode>(absl::string_view);
template std::string PolicyNames<HostStoreMode>(absl::string_view);

}  // namespace vismoe
