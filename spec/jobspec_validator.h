// Validation and normalisation of a JobSpec: every field is checked, and every
// default is filled in, so that the stored spec says exactly what will run.
//
// Each problem is reported on its own line as "FIELD: the bad value, what is
// allowed", all problems at once, in a kInvalidArgument status. A spec that
// passes is normalised in place; normalising a normalised spec changes
// nothing.
//
// Thread-safety: thread-compatible.
#ifndef TRAINYARD_SPEC_JOBSPEC_VALIDATOR_H_
#define TRAINYARD_SPEC_JOBSPEC_VALIDATOR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace trainyard {

// Sane bounds. Beyond them a value is a typo, not a configuration.
constexpr int kMaxFeatureLength = 32768;
constexpr int kMaxWorkers = 4096;
constexpr int kMaxBatchSize = 1 << 20;
constexpr int64_t kMaxSteps = 1000000000000LL;
constexpr int kMaxRestarts = 1000;

struct ValidationOptions {
  // When set (an absolute path), output_dir must lie inside it; a relative
  // output_dir is taken relative to it (and rewritten to the absolute path).
  std::string output_root;
};

absl::Status ValidateAndNormalize(JobSpec* spec, const ValidationOptions& options = {});

// An output directory given outside a job spec (e.g. an interactive
// session's), checked and resolved like `output_dir`; errors name `field`.
absl::StatusOr<std::string> ResolveOutputDir(const std::string& field, const std::string& dir,
                                             const ValidationOptions& options);

// Fills unset optimizer hyper-parameters with their defaults (T5X's for
// Adafactor; optax's for AdamW). The validator and the optimizers share them.
void FillAdafactorDefaults(Adafactor* adafactor);
void FillAdamWDefaults(AdamW* adamw);

// The decoding fields of an InferenceConfig (INFERENCE jobs, inference
// evaluation and sessions alike): the method's defaults filled in (GREEDY;
// BEAM: beam_size 4, alpha 0.6; SAMPLE: temperature 1), max_decode_length
// `default_max_decode_length` when unset; ranges checked and other
// methods' options refused (kInvalidArgument naming the fields).
absl::Status NormalizeDecoding(InferenceConfig* inference, int default_max_decode_length);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_JOBSPEC_VALIDATOR_H_
