// The subcommands of the `trainyard` multi-call binary, as plain functions
// over argument lists and streams so that tests run them in-process.
//
// Exit codes (for every subcommand): 0 success, 1 the job or operation
// failed, 2 bad usage or invalid input.
#ifndef TRAINYARD_CLIENT_COMMANDS_H_
#define TRAINYARD_CLIENT_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

namespace trainyard {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// `trainyard validate SPEC... [--set k=v]... [--output-root DIR] [--json]`
int RunValidate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `trainyard model-info [--preset NAME] [--json]`
int RunModelInfo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `trainyard convert (--from-hf HF_DIR [--vocab SPM] --out DIR | --checkpoint DIR --to-hf OUT)`
int RunConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Dispatches argv[1] to a subcommand; prints the command list on --help.
int RunTrainyard(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_COMMANDS_H_
