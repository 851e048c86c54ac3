// The warm-up before the first step and evaluation (T5X's compile_train
// and compile_eval): one pass per batch shape, its seconds reported once.
#include <algorithm>
#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch/device.h"
#include "trainer/trainer.h"

namespace trainyard {
namespace {

std::string ShapeKey(const char* kind, const T5Batch& b) {
  std::string key = kind;
  for (const torch::Tensor* t : {&b.encoder_input_tokens, &b.decoder_target_tokens}) {
    if (!t->defined()) continue;
    for (int64_t d : t->sizes()) absl::StrAppend(&key, ":", d);
  }
  if (b.packed()) key += ":packed";
  return key;
}

}  // namespace

absl::StatusOr<double> Trainer::CompileTrain(const T5Batch& batch) {
  const std::string key = ShapeKey("train", batch);
  if (compiled_.count(key)) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  // Every microbatch of a step has the first one's shape (uneven ones a
  // row less at most).
  const int64_t rows =
      std::min(std::max<int64_t>(batch.batch_size() / std::max(options_.num_microbatches, 1), 1), batch.batch_size());
  const T5Batch microbatch = batch.Slice(0, rows);
  if (parameters_sharded()) {
    if (absl::Status s = gatherer_->BeginPass(); !s.ok()) {
      ClearGrads();
      return s;
    }
  }
  LossOptions loss = options_.loss;
  if (loss.normalization == LossConfig::NUM_TARGET_TOKENS) {
    loss.loss_normalizing_factor = std::max(microbatch.decoder_loss_weights.sum().item<double>(), 1.0);
  }
  absl::StatusOr<LossOutput> out = model_->LossFn(microbatch, loss, DropoutGenerator(step(), 0));
  if (!out.ok()) {
    ClearGrads();
    return ForwardError(out.status());
  }
  // Keeping only a shard: the gradients are dropped as they come, never
  // the whole model's at once; otherwise they are dropped after.
  if (reducer_ != nullptr && reducer_->keeps_only_shard()) reducer_->ArmToDiscard();
  try {
    out->loss.backward();
  } catch (const c10::Error& e) {
    ClearGrads();
    return TorchErrorStatus("backward", e);
  }
  ClearGrads();
  SynchronizeDevice(device_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  compiled_.insert(key);
  train_compile_seconds_ = seconds;
  return seconds;
}

absl::StatusOr<std::map<std::string, double>> Trainer::CompileEval(const std::map<std::string, T5Batch>& batches) {
  TY_RETURN_IF_ERROR(GatherParameters());
  absl::Cleanup release = [this] { ReleaseParameters(); };
  std::map<std::string, double> seconds;
  for (const auto& [name, batch] : batches) {
    const auto start = std::chrono::steady_clock::now();
    const std::string key = ShapeKey("eval", batch);
    if (!compiled_.count(key)) {
      TY_RETURN_IF_ERROR(model_->EvalFn(batch, options_.loss).status());
      SynchronizeDevice(device_);
      compiled_.insert(key);
    }
    seconds[name] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    eval_compile_seconds_[name] = seconds[name];
  }
  return seconds;
}

}  // namespace trainyard
