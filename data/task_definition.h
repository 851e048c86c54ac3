// Tasks defined by files (JobSpec.task_definitions) and mixtures
// (JobSpec.mixture_definitions): registered by workers and the interactive
// model under their names.
#ifndef TRAINYARD_DATA_TASK_DEFINITION_H_
#define TRAINYARD_DATA_TASK_DEFINITION_H_

#include "absl/status/status.h"
#include "data/task.h"
#include "proto/job.pb.h"

namespace trainyard {

// Adds `def` to `registry`: its splits read from the named files (.jsonl:
// JSON lines with "inputs" and "targets"; .txt: plain text, one document per
// line as "text"; TFRecord files, "tfds:" splits and "seqio_cache:"
// directories as proto/job.proto describes; otherwise tab-separated), its
// preprocessing chain built
// (spec/task_spec.h: rekey, translate, summarize, split_tokens,
// span_corruption, prefix_lm), its
// vocabulary loaded with its extra ids (default: the bundled vocabulary). A
// split's files are opened when the split is first used, so a bad path
// fails the job that reads it, naming the file. kAlreadyExists for a taken
// name; kNotFound or kInvalidArgument naming the vocabulary file;
// kInvalidArgument for a chain the spec validator refuses.
absl::Status RegisterTaskDefinition(const TaskDefinition& def, TaskRegistry* registry);

// Registers every task and mixture `spec` defines (mixtures after the
// mixtures they contain). Errors name the definition. With `vocabulary` (a
// checkpoint's, data/vocabulary_choice.h), every task tokenises with it in
// place of its own, keeping its extra ids.
absl::Status RegisterSpecTasks(const JobSpec& spec, TaskRegistry* registry, const std::string& vocabulary = "");

// Every id the vocabularies of `spec`'s task and eval tasks make (pieces
// and extra ids) must have a row in a model of `vocab_size` embeddings.
// kInvalidArgument naming the task, its vocabulary file, how many ids it
// has and `vocab_size`; kInvalidArgument for a task `registry` lacks.
absl::Status CheckTaskVocabularies(const JobSpec& spec, const TaskRegistry& registry, int64_t vocab_size);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_TASK_DEFINITION_H_
