#include "client/cli_args.h"

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace vismoe::client {
namespace {

// "--x=1" -> ("x", "1", true); "-x" -> ("x", "", false). False if not a flag.
bool SplitFlag(absl::string_view arg, absl::string_view* name, absl::string_view* value,
               bool* has_value) {
  if (!absl::ConsumePrefix(&arg, "-")) return false;
  absl::ConsumePrefix(&arg, "-");
  if (arg.empty()) return false;
  const size_t eq = arg.find('=');
  *has_value = eq != absl::string_view::npos;
  *name = arg.substr(0, eq);
  *value = *has_value ? arg.substr(eq + 1) : absl::string_view();
  return true;
}

}  // namespace

absl::Status ExtractRepeatedFlag(absl::string_view name, std::vector<char*>* args,
                                 std::vector<std::string>* values) {
  std::vector<char*> kept;
  kept.reserve(args->size());
  for (size_t i = 0; i < args->size(); ++i) {
    char* arg = (*args)[i];
    absl::string_view flag, value;
    bool has_value = false;
    if (i == 0 || absl::string_view(arg) == "--" || !SplitFlag(arg, &flag, &value, &has_value) ||
        flag != name) {
      kept.push_back(arg);
      if (i > 0 && absl::string_view(arg) == "--") {
        kept.insert(kept.end(), args->begin() + static_cast<long>(i) + 1, args->end());
        break;
      }
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args->size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = (*args)[++i];
    }
    values->emplace_back(value);
  }
  *args = std::move(kept);
  return absl::OkStatus();
}

absl::Status ValidateFlags(const std::vector<char*>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    const absl::string_view arg = args[i];
    if (arg == "--") break;
    absl::string_view name, value;
    bool has_value = false;
    if (!SplitFlag(arg, &name, &value, &has_value)) continue;  // positional
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string parse_value(value);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) {
        parse_value = "false";
        has_value = true;
      } else {
        flag = nullptr;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) {
        parse_value = "true";
      } else if (i + 1 < args.size()) {
        parse_value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(parse_value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value for --", name, "=", parse_value, ": ", error));
    }
  }
  return absl::OkStatus();
}

}  // namespace vismoe::client
