// Inference evaluation during training (T5X's infer_eval): every rank
// decodes its share of an eval task's batches with the job's decoding
// options and scores the targets; the ranks stop together (a preemption on
// any of them ends the evaluation on all, as in Trainer::Eval), the rows are
// gathered, and rank 0 computes the task's metric functions over them.
#ifndef TRAINYARD_JOB_INFER_EVAL_H_
#define TRAINYARD_JOB_INFER_EVAL_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "data/task.h"
#include "data/vocabulary.h"
#include "evaluation/metric_fns.h"
#include "model/model.h"
#include "proto/job.pb.h"
#include "trainer/trainer.h"

namespace trainyard {

// The decoding options of a (validated) InferenceConfig; `seed` is the
// sampling seed when the config has none. Every rank samples with the same
// seed: a row's generator is keyed by its example (DecodeOptions::row_keys,
// set per batch by the caller), not by the rank that decodes it.
DecodeOptions DecodeOptionsFromConfig(const InferenceConfig& config, uint64_t seed);
// Those of `spec.inference` (the job's seed by default, its dtype), as
// EVALUATION and INFERENCE jobs and inference evaluation use them.
DecodeOptions DecodeOptionsFromSpec(const JobSpec& spec);
// The sampling keys of a rank's batch `b` of `rows` rows taken from a
// rank-strided split (rank r of `world` holds positions r, r + world, ...):
// row i is the example at position (b * rows + i) * world + rank of the
// split's order, whatever the number of ranks.
std::vector<uint64_t> StridedRowKeys(int64_t b, int64_t rows, int64_t batch_rows, int rank, int world);
// The InferenceConfig that DecodeOptionsFromConfig turns back into
// `decode`: the method, that method's options only (validation
// refuses another method's), the sampling seed, max_decode_length (alpha,
// temperature and top_p to float precision; the EOS id and the compute
// dtype come from the task and the spec's dtype). kInvalidArgument, naming
// the option, for a value a spec cannot hold (a seed above 2^63 - 1, a
// top_k or max_decode_length above 2^31 - 1).
absl::StatusOr<InferenceConfig> InferenceConfigFromDecodeOptions(const DecodeOptions& decode);

// The metric functions an inference evaluation of `task` computes: the
// task's own, then mean_log_likelihood of the targets (unless the task lists
// it). kInvalidArgument naming the task for a name that is not a built-in.
absl::StatusOr<std::vector<MetricFn>> InferEvalMetricFns(const Task& task);

struct InferEvalOptions {
  DecodeOptions decode;
  int64_t rows = 0;                              // every batch's rows on every rank
  int64_t targets_length = 0;                    // the batches' target length
  const std::atomic<bool>* preempted = nullptr;  // checked between batches
  int64_t step = 0;                              // for the PreemptionError
};

// Decodes and scores every batch of `batches` (rows without targets, the
// padding of a short last batch, are left out) and returns, on rank 0, the
// values of `fns` over all ranks' rows plus "examples"; the other ranks get
// an empty result. A preemption on any rank: PreemptionError on every rank.
absl::StatusOr<MetricResults> InferEval(Model* model, BatchIterator* batches, const Vocabulary& vocabulary,
                                        const std::vector<MetricFn>& fns, const InferEvalOptions& options,
                                        Collective* collective);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_INFER_EVAL_H_
