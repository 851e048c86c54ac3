// TrainingJob's inference: EVALUATION and INFERENCE jobs over a split
// (Infer), and rank 0's record of an inference evaluation during training
// (WriteInferEval). The rest of the class is in training_job.cc.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "data/iterator.h"
#include "evaluation/metric_fns.h"
#include "job/infer_eval.h"
#include "job/job_internal.h"
#include "job/training_job.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "trainer/metrics_manager.h"

namespace trainyard {

using job_internal::Raised;

void TrainingJob::WriteInferEval(const std::string& task, const MetricResults& values) {
  auto& writer = infer_eval_writers_[task];
  if (writer == nullptr) {
    writer = std::make_unique<MetricsManager>("inference_eval/" + task, spec_.output_dir(), 0, 1);
  }
  writer->WriteScalars(trainer_->step(), std::map<std::string, double>(values.begin(), values.end()));
  // One JSON line per eval step, the file rewritten whole (never seen half
  // written).
  const std::string path =
      absl::StrCat(spec_.output_dir(), "/inference_eval/", task, "-", spec_.eval().split(), ".jsonl");
  std::string lines;
  {
    std::ifstream in(path);
    std::stringstream existing;
    existing << in.rdbuf();
    lines = existing.str();
  }
  nlohmann::ordered_json line = {
      {"task", task}, {"split", spec_.eval().split()}, {"step", trainer_->step()}, {"metrics", values}};
  absl::StrAppend(&lines, line.dump(), "\n");
  std::error_code ec;
  std::filesystem::create_directories(spec_.output_dir() + "/inference_eval", ec);
  if (absl::Status s = WriteFileAtomically(path, lines); !s.ok()) {
    spdlog::error("job {}: inference evaluation of {}: {}", id(), task, s.ToString());
  }
}

absl::StatusOr<InferOutcome> TrainingJob::Infer() {
  if (trains()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id(), " is a ", JobKind_Name(spec_.kind()),
                                                      " job: Infer runs EVALUATION and INFERENCE jobs"));
  }
  const InferenceConfig& config = spec_.inference();
  InferOutcome out;
  try {
    TY_ASSIGN_OR_RETURN(const Task* task, registry_.Get(spec_.task()));
    IteratorOptions data;
    data.split = config.split();
    data.rows = spec_.batch_size() / world_size();
    data.inputs_length = spec_.feature_lengths().inputs();
    data.targets_length = spec_.feature_lengths().targets();
    data.pack = false;
    data.shuffle = false;  // the split in its order: shard r holds examples r, r+W, ...
    data.repeat = false;
    data.rank = rank();
    data.world_size = world_size();
    TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(*task, data));
    const DecodeOptions decode = DecodeOptionsFromSpec(spec_, rank());
    const Vocabulary& vocab = *task->vocabulary;
    auto text = [&](const torch::Tensor& row) { return DecodeRow(vocab, row); };
    // This rank's shard, written as JSON lines with each example's index in
    // the split.
    const std::string dir = spec_.output_dir() + "/inference";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat("output_dir: cannot create ", dir, ": ", ec.message()));
    const std::string base = absl::StrCat(dir, "/", spec_.task(), "-", config.split());
    auto shard_path = [&](int r) { return absl::StrCat(base, ".shard-", r, "-of-", world_size(), ".jsonl"); };
    std::string lines;
    int64_t k = 0;
    for (int b = 0; config.num_batches() == 0 || b < config.num_batches(); ++b) {
      if (Raised(options_.stop)) return absl::AbortedError(absl::StrCat("job ", id(), " was stopped"));
      absl::StatusOr<ConvertedBatch> converted = it->Next();
      if (absl::IsOutOfRange(converted.status())) break;
      TY_RETURN_IF_ERROR(converted.status());
      const T5Batch batch = ToT5Batch(*converted);
      TY_ASSIGN_OR_RETURN(Predictions predicted, model_->PredictBatchWithAux(batch, decode));
      TY_ASSIGN_OR_RETURN(torch::Tensor scores, model_->ScoreBatch(batch));
      for (int64_t r = 0; r < converted->rows; ++r, ++k) {
        nlohmann::ordered_json line = {{"index", k * world_size() + rank()},
                                       {"input", text(batch.encoder_input_tokens[r])},
                                       {"target", text(batch.decoder_target_tokens[r])},
                                       {"prediction", text(predicted.tokens[r])},
                                       {"prediction_score", predicted.scores[r].item<double>()},
                                       {"target_score", scores[r].item<double>()}};
        absl::StrAppend(&lines, line.dump(), "\n");
      }
    }
    TY_RETURN_IF_ERROR(WriteFileAtomically(shard_path(rank()), lines));
    out.examples = k;
    spdlog::info("job {}: rank {} wrote {} prediction(s) to {}", id(), rank(), k, shard_path(rank()));
    // Every shard is written before rank 0 reads them.
    TY_RETURN_IF_ERROR(CollectiveFailure(collective_->Barrier()));
    if (rank() != 0) return out;

    std::vector<nlohmann::json> all;
    for (int r = 0; r < world_size(); ++r) {
      const std::string path = shard_path(r);
      std::ifstream in(path);
      if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot read (is output_dir shared by the workers?)"));
      std::string line;
      while (std::getline(in, line)) all.push_back(nlohmann::json::parse(line));
    }
    std::sort(all.begin(), all.end(),
              [](const nlohmann::json& a, const nlohmann::json& b) { return a["index"] < b["index"]; });
    const std::string merged = base + ".jsonl";
    std::string merged_lines;
    for (const auto& line : all) absl::StrAppend(&merged_lines, line.dump(), "\n");
    TY_RETURN_IF_ERROR(WriteFileAtomically(merged, merged_lines));
    for (int r = 0; r < world_size(); ++r) std::remove(shard_path(r).c_str());
    out.output = merged;
    if (spec_.kind() == INFERENCE) return out;

    // EVALUATION: the task's metric functions over every example.
    std::vector<std::string> targets, predictions;
    std::vector<double> target_scores;
    AuxValues aux;
    for (const auto& line : all) {
      targets.push_back(line["target"].get<std::string>());
      predictions.push_back(line["prediction"].get<std::string>());
      target_scores.push_back(line["target_score"].get<double>());
      aux["scores"].push_back(line["prediction_score"].get<double>());
    }
    std::vector<MetricFn> fns;
    for (const std::string& name : task->metric_fns) {
      absl::StatusOr<MetricFn> fn = BuiltinMetricFn(name);
      if (!fn.ok()) {
        return absl::Status(fn.status().code(), absl::StrCat("task ", task->name, ": ", fn.status().message()));
      }
      fns.push_back(*fn);
    }
    fns.push_back(*BuiltinMetricFn("mean_log_likelihood"));
    TY_ASSIGN_OR_RETURN(MetricResults metrics, ComputeMetrics(fns, targets, &predictions, &aux, &target_scores));
    metrics["examples"] = static_cast<double>(all.size());
    MetricsManager writer("inference_eval/" + spec_.task(), spec_.output_dir(), 0, 1);
    writer.WriteScalars(restored_step_, std::map<std::string, double>(metrics.begin(), metrics.end()));
    nlohmann::ordered_json summary = {
        {"task", spec_.task()}, {"split", config.split()}, {"checkpoint_step", restored_step_}, {"metrics", metrics}};
    std::filesystem::create_directories(spec_.output_dir() + "/inference_eval", ec);
    TY_RETURN_IF_ERROR(WriteFileAtomically(
        absl::StrCat(spec_.output_dir(), "/inference_eval/", spec_.task(), "-", config.split(), ".json"),
        summary.dump(2) + "\n"));
    for (const auto& [name, v] : metrics) out.metrics[spec_.task() + "/" + name] = v;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("inference: ", e.what()));
  }
  return out;
}

}  // namespace trainyard
