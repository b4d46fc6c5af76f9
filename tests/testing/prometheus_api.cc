#include "tests/testing/prometheus_api.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/testing/http_get.h"
#include "tests/testing/paths.h"

namespace vismoe::testing {

std::string SourceDir() { return FixturesDir() + "/../.."; }

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<nlohmann::json> PromApi(int port, const std::string& path) {
  absl::StatusOr<HttpResponse> resp = HttpGet("127.0.0.1", port, "/api/v1/" + path);
  if (!resp.ok()) return resp.status();
  nlohmann::json j = nlohmann::json::parse(resp->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InternalError(absl::StrCat("/api/v1/", path, ": HTTP ", resp->status,
                                            ", not JSON: ", resp->body.substr(0, 300)));
  }
  if (j.value("status", "") != "success") {
    return absl::InvalidArgumentError(absl::StrCat("/api/v1/", path, ": ", j.dump()));
  }
  return j["data"];
}

namespace {

absl::StatusOr<double> SampleValue(const nlohmann::json& pair) {
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_string()) {
    return absl::InternalError(absl::StrCat("bad sample ", pair.dump()));
  }
  const std::string s = pair[1].get<std::string>();
  if (s == "NaN") return std::nan("");
  double v = 0;
  if (s == "+Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (!absl::SimpleAtod(s, &v)) return absl::InternalError("bad sample value " + s);
  return v;
}

}  // namespace

absl::StatusOr<std::vector<PromSample>> PromQuery(int port, const std::string& promql) {
  absl::StatusOr<nlohmann::json> data = PromApi(port, "query?query=" + UrlEncode(promql));
  if (!data.ok()) return data.status();
  std::vector<PromSample> out;
  const std::string type = data->value("resultType", "");
  if (type == "scalar") {
    absl::StatusOr<double> v = SampleValue((*data)["result"]);
    if (!v.ok()) return v.status();
    out.push_back({nlohmann::json::object(), *v});
    return out;
  }
  if (type != "vector") {
    return absl::InternalError(absl::StrCat("query '", promql, "': unexpected result type ", type));
  }
  for (const nlohmann::json& r : (*data)["result"]) {
    absl::StatusOr<double> v = SampleValue(r["value"]);
    if (!v.ok()) return v.status();
    out.push_back({r["metric"], *v});
  }
  return out;
}

namespace {

void CollectExprs(const nlohmann::json& j, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "expr" && it.value().is_string()) {
        out->push_back(it.value().get<std::string>());
      } else {
        CollectExprs(it.value(), out);
      }
    }
  } else if (j.is_array()) {
    for (const nlohmann::json& e : j) CollectExprs(e, out);
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> DashboardExpressions(const std::string& dashboard_path,
                                                              absl::string_view window) {
  absl::StatusOr<std::string> text = ReadFileToString(dashboard_path);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(dashboard_path + " is not valid JSON");
  std::vector<std::string> raw;
  CollectExprs(j, &raw);
  std::vector<std::string> out;
  for (const std::string& e : raw) {
    std::string s = absl::StrReplaceAll(e, {{"${__rate_interval}", window},
                                            {"$__rate_interval", window},
                                            {"${__interval}", window},
                                            {"$__interval", window},
                                            {"${__range}", window},
                                            {"$__range", window}});
    if (s.find('$') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(dashboard_path, ": expression uses an unknown variable: ", e));
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> TopLevelOperands(absl::string_view q) {
  std::vector<std::string> parts;
  int depth = 0;
  bool quoted = false;
  size_t start = 0;
  auto is_word_at = [&](size_t i, absl::string_view w) {
    if (q.substr(i, w.size()) != w) return false;
    const bool left_ok =
        i == 0 || std::isspace(static_cast<unsigned char>(q[i - 1])) || q[i - 1] == ')';
    const size_t end = i + w.size();
    const bool right_ok =
        end == q.size() || std::isspace(static_cast<unsigned char>(q[end])) || q[end] == '(';
    return left_ok && right_ok;
  };
  auto cut = [&](size_t end, size_t next) {
    parts.emplace_back(absl::StripAsciiWhitespace(q.substr(start, end - start)));
    start = next;
  };
  for (size_t i = 0; i < q.size(); ++i) {
    const char c = q[i];
    if (quoted) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        quoted = false;
      continue;
    }
    if (c == '"') {
      quoted = true;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      ++depth;
      continue;
    }
    if (c == ')' || c == ']' || c == '}') {
      --depth;
      continue;
    }
    if (depth != 0) continue;
    const absl::string_view two = q.substr(i, 2);
    if (two == "==" || two == "!=" || two == ">=" || two == "<=") {
      cut(i, i + 2);
      ++i;
    } else if (c == '>' || c == '<') {
      cut(i, i + 1);
    } else if (is_word_at(i, "and") || is_word_at(i, "unless")) {
      const size_t n = q[i] == 'a' ? 3 : 6;
      cut(i, i + n);
      i += n - 1;
    } else if (is_word_at(i, "or")) {
      cut(i, i + 2);
      ++i;
    }
  }
  cut(q.size(), q.size());
  std::vector<std::string> out;
  for (std::string& p : parts) {
    // A comparison may carry the "bool" modifier.
    if (absl::StartsWith(p, "bool ")) p = std::string(absl::StripAsciiWhitespace(p.substr(5)));
    double unused = 0;
    if (p.empty() || absl::SimpleAtod(p, &unused)) continue;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace vismoe::testing
