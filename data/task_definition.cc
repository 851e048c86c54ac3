#include "data/task_definition.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/bundled.h"
#include "data/source.h"
#include "data/vocabulary.h"

namespace trainyard {

absl::Status RegisterTaskDefinition(const TaskDefinition& def, TaskRegistry* registry) {
  std::string vocab_path = def.vocabulary();
  if (vocab_path.empty()) {
    absl::StatusOr<std::string> bundled = FindBundledFile("vocab/digits_to_words.model");
    if (!bundled.ok()) return bundled.status();
    vocab_path = *bundled;
  }
  absl::StatusOr<std::unique_ptr<Vocabulary>> vocab = Vocabulary::Load(vocab_path);
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(),
                        absl::StrCat("task ", def.name(), ": vocabulary: ", vocab.status().message()));
  }
  Task task;
  task.name = def.name();
  task.vocabulary = std::shared_ptr<const Vocabulary>(std::move(*vocab));
  task.add_eos = !def.has_add_eos() || def.add_eos();
  task.metric_fns.assign(def.metric_fns().begin(), def.metric_fns().end());
  const std::map<std::string, std::string> splits(def.splits().begin(), def.splits().end());
  const std::string name = def.name();
  task.source = [splits, name](const std::string& split) -> absl::StatusOr<std::unique_ptr<ExampleSource>> {
    auto it = splits.find(split);
    if (it == splits.end()) {
      std::vector<std::string> names;
      for (const auto& [k, v] : splits) names.push_back(k);
      return absl::InvalidArgumentError(
          absl::StrCat("task ", name, ": split \"", split, "\" is not one of ", absl::StrJoin(names, ", ")));
    }
    absl::StatusOr<std::unique_ptr<ExampleSource>> source =
        absl::EndsWith(it->second, ".jsonl") ? OpenJsonlSource({it->second}) : OpenTsvSource({it->second});
    if (!source.ok()) {
      return absl::Status(source.status().code(),
                          absl::StrCat("task ", name, " split ", split, ": ", source.status().message()));
    }
    return source;
  };
  return registry->Add(std::move(task));
}

}  // namespace trainyard
