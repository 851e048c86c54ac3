// The subcommand table of the `trainyard` binary and its dispatcher.
#include <string>
#include <vector>

#include "client/commands.h"

namespace trainyard {
namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&, std::ostream&, std::ostream&);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"validate", RunValidate, "check job specs and print them normalised"},
    {"model-info", RunModelInfo, "a model preset's architecture and parameter count"},
    {"convert", RunConvert, "Hugging Face T5 checkpoints to Trainyard checkpoints and back"},
};

void PrintUsage(std::ostream& out) {
  out << "usage: trainyard COMMAND [ARGS...]\n\n"
         "Trainyard: distributed T5 training (a C++ take on T5X's trainer).\n\n"
         "commands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    name.resize(14, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\n`trainyard COMMAND --help` describes each command.\n"
         "Exit codes: 0 success, 1 the job or operation failed, 2 bad usage or input.\n";
}

}  // namespace

int RunTrainyard(int argc, char** argv, std::ostream& out, std::ostream& err) {
  if (argc < 2) {
    PrintUsage(err);
    return kExitUsage;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    PrintUsage(out);
    return kExitOk;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (command == c.name) return c.run(args, out, err);
  }
  err << "error: unknown command \"" << command << "\"\n\n";
  PrintUsage(err);
  return kExitUsage;
}

}  // namespace trainyard
