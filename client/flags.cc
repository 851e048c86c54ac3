#include "client/flags.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainyard {

FlagSet::FlagSet(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagSet::AddString(const std::string& name, std::string* target, const std::string& value_name,
                        const std::string& help) {
  flags_.push_back({name, Kind::kString, target, value_name, help});
}

void FlagSet::AddRepeated(const std::string& name, std::vector<std::string>* target, const std::string& value_name,
                          const std::string& help) {
  flags_.push_back({name, Kind::kRepeated, target, value_name, help});
}

void FlagSet::AddInt(const std::string& name, int* target, const std::string& value_name, const std::string& help) {
  flags_.push_back({name, Kind::kInt, target, value_name, help});
}

void FlagSet::AddBool(const std::string& name, bool* target, const std::string& help) {
  flags_.push_back({name, Kind::kBool, target, "", help});
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args, std::vector<std::string>* positional) {
  const std::string command = usage_.substr(0, usage_.find(' '));
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional->insert(positional->end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      positional->push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, "; see trainyard ", command, " --help"));
    }
    if (flag->kind == Kind::kBool) {
      bool v = true;
      if (has_value && !absl::SimpleAtob(value, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes true or false, got \"", value, "\""));
      }
      *static_cast<bool*>(flag->target) = v;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value (", flag->value_name, ")"));
      }
      value = args[++i];
    }
    switch (flag->kind) {
      case Kind::kString:
        *static_cast<std::string*>(flag->target) = value;
        break;
      case Kind::kRepeated:
        static_cast<std::vector<std::string>*>(flag->target)->push_back(value);
        break;
      case Kind::kInt:
        if (!absl::SimpleAtoi(value, static_cast<int*>(flag->target))) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " takes an integer, got \"", value, "\""));
        }
        break;
      case Kind::kBool:
        break;
    }
  }
  return absl::OkStatus();
}

absl::optional<int> FlagSet::ParseCommand(const std::vector<std::string>& args, std::vector<std::string>* positional,
                                          std::ostream& out, std::ostream& err) {
  absl::Status parsed = Parse(args, positional);
  if (help_) {
    out << Help();
    return 0;
  }
  if (!parsed.ok()) {
    err << "error: " << parsed.message() << "\n";
    return 2;
  }
  return absl::nullopt;
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: trainyard ", usage_, "\n\n", description_, "\n");
  if (!flags_.empty()) out += "\nflags:\n";
  for (const Flag& flag : flags_) {
    std::string left = absl::StrCat("  --", flag.name);
    if (!flag.value_name.empty()) absl::StrAppend(&left, " ", flag.value_name);
    if (flag.kind == Kind::kRepeated) absl::StrAppend(&left, " (repeatable)");
    if (left.size() < 32)
      left.resize(32, ' ');
    else
      left += "\n" + std::string(32, ' ');
    absl::StrAppend(&out, left, flag.help, "\n");
  }
  absl::StrAppend(&out, "  --help                        this help\n");
  return out;
}

}  // namespace trainyard
