// SPDX-License-Identifier: Apache-2.0
//
// pmtree: one program, one subcommand per tool.  Each subcommand is a thin
// front end over library code (DESIGN.md §2).

#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "pmtree: crash-consistent B+-trees for persistent memory.\n"
      "Pools under /dev/shm survive a process crash, not a power loss; use a DAX mount for real PM."};
  app.require_subcommand(1);
  int exit_code = 0;
  pmtree::cli::AddInspectCommand(app, &exit_code);
  pmtree::cli::AddCrashCommand(app, &exit_code);
  pmtree::cli::AddBenchCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
