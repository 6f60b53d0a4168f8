// The command line shared by the two executables: a table of subcommands parsed with CLI11,
// and the one place where errors become a one-line message and an exit code.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/files.h"

namespace pipeplan::cli {

struct Subcommand {
  const char* name;
  AddCommand add;
  bool internal = false;  ///< started by pipeplan itself; not listed
};

/// The message of an exception that is neither pipeplan::Error nor a CLI11 parse error.
using DescribeError = std::string (*)(const std::exception& error);

/// Parses `argv` against `subcommands` (in the order of `--help`) and runs the one given. Bad
/// input exits 2, other failures 1, each with one line "pipeplan: error: ..." on stderr; a
/// standard output that takes no writes (a pipe nobody reads) is a failure (exit 1) naming it.
int run_command_line(int argc, char** argv, const std::vector<Subcommand>& subcommands,
                     DescribeError describe);

/// Makes the standard streams safe to write: SIGPIPE ignored (a write to a pipe no process reads
/// fails, and the command reports it), and any of descriptors 0, 1 and 2 that is closed opened
/// on /dev/null. run_command_line calls it first.
void protect_standard_streams();

/// The subcommands that need no LibTorch (plan, simulate, compare, export): all that `pipeplan`
/// runs itself; pipeplan-torch runs them too.
const std::vector<Subcommand>& plain_subcommands();

/// Writes a command's output files all or none (after checking that standard output took its
/// tables), then prints "wrote <path>" for each.
void write_outputs(const std::vector<OutputContent>& outputs);

/// Prints "pipeplan: error: <first line of message>" to stderr and returns `exit_code`.
int fail(const std::string& message, int exit_code);

}  // namespace pipeplan::cli
