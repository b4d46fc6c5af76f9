#include "engine/bench/device_op_times.h"

#include "absl/strings/str_format.h"

namespace vismoe::bench {

void BenchSink::OnDeviceStep(int64_t rows, double seconds, absl::Span<const DeviceOpTime> ops) {
  std::lock_guard<std::mutex> lock(mu_);
  Steps& s = rows == 1 ? decode_ : other_;
  ++s.steps;
  s.seconds += seconds;
  for (const DeviceOpTime& op : ops) s.families[std::string(op.family)] += op.seconds;
}

nlohmann::json BenchSink::Json() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto one = [](const Steps& s) {
    nlohmann::json ms = nlohmann::json::object();
    for (const auto& [name, sec] : s.families) ms[name] = 1e3 * sec / static_cast<double>(s.steps);
    return nlohmann::json{{"steps", s.steps},
                          {"step_ms", 1e3 * s.seconds / static_cast<double>(s.steps)},
                          {"ms", ms}};
  };
  if (decode_.steps == 0 && other_.steps == 0) return nullptr;
  nlohmann::json j = nlohmann::json::object();
  if (decode_.steps > 0) j["decode"] = one(decode_);
  if (other_.steps > 0) j["other"] = one(other_);
  return j;
}

std::string BenchSink::Table() const {
  const nlohmann::json j = Json();
  if (j.is_null()) return "";
  std::string out;
  for (const char* kind : {"decode", "other"}) {
    if (!j.contains(kind)) continue;
    const nlohmann::json& s = j[kind];
    absl::StrAppendFormat(&out, "device time per %s step (%d steps): %.3f ms\n",
                          std::string(kind) == "decode" ? "one-row decode" : "other",
                          s["steps"].get<int64_t>(), s["step_ms"].get<double>());
    for (const auto& [name, ms] : s["ms"].items()) {
      absl::StrAppendFormat(&out, "  %-10s %8.3f ms  %5.1f%%\n", name, ms.get<double>(),
                            100.0 * ms.get<double>() / s["step_ms"].get<double>());
    }
  }
  return out;
}

}  // namespace vismoe::bench
