#pragma once
// The text of `strata --help` and of each command's --help (app/help.cpp).

#include <string>
#include <vector>

namespace strata::cli {

/// `strata --help`: the commands and their one-line summaries.
const char* usage();

/// What `strata <command> --help` prints besides the options.
struct CommandHelp {
  const char* command;      ///< "run", "bench comms", ...
  const char* usage;        ///< the usage line(s)
  const char* about;        ///< what it does
  const char* exit_codes;   ///< one line per code
  std::string environment;  ///< the variables it reads, one entry per variable or group
};

/// Every command's help, in the order `strata --help` lists them.
const std::vector<CommandHelp>& command_helps();

}  // namespace strata::cli
