// ExitOnHelpFlag: the one --help behaviour of every VisMoE tool. Abseil's own
// --help exits 1 and lists only flags defined in a file named after the
// program (none of ours), and the client tools' strict flag check used to
// call --help an unknown flag. Each tool's main calls this first; given
// --help, -help, -h, --helpfull or --helpshort (before a "--") it prints the
// program usage message and the flags defined in files whose path contains
// `flag_file_filter` to stdout, and exits 0.
//
// Thread safety: call from main before other threads start.
// Header-only (each tool already links absl's flag usage libraries).
#ifndef VISMOE_ENGINE_CORE_HELP_FLAG_H_
#define VISMOE_ENGINE_CORE_HELP_FLAG_H_

#include <cstdlib>
#include <iostream>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/strings/string_view.h"

namespace vismoe {

inline bool IsHelpFlag(absl::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpfull" ||
         arg == "-helpfull" || arg == "--helpshort" || arg == "-helpshort";
}

inline void ExitOnHelpFlag(int argc, char** argv, absl::string_view flag_file_filter) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return;
    if (!IsHelpFlag(arg)) continue;
    absl::flags_internal::SetProgramInvocationName(argv[0]);  // ParseCommandLine would
    absl::flags_internal::FlagsHelp(std::cout, flag_file_filter,
                                    absl::flags_internal::HelpFormat::kHumanReadable,
                                    absl::ProgramUsageMessage());
    std::cout.flush();
    std::exit(0);
  }
}

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_HELP_FLAG_H_
