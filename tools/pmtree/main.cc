// SPDX-License-Identifier: Apache-2.0
//
// pmtree: one program, one subcommand per tool.  Each subcommand is a thin
// front end over library code (DESIGN.md §2).
//
// No exception leaves main: a parse error is a usage error (exit 2), and
// anything else a subcommand throws (out of memory, a standard-library
// length error) becomes one line on stderr and exit 2, never an abort.

#include <cstdio>
#include <exception>
#include <new>

#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  try {
    CLI::App app{
        "pmtree: crash-consistent B+-trees for persistent memory.\n"
        "Pools under /dev/shm survive a process crash, not a power loss; use a DAX mount for real PM."};
    app.require_subcommand(1);
    int exit_code = 0;
    pmtree::cli::AddInspectCommand(app, &exit_code);
    pmtree::cli::AddCrashCommand(app, &exit_code);
    pmtree::cli::AddBenchCommand(app, &exit_code);
    pmtree::cli::AddServeCommand(app, &exit_code);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int rc = app.exit(e);
      return rc == 0 ? 0 : 2;
    }
    return exit_code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "pmtree: out of memory (the options ask for more than this machine has)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmtree: internal error: %s\n", e.what());
  }
  return 2;
}
