#include "job/split_inference.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "data/iterator.h"
#include "evaluation/metric_fns.h"
#include "job/distributed_decode.h"
#include "job/infer_eval.h"
#include "job/job_internal.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "trainer/metrics_manager.h"

namespace trainyard {

using job_internal::Raised;

namespace {

// Every rank's shard of the split (examples r, r+W, ... in the split's
// order, at most inference.num_batches batches), decoded and scored in
// rounds of one batch per rank and gathered (DecodeAndGather); rank 0 gets
// the JSON lines (index in the split, input, target, prediction,
// prediction_score, target_score) sorted by index, the others none. A stop
// on any rank stops every rank (kAborted).
absl::StatusOr<std::vector<nlohmann::ordered_json>> DecodeSplit(const JobComponents& job, const Task& task,
                                                                int64_t* examples) {
  const JobSpec& spec = job.spec;
  const InferenceConfig& config = spec.inference();
  const int rank = job.rank(), world = job.world_size();
  IteratorOptions data;
  data.split = config.split();
  data.rows = spec.batch_size() / world;
  data.inputs_length = spec.feature_lengths().inputs();
  data.targets_length = spec.feature_lengths().targets();
  data.pack = false;
  data.shuffle = false;  // the split in its order: shard r holds examples r, r+W, ...
  data.repeat = false;
  data.rank = rank;
  data.world_size = world;
  TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(task, data));
  DistributedDecodeOptions decode;
  decode.predict = true;
  decode.score = true;
  decode.decode = DecodeOptionsFromSpec(spec);
  decode.inputs_length = data.inputs_length;
  decode.targets_length = data.targets_length;
  decode.rows_per_rank = data.rows;
  auto text = [&](const torch::Tensor& row) { return DecodeRow(*task.vocabulary, row); };
  std::vector<nlohmann::ordered_json> lines;
  *examples = 0;
  for (int64_t b = 0;; ++b) {
    std::optional<T5Batch> batch;
    if (config.num_batches() == 0 || b < config.num_batches()) {
      absl::StatusOr<ConvertedBatch> converted = it->Next();
      if (!absl::IsOutOfRange(converted.status())) {
        TY_RETURN_IF_ERROR(converted.status());
        batch = ExampleRows(*converted);
      }
    }
    TY_ASSIGN_OR_RETURN(std::vector<bool> any, AnyRank(job.collective, {Raised(job.options.stop), batch.has_value()}));
    if (any[0]) return absl::AbortedError(absl::StrCat("job ", job.id(), " was stopped"));
    if (!any[1]) break;
    if (batch) {
      *examples += batch->batch_size();
      decode.decode.row_keys = StridedRowKeys(b, data.rows, batch->batch_size(), rank, world);
    }
    TY_ASSIGN_OR_RETURN(DecodedRows rows,
                        DecodeAndGather(job.model.get(), batch ? &*batch : nullptr, decode, job.collective));
    if (rank != 0) continue;
    for (int64_t i = 0; i < rows.size(); ++i) {
      lines.push_back({{"index", (b * data.rows + rows.row[i]) * world + rows.rank[i]},
                       {"input", text(rows.inputs[i])},
                       {"target", text(rows.targets[i])},
                       {"prediction", text(rows.predictions[i])},
                       {"prediction_score", rows.prediction_scores[i].item<double>()},
                       {"target_score", rows.target_scores[i].item<double>()}});
    }
  }
  std::sort(lines.begin(), lines.end(), [](const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
    return a["index"].get<int64_t>() < b["index"].get<int64_t>();
  });
  return lines;
}

// Rank 0, EVALUATION: the task's metric functions over every example,
// written as TensorBoard scalars at the checkpoint's step and as JSON.
absl::StatusOr<MetricResults> EvaluateSplit(const JobSpec& spec, const Task& task,
                                            const std::vector<nlohmann::ordered_json>& all, int64_t checkpoint_step) {
  std::vector<std::string> targets, predictions;
  std::vector<double> target_scores;
  AuxValues aux;
  for (const auto& line : all) {
    targets.push_back(line["target"].get<std::string>());
    predictions.push_back(line["prediction"].get<std::string>());
    target_scores.push_back(line["target_score"].get<double>());
    aux["scores"].push_back(line["prediction_score"].get<double>());
  }
  TY_ASSIGN_OR_RETURN(std::vector<MetricFn> fns, InferEvalMetricFns(task));
  TY_ASSIGN_OR_RETURN(MetricResults metrics, ComputeMetrics(fns, targets, &predictions, &aux, &target_scores));
  metrics["examples"] = static_cast<double>(all.size());
  MetricsManager writer("inference_eval/" + spec.task(), spec.output_dir(), 0, 1);
  writer.WriteScalars(checkpoint_step, std::map<std::string, double>(metrics.begin(), metrics.end()));
  const InferenceConfig& config = spec.inference();
  nlohmann::ordered_json summary = {
      {"task", spec.task()}, {"split", config.split()}, {"checkpoint_step", checkpoint_step}, {"metrics", metrics}};
  std::error_code ec;
  std::filesystem::create_directories(spec.output_dir() + "/inference_eval", ec);
  TY_RETURN_IF_ERROR(WriteFileAtomically(
      absl::StrCat(spec.output_dir(), "/inference_eval/", SplitOutputName(spec, checkpoint_step), ".json"),
      summary.dump(2) + "\n"));
  return metrics;
}

}  // namespace

std::string SplitOutputName(const JobSpec& spec, int64_t checkpoint_step) {
  std::string name = absl::StrCat(spec.task(), "-", spec.inference().split());
  if (spec.restore().mode() == RestoreConfig::ALL) absl::StrAppend(&name, "-", checkpoint_step);
  return name;
}

absl::StatusOr<InferOutcome> InferSplit(const JobComponents& job, int64_t checkpoint_step) {
  const JobSpec& spec = job.spec;
  if (job.trains()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " is a ", JobKind_Name(spec.kind()),
                                                      " job: Infer runs EVALUATION and INFERENCE jobs"));
  }
  InferOutcome out;
  try {
    TY_ASSIGN_OR_RETURN(const Task* task, job.registry->Get(spec.task()));
    const std::string dir = spec.output_dir() + "/inference";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat("output_dir: cannot create ", dir, ": ", ec.message()));
    TY_ASSIGN_OR_RETURN(std::vector<nlohmann::ordered_json> all, DecodeSplit(job, *task, &out.examples));
    spdlog::info("job {}: rank {} decoded {} example(s)", job.id(), job.rank(), out.examples);
    if (job.rank() != 0) return out;
    std::string lines;
    for (const auto& line : all) absl::StrAppend(&lines, line.dump(), "\n");
    out.output = absl::StrCat(dir, "/", SplitOutputName(spec, checkpoint_step), ".jsonl");
    TY_RETURN_IF_ERROR(WriteFileAtomically(out.output, lines));
    if (spec.kind() == INFERENCE) return out;
    TY_ASSIGN_OR_RETURN(MetricResults metrics, EvaluateSplit(spec, *task, all, checkpoint_step));
    for (const auto& [name, v] : metrics) out.metrics[spec.task() + "/" + name] = v;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("inference: ", e.what()));
  }
  return out;
}

}  // namespace trainyard
