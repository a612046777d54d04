// zklock: inspect lock queues and wait-for cycles, run a command under a
// lock, revoke a node. docs/cli.md documents every subcommand.
//
// This is the one place where failures become exit codes and messages: a
// subcommand throws, main() prints one line to stderr and exits.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  using namespace zklock::cli;
  Context ctx;
  CLI::App app{"zklock: fair distributed locks on ZooKeeper — inspect queues and cycles, "
               "run a command under a lock, revoke a node.",
               "zklock"};
  app.footer(exit_code_help());
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  add_global_options(app, ctx.global);
  set_ls_command(&app, ctx);
  set_queue_command(&app, ctx);
  set_cycles_command(&app, ctx);
  set_graph_command(&app, ctx);
  set_exec_command(&app, ctx);
  set_revoke_command(&app, ctx);
  set_revocations_command(&app, ctx);
  set_doctor_command(&app, ctx);

  ctx.args.assign(argv + 1, argv + argc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all
    std::string message = e.what();
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      message = "unknown subcommand '" + app.remaining().front() + "'";
    }
    std::cerr << "zklock: " << message << "\nRun 'zklock --help' for usage.\n";
    return exit_code::usage;
  } catch (const CliError& e) {
    std::cerr << "zklock: " << e.what() << "\n";
    return e.exit_code();
  } catch (const zklock::Error& e) {
    std::cerr << "zklock: " << e.what() << "\n";
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::cerr << "zklock: " << e.what() << "\n";
    return exit_code::failure;
  }
  return ctx.exit_status;
}
