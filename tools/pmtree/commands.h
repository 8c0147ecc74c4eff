// SPDX-License-Identifier: Apache-2.0
//
// The subcommands of `pmtree`.  Each cmd_<name>.cc defines one Add...Command
// that registers its CLI11 subcommand; the callback stores the process exit
// status in *exit_code (0 success, 1 failure found, 2 usage or environment).

#ifndef PMTREE_TOOLS_COMMANDS_H_
#define PMTREE_TOOLS_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace pmtree::cli {

void AddInspectCommand(CLI::App& app, int* exit_code);
void AddCrashCommand(CLI::App& app, int* exit_code);
void AddBenchCommand(CLI::App& app, int* exit_code);
void AddServeCommand(CLI::App& app, int* exit_code);

}  // namespace pmtree::cli

#endif  // PMTREE_TOOLS_COMMANDS_H_
