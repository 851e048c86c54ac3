#include "trainer/restore.h"

#include "absl/strings/str_cat.h"
#include "model/weights.h"
#include "re2/re2.h"

namespace trainyard {

absl::StatusOr<std::string> ChooseCheckpoint(const RestoreConfig& restore, const std::string& output_dir,
                                             std::vector<std::string>* skipped) {
  if (restore.mode() == RestoreConfig::SPECIFIC) {
    return !restore.path().empty() ? restore.path() : absl::StrCat(output_dir, "/checkpoint_", restore.step());
  }
  if (restore.mode() != RestoreConfig::LATEST) return std::string();
  const std::string where = restore.path().empty() ? output_dir : restore.path();
  std::vector<std::string> local;
  std::vector<std::string>* why = skipped != nullptr ? skipped : &local;
  const size_t before = why->size();
  absl::StatusOr<std::string> latest = LatestGoodCheckpoint(where, why);
  if (latest.ok()) return *latest;
  if (why->size() > before && !restore.fallback_to_scratch()) {
    return absl::DataLossError(absl::StrCat("restore: every checkpoint under ", where,
                                            " is damaged or incomplete (", (*why)[before],
                                            "); set restore.fallback_to_scratch to start over"));
  }
  return std::string();
}

absl::StatusOr<bool> ApplyCheckpoint(const TrainCheckpoint& ckpt, const RestoreConfig& restore, T5Impl* network,
                                     Optimizer* optimizer) {
  TensorMap params;
  for (const auto& [name, tensor] : ckpt.params) {
    std::string target = name;
    bool dropped = false;
    for (const auto& rename : restore.assignment_map()) {
      RE2 pattern(rename.pattern());
      if (!pattern.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("restore.assignment_map: pattern '", rename.pattern(),
                                                       "': ", pattern.error()));
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
  absl::Status assigned = AssignParameters(params, strict, network);
  if (!assigned.ok()) return absl::Status(assigned.code(), absl::StrCat("restore: ", ckpt.dir, ": ", assigned.message()));
  const bool same_model = ckpt.config.SerializeAsString() == network->config().SerializeAsString();
  if (ckpt.optimizer.empty() || !same_model || restore.assignment_map_size() > 0 || optimizer == nullptr) return false;
  absl::Status loaded = optimizer->LoadState(ckpt.optimizer);
  if (!loaded.ok()) return absl::Status(loaded.code(), absl::StrCat("restore: ", ckpt.dir, ": ", loaded.message()));
  return true;
}

}  // namespace trainyard
