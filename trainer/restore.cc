#include "trainer/restore.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "model/weights.h"
#include "re2/re2.h"

namespace trainyard {

absl::StatusOr<std::string> ChooseCheckpoint(const RestoreConfig& restore, const std::string& output_dir,
                                             std::vector<SkippedCheckpoint>* skipped) {
  if (restore.mode() == RestoreConfig::SPECIFIC) {
    return !restore.path().empty() ? restore.path() : absl::StrCat(output_dir, "/checkpoint_", restore.step());
  }
  if (restore.mode() != RestoreConfig::LATEST) return std::string();
  const std::string where = restore.path().empty() ? output_dir : restore.path();
  std::vector<SkippedCheckpoint> local;
  std::vector<SkippedCheckpoint>* why = skipped != nullptr ? skipped : &local;
  const size_t before = why->size();
  absl::StatusOr<std::string> latest = LatestGoodCheckpoint(where, why);
  if (latest.ok()) return *latest;
  if (why->size() > before && !restore.fallback_to_scratch()) {
    return absl::DataLossError(absl::StrCat("restore: every checkpoint under ", where, " is damaged or incomplete (",
                                            (*why)[before].why, "); set restore.fallback_to_scratch to start over"));
  }
  return std::string();
}

absl::StatusOr<TrainCheckpoint> ReadRestartCheckpoint(const std::string& preferred, const std::string& output_dir,
                                                      std::vector<SkippedCheckpoint>* skipped,
                                                      const SlotFilter& keep_slot, const ParamFilter& keep_param) {
  std::vector<std::string> candidates = {preferred};
  const std::map<int64_t, std::string> all = ListCheckpoints(output_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->second != preferred) candidates.push_back(it->second);
  }
  for (const std::string& dir : candidates) {
    absl::StatusOr<TrainCheckpoint> ckpt = ReadTrainCheckpoint(dir, keep_slot, keep_param);
    if (ckpt.ok()) return ckpt;
    if (!absl::IsDataLoss(ckpt.status()) && !absl::IsNotFound(ckpt.status())) return ckpt.status();
    if (skipped != nullptr) skipped->push_back({dir, std::string(ckpt.status().message())});
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint under ", output_dir, " reads back whole"));
}

absl::StatusOr<bool> ApplyCheckpoint(const TrainCheckpoint& ckpt, const RestoreConfig& restore, T5Impl* network,
                                     Optimizer* optimizer, const ParamFilter& hold) {
  TensorMap params;
  for (const auto& [name, tensor] : ckpt.params) {
    std::string target = name;
    bool dropped = false;
    for (const auto& rename : restore.assignment_map()) {
      RE2 pattern(rename.pattern());
      if (!pattern.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("restore.assignment_map: pattern '", rename.pattern(), "': ", pattern.error()));
      }
      if (RE2::FullMatch(name, pattern)) {
        RE2::Replace(&target, pattern, rename.replacement());
        dropped = rename.replacement().empty();
        break;
      }
    }
    if (!dropped) params[target] = tensor;
  }
  const bool strict = !restore.has_strict() || restore.strict();
  absl::Status assigned = AssignParameters(params, strict, network, hold);
  if (!assigned.ok())
    return absl::Status(assigned.code(), absl::StrCat("restore: ", ckpt.dir, ": ", assigned.message()));
  // The optimizer state belongs to the same parameters: the same model up to
  // its dropout rate (a training-time choice, which fine-tuning often
  // changes).
  ModelConfig saved = ckpt.config, running = network->config();
  saved.clear_dropout_rate();
  running.clear_dropout_rate();
  const bool same_model = saved.SerializeAsString() == running.SerializeAsString();
  if (ckpt.optimizer.empty() || !same_model || restore.assignment_map_size() > 0 || optimizer == nullptr) return false;
  absl::Status loaded = optimizer->LoadState(ckpt.optimizer);
  if (!loaded.ok()) return absl::Status(loaded.code(), absl::StrCat("restore: ", ckpt.dir, ": ", loaded.message()));
  return true;
}

}  // namespace trainyard
