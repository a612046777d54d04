// One function per subcommand, each defined in its own cmd_<name>.cpp:
// it adds the subcommand with its options to `app`, and a callback that
// validates the input, calls the library and prints the result. Errors are
// thrown (CliError, zklock::Error) and mapped to exit codes in main().
#pragma once

#include "cli/common.hpp"

namespace zklock::cli {

void set_ls_command(CLI::App* app, Context& ctx);
void set_queue_command(CLI::App* app, Context& ctx);
void set_cycles_command(CLI::App* app, Context& ctx);
void set_graph_command(CLI::App* app, Context& ctx);
void set_exec_command(CLI::App* app, Context& ctx);
void set_revoke_command(CLI::App* app, Context& ctx);
void set_revocations_command(CLI::App* app, Context& ctx);
void set_doctor_command(CLI::App* app, Context& ctx);

}  // namespace zklock::cli
