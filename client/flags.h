// A small declarative command-line parser for the subcommands of the
// `trainyard` multi-call binary. Each subcommand declares its flags on a
// FlagSet; Parse fills them and returns the positional arguments. Flags may
// be given as --name=value or --name value; "--" ends the flags.
//
// (absl's flags are process-global, which does not fit one binary with many
// subcommands that each have their own flags.)
//
// Thread-safety: thread-compatible.
#ifndef TRAINYARD_CLIENT_FLAGS_H_
#define TRAINYARD_CLIENT_FLAGS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/optional.h"

namespace trainyard {

class FlagSet {
 public:
  // `usage` is the synopsis after "trainyard ", e.g. "validate SPEC...".
  FlagSet(std::string usage, std::string description);

  void AddString(const std::string& name, std::string* target, const std::string& value_name, const std::string& help);
  void AddRepeated(const std::string& name, std::vector<std::string>* target, const std::string& value_name,
                   const std::string& help);
  void AddInt(const std::string& name, int* target, const std::string& value_name, const std::string& help);
  void AddBool(const std::string& name, bool* target, const std::string& help);

  // Parses `args` (without the subcommand name). kInvalidArgument for an
  // unknown flag, a missing or malformed value. --help/-h sets help().
  absl::Status Parse(const std::vector<std::string>& args, std::vector<std::string>* positional);

  // Parse for a subcommand: on --help prints Help() to `out` and returns 0;
  // on a parse error prints it to `err` and returns 2; otherwise returns
  // nullopt and the command goes on.
  absl::optional<int> ParseCommand(const std::vector<std::string>& args, std::vector<std::string>* positional,
                                   std::ostream& out, std::ostream& err);

  bool help() const { return help_; }
  std::string Help() const;

 private:
  enum class Kind { kString, kRepeated, kInt, kBool };
  struct Flag {
    std::string name;
    Kind kind;
    void* target;
    std::string value_name;
    std::string help;
  };
  const Flag* Find(const std::string& name) const;

  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_FLAGS_H_
