// `trainyard convert --from-gin RUN.gin ... --out SPEC.textproto`: a T5X
// training run's gin configuration as a Trainyard job spec
// (gin/t5x_job.h), validated, with the task's vocabulary checked against the
// model's, written only when the whole spec is good.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "data/bundled.h"
#include "data/task.h"
#include "data/task_definition.h"
#include "gin/gin_config.h"
#include "gin/t5x_job.h"
#include "spec/jobspec.h"
#include "spec/jobspec_validator.h"

namespace trainyard {
namespace {

absl::StatusOr<std::string> Bytes(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " ", path, " cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model's vocabulary (from the gin file) must be the one the task reads:
// the same file contents.
absl::Status CheckTaskVocabulary(const JobSpec& spec, const std::string& model_vocabulary) {
  if (model_vocabulary.empty()) return absl::OkStatus();
  TaskRegistry registry;
  TY_RETURN_IF_ERROR(RegisterBundledTasks(&registry));
  TY_RETURN_IF_ERROR(RegisterSpecTasks(spec, &registry));
  TY_ASSIGN_OR_RETURN(const Task* task, registry.Get(spec.task()));
  const std::string task_vocabulary = task->vocabulary->path();
  TY_ASSIGN_OR_RETURN(std::string mine, Bytes(model_vocabulary, "the model's vocabulary"));
  TY_ASSIGN_OR_RETURN(std::string theirs, Bytes(task_vocabulary, "the task's vocabulary"));
  if (mine != theirs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model's vocabulary ", model_vocabulary,
        " (seqio.SentencePieceVocabulary.sentencepiece_model_file) is not ", "task ", spec.task(), "'s (",
        task_vocabulary,
        "): the model reads one vocabulary's ids; bind the task's file, or define the task over your data with "
        "--task-definitions (a definition without a vocabulary takes the model's)"));
  }
  return absl::OkStatus();
}

absl::Status ConvertGin(const std::vector<std::string>& files, const GinLoadOptions& load,
                        const std::string& definitions, GinConversionOptions options, const std::string& out_path,
                        std::ostream& out, std::ostream& err) {
  TY_ASSIGN_OR_RETURN(GinConfig config, GinConfig::Load(files, load));
  if (!definitions.empty()) {
    TY_ASSIGN_OR_RETURN(options.definitions, LoadJobSpec(definitions));
  }
  TY_ASSIGN_OR_RETURN(GinConversion converted, JobSpecFromGin(&config, options));
  JobSpec spec = converted.spec;
  absl::Status valid = ValidateAndNormalize(&spec);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the converted spec is not valid: ", valid.message()));
  }
  TY_RETURN_IF_ERROR(CheckTaskVocabulary(spec, converted.vocabulary));
  std::string header = absl::StrCat("# Converted from ", files.front(), " by trainyard convert --from-gin.\n");
  for (const std::string& w : converted.warnings) absl::StrAppend(&header, "# NOT CONVERTED: ", w, "\n");
  TY_RETURN_IF_ERROR(WriteFileAtomically(out_path, header + FormatJobSpecText(converted.spec)));
  for (const std::string& n : converted.notes) err << "note: " << n << "\n";
  for (const std::string& w : converted.warnings) err << "warning: not converted: " << w << "\n";
  out << "wrote " << out_path << " (job " << spec.name() << ", " << JobKind_Name(spec.kind()) << ", "
      << converted.warnings.size() << " binding(s) not converted, " << converted.notes.size() << " note(s))\n";
  return absl::OkStatus();
}

}  // namespace

int RunConvertFromGin(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> files;
  GinLoadOptions load;
  std::string out_path, definitions, tfds_data_dir;
  bool allow_unmapped = false;
  FlagSet flags(
      "convert --from-gin RUN.gin [--from-gin MORE.gin]... [--gin-search-path DIR]... "
      "[--gin-binding 'NAME = VALUE']... [--task-definitions FILE] [--tfds-data-dir DIR] [--allow-unmapped] "
      "--out SPEC.textproto",
      "Converts a T5X training run's gin configuration (what t5x/train.py reads) into a\n"
      "job spec: the model, optimizer, schedule, data, evaluation, checkpoints and\n"
      "actions, with T5X's defaults for what the files leave unbound. A binding that\n"
      "cannot be honoured is an error naming its file and line (with --allow-unmapped:\n"
      "a warning, recorded in the spec's header). The spec is validated before it is\n"
      "written.");
  flags.AddRepeated("from-gin", &files, "RUN.gin", "gin files, read in order (as T5X's --gin_file)");
  flags.AddRepeated("gin-search-path", &load.search_path, "DIR", "where includes are looked for, in order");
  flags.AddRepeated("gin-binding", &load.bindings, "'NAME = VALUE'",
                    "a binding applied after the files (as T5X's --gin.NAME=VALUE)");
  flags.AddString("task-definitions", &definitions, "FILE",
                  "a spec fragment with task_definitions and mixture_definitions the run's task names");
  flags.AddString("tfds-data-dir", &tfds_data_dir, "DIR",
                  "where T5's well-known tasks (c4_v220_span_corruption, wmt_t2t_ende_v003, ...) find their "
                  "TFDS datasets, prepared by tfds (default: the workers' TFDS_DATA_DIR)");
  flags.AddBool("allow-unmapped", &allow_unmapped, "convert what can be and list the rest as warnings");
  flags.AddString("out", &out_path, "SPEC.textproto", "the job spec to write (not overwritten if it exists)");
  std::vector<std::string> positional;
  if (absl::optional<int> exit_code = flags.ParseCommand(args, &positional, out, err)) return *exit_code;
  if (files.empty() || out_path.empty() || !positional.empty()) {
    err << "error: give --from-gin RUN.gin and --out SPEC.textproto\n" << flags.Help();
    return kExitUsage;
  }
  if (std::ifstream(out_path).good()) {
    err << "error: --out " << out_path << " exists; choose a new file\n";
    return kExitUsage;
  }
  GinConversionOptions options;
  options.allow_unmapped = allow_unmapped;
  options.tfds_data_dir = tfds_data_dir;
  const absl::Status status = ConvertGin(files, load, definitions, options, out_path, out, err);
  if (status.ok()) return kExitOk;
  err << "error: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kNotFound
             ? kExitUsage
             : kExitFailed;
}

}  // namespace trainyard
