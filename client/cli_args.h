// Command-line helpers shared by the tools, in front of absl::ParseCommandLine:
// repeatable flags (--image=a --image=b) and flag validation that reports
// usage errors instead of letting the flags library exit with status 1.
#ifndef VISMOE_CLIENT_CLI_ARGS_H_
#define VISMOE_CLIENT_CLI_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vismoe::client {

// Removes every "--name=V", "-name=V" and "--name V" from `args` (argv[0]
// kept, nothing after a bare "--" touched) and returns the values in order.
// InvalidArgument when the last "--name" has no value.
absl::Status ExtractRepeatedFlag(absl::string_view name, std::vector<char*>* args,
                                 std::vector<std::string>* values);

// Checks each flag in `args` against the registered absl flags: the name must
// exist and the value must parse. InvalidArgument naming the flag otherwise.
// Leaves parsed values in the flags (absl::ParseCommandLine sets them again).
absl::Status ValidateFlags(const std::vector<char*>& args);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_CLI_ARGS_H_
