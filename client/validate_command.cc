// `trainyard validate`: parse, override, validate and print normalised specs.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/flags.h"
#include "data/bundled.h"
#include "data/task_definition.h"
#include "spec/jobspec.h"
#include "spec/jobspec_validator.h"
#include "spec/overrides.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

// Prints each line of a (possibly multi-line) error with the spec's name.
void PrintError(std::ostream& err, const std::string& source, const absl::Status& status) {
  for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
    // Parse errors already start with the source ("path:line:col: ...").
    if (line.substr(0, source.size()) == source) {
      err << "error: " << line << "\n";
    } else {
      err << "error: " << source << ": " << line << "\n";
    }
  }
}

// The vocabularies of a valid spec's tasks against its model's vocab_size,
// as the workers check them when they build the job: opened where this
// machine reaches them; where it does not (a file only the workers see), a
// note says the check is left to them.
absl::Status CheckVocabularySizes(const JobSpec& spec, const std::string& source, std::ostream& err) {
  TaskRegistry registry;
  absl::Status registered = RegisterBundledTasks(&registry);
  if (registered.ok()) registered = RegisterSpecTasks(spec, &registry);
  if (absl::IsNotFound(registered) || absl::IsFailedPrecondition(registered)) {
    err << "note: " << source << ": the tasks' vocabularies are not checked here: " << registered.message() << "\n";
    return absl::OkStatus();
  }
  if (!registered.ok()) return registered;
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(spec.model());
  if (!config.ok()) return config.status();
  return CheckTaskVocabularies(spec, registry, config->vocab_size());
}

}  // namespace

int RunValidate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> overrides;
  std::string output_root;
  bool json = false;
  FlagSet flags("validate SPEC... [--set path.to.field=value]...",
                "Checks job specs (.textproto or .json; - for stdin) and prints each one\n"
                "normalised, with every default filled in: what the coordinator would run.\n"
                "The tasks' vocabularies this machine can open must fit the model's vocab_size.\n"
                "Exit code 0 if all are valid, 2 otherwise (every problem is listed).");
  flags.AddRepeated("set", &overrides, "PATH=VALUE", "override a field before validation, e.g. --set batch_size=64");
  flags.AddString("output-root", &output_root, "DIR", "require output_dir to lie inside DIR (as a coordinator does)");
  flags.AddBool("json", &json, "print the normalised specs as JSON");
  std::vector<std::string> specs;
  if (absl::optional<int> exit_code = flags.ParseCommand(args, &specs, out, err)) {
    return *exit_code;
  }
  if (specs.empty()) {
    err << "error: no SPEC given\n" << flags.Help();
    return kExitUsage;
  }
  if (!output_root.empty() && output_root[0] != '/') {
    err << "error: --output-root must be an absolute path, got \"" << output_root << "\"\n";
    return kExitUsage;
  }
  ValidationOptions options;
  options.output_root = output_root;
  int exit_code = kExitOk;
  for (const std::string& path : specs) {
    absl::StatusOr<JobSpec> spec = LoadJobSpec(path);
    absl::Status status = spec.status();
    if (status.ok()) status = ApplyOverrides(overrides, &*spec);
    const std::string source = path == "-" ? "<stdin>" : path;
    if (status.ok()) status = ValidateAndNormalize(&*spec, options);
    if (status.ok()) status = CheckVocabularySizes(*spec, source, err);
    if (!status.ok()) {
      PrintError(err, source, status);
      exit_code = kExitUsage;
      continue;
    }
    if (!json) {
      if (specs.size() > 1) out << "# " << path << "\n";
      out << FormatJobSpecText(*spec);
    } else if (specs.size() == 1) {
      out << FormatJobSpecJson(*spec) << "\n";
    } else {
      // Several specs: JSON Lines, one compact object per spec.
      out << FormatJobSpecJson(*spec, /*compact=*/true) << "\n";
    }
  }
  return exit_code;
}

}  // namespace trainyard
