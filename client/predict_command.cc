// `trainyard predict` (in trainyard-torch): decodes a sample of a task
// split's examples with a checkpoint's model, shown with their targets and
// the exact-match count, tokenised with the checkpoint's vocabulary when it
// has one (ChooseVocabulary). Texts (--input, --examples) go through the
// interactive model (RunPredictExamples), which tokenizes them as the
// model's tasks do.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/status_macros.h"
#include "data/bundled.h"
#include "data/iterator.h"
#include "data/vocabulary_choice.h"
#include "model/encoder_decoder_model.h"
#include "model/weights.h"
#include "trainer/task_batches.h"

namespace trainyard {
namespace {

// A random sample of `num` examples of `task`'s `split` (the `seed`-th), cut
// to the given lengths; fewer when the split is smaller.
absl::StatusOr<T5Batch> SampleBatch(const Task& task, const std::string& split, int num, int input_length,
                                    int targets_length, int seed) {
  IteratorOptions data;
  data.split = split;
  data.rows = num;
  data.inputs_length = input_length;
  data.targets_length = targets_length;
  data.pack = false;
  data.shuffle = true;  // a sample of the split, not its first rows
  data.seed = static_cast<uint64_t>(seed);
  data.repeat = false;
  TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(task, data));
  TY_ASSIGN_OR_RETURN(ConvertedBatch converted, it->Next());
  return ExampleRows(converted);
}

// The bundled task `name` in the checkpoint's vocabulary when it has one
// (registered in `in_checkpoint_vocabulary`), else in its own (in
// `registry`).
absl::StatusOr<const Task*> TaskForCheckpoint(const std::string& checkpoint, const std::string& name,
                                              TaskRegistry* registry, TaskRegistry* in_checkpoint_vocabulary) {
  TY_RETURN_IF_ERROR(RegisterBundledTasks(registry));
  absl::StatusOr<const Task*> task = registry->Get(name);
  if (!task.ok()) return absl::InvalidArgumentError(absl::StrCat("--task: ", task.status().message()));
  TY_ASSIGN_OR_RETURN(VocabularyChoice choice,
                      ChooseVocabulary(checkpoint, (*task)->vocabulary->path(), (*task)->vocabulary->extra_ids(),
                                       VocabularyUse::kInfer));
  if (!choice.replaces_task) return task;
  TY_RETURN_IF_ERROR(RegisterBundledTasks(in_checkpoint_vocabulary, choice.path));
  return in_checkpoint_vocabulary->Get(name);
}

}  // namespace

int RunPredict(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // Examples from a file, or JSON output: the interactive model's path.
  for (const std::string& a : args) {
    // The interactive model's form: --examples, --json, or a coordinator's
    // workers.
    for (const char* flag : {"--json", "--input", "--examples", "--coordinator", "--workers"}) {
      if (a == flag || a.rfind(std::string(flag) + "=", 0) == 0) return RunPredictExamples(args, out, err);
    }
  }
  std::string checkpoint, task_name = "digits_to_words", split = "validation";
  int num = 8, input_length = 64, max_decode = 64, seed = 0;
  FlagSet flags("predict --checkpoint DIR [--task NAME] [--split SPLIT] [--num N]",
                "Greedy predictions of a checkpoint's model for N examples of a task's\n"
                "split, shown with their targets and the exact-match count. For texts\n"
                "(--input TEXT, --examples FILE.jsonl), --json or --coordinator: see\n"
                "`trainyard predict --json --help`.");
  flags.AddString("checkpoint", &checkpoint, "DIR", "a checkpoint directory (checkpoint_<step>)");
  flags.AddString("task", &task_name, "NAME", "a registered task (default digits_to_words)");
  flags.AddString("split", &split, "SPLIT", "the split to take examples from (default validation)");
  flags.AddInt("num", &num, "N", "number of examples (default 8)");
  flags.AddInt("seed", &seed, "N", "which sample of the split (default 0)");
  flags.AddInt("input-length", &input_length, "N", "input tokens kept (default 64)");
  flags.AddInt("max-decode-length", &max_decode, "N", "longest prediction in tokens (default 64)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (!positional.empty() || checkpoint.empty() || num < 1 || input_length < 1 || max_decode < 1) {
    err << "error: want: trainyard predict --checkpoint DIR [--num N >= 1]\n";
    return kExitUsage;
  }
  auto fail = [&](const absl::Status& s) {
    err << "error: " << s.message() << "\n";
    return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? kExitUsage : kExitFailed;
  };
  try {
    absl::StatusOr<ModelCheckpoint> ckpt = ReadModelCheckpoint(checkpoint);
    if (!ckpt.ok()) return fail(ckpt.status());
    absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(ckpt->config, {});
    if (!model.ok()) return fail(model.status());
    if (absl::Status s = AssignParameters(ckpt->tensors, /*strict=*/true, (*model)->network().get()); !s.ok()) {
      return fail(s);
    }
    TaskRegistry registry, in_checkpoint_vocabulary;
    absl::StatusOr<const Task*> task = TaskForCheckpoint(checkpoint, task_name, &registry, &in_checkpoint_vocabulary);
    if (!task.ok()) return fail(task.status());
    const Vocabulary& vocab = *(*task)->vocabulary;

    absl::StatusOr<T5Batch> batch = SampleBatch(**task, split, num, input_length, max_decode, seed);
    if (!batch.ok()) return fail(batch.status());
    DecodeOptions decode;
    decode.max_decode_length = max_decode;
    absl::StatusOr<Predictions> predicted = (*model)->PredictBatchWithAux(*batch, decode);
    if (!predicted.ok()) return fail(predicted.status());
    const int64_t rows = batch->batch_size();
    int exact = 0;
    out << "checkpoint " << checkpoint << " (step " << ckpt->step << ")\n";
    for (int64_t r = 0; r < rows; ++r) {
      const std::string input = DecodeRow(vocab, batch->encoder_input_tokens[r]);
      const std::string prediction = DecodeRow(vocab, predicted->tokens[r]);
      const std::string target = DecodeRow(vocab, batch->decoder_target_tokens[r]);
      exact += prediction == target;
      out << absl::StrFormat("  %-14s -> %s", input, prediction)
          << (prediction == target ? "  [exact]" : absl::StrCat("  [target: ", target, "]"))
          << absl::StrFormat("  (log-likelihood %.3f)\n", predicted->scores[r].item<double>());
    }
    out << "exact match: " << exact << "/" << rows << "\n";
  } catch (const std::exception& e) {
    return fail(absl::InternalError(e.what()));
  }
  return kExitOk;
}

}  // namespace trainyard
