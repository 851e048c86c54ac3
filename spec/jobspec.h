// Reading and writing job specifications (proto/job.proto).
//
// The job-file format is protobuf text format (.textproto); JSON (protobuf's
// JSON mapping) is accepted too. Parse errors name the file, line and column.
// Thread-safety: all functions are thread-safe.
#ifndef TRAINYARD_SPEC_JOBSPEC_H_
#define TRAINYARD_SPEC_JOBSPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace trainyard {

enum class SpecFormat { kAuto, kText, kJson };

// Largest spec file accepted. Real specs are a few KiB; anything near this is
// a wrong file.
constexpr size_t kMaxSpecBytes = 1 << 20;

// Parses `content`. `source` names it in error messages (a path, "<stdin>").
// kAuto: JSON if the first non-blank character is '{', text format otherwise.
// Errors are kInvalidArgument: "source:line:col: message".
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view content, absl::string_view source,
                                     SpecFormat format = SpecFormat::kAuto);

// Reads and parses a file; the format follows the extension (.json is JSON,
// .textproto/.txtpb/.pbtxt/.prototxt text) or else the content. "-" is stdin.
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

// Text format, the canonical form written to output_dir/config.textproto.
std::string FormatJobSpecText(const JobSpec& spec);
// JSON with the proto field names, enums as names; indented unless compact.
std::string FormatJobSpecJson(const JobSpec& spec, bool compact = false);

// Whether the job trains (TRAIN, PRETRAINING, FINETUNING; an unset kind is
// TRAIN), as opposed to EVALUATION and INFERENCE.
bool IsTrainingKind(JobKind kind);
// Whether a lost rank is survived in place (fault_tolerance ELASTIC on a
// training job) rather than by restarting the attempt. The one definition
// the coordinator, the worker and the training job use.
bool IsElasticTraining(const JobSpec& spec);
// Whether a training job's state must not depend on its number of workers
// (data_parallel.reproducible).
bool IsReproducibleTraining(const JobSpec& spec);
// Whether every rank reads the whole global batch and takes its rows
// (ELASTIC and reproducible training), rather than its own share of the
// data: the data does not depend on the number of ranks, and one position
// is saved for all of them.
bool ReadsGlobalBatches(const JobSpec& spec);

// The ranks that hold one copy of the training state between them (one
// shard group) when the job runs on `world_size` ranks: 1 when replicated
// (data_parallel.sharding NONE), data_parallel.shard_group_size when
// hybrid-sharded, and all `world_size` ranks when sharded over every rank
// (shard_group_size 0, or equal to it). The one definition the validator,
// the coordinator's ELASTIC regroups and the worker's collectives use.
int ShardGroupSize(const JobSpec& spec, int world_size);

// The one rule for how a global batch of `batch_size` rows splits: over
// `world_size` ranks in equal shares (`elastic`: shares that may differ by a
// row, at least one each), and each share into `num_microbatches` equal
// microbatches (0: not checked). kInvalidArgument naming batch_size or
// num_microbatches otherwise. Spec validation, the training job (for the
// ranks it runs on) and the interactive model all use it.
absl::Status CheckBatchSplit(int64_t batch_size, int world_size, int num_microbatches, bool elastic);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_JOBSPEC_H_
