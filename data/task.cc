#include "data/task.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

absl::StatusOr<TokenizedExample> Tokenize(const Task& task, const Example& example) {
  TokenizedExample out;
  for (const char* feature : {"inputs", "targets"}) {
    auto it = example.find(feature);
    if (it == example.end()) {
      return absl::InvalidArgumentError(absl::StrCat("task ", task.name, ": example has no \"",
                                                     feature, "\""));
    }
    absl::StatusOr<std::vector<int>> ids = task.vocabulary->Encode(it->second);
    if (!ids.ok()) return ids.status();
    std::vector<int32_t>& dst = std::string(feature) == "inputs" ? out.inputs : out.targets;
    dst.assign(ids->begin(), ids->end());
    if (task.add_eos) dst.push_back(Vocabulary::kEosId);
  }
  return out;
}

TaskRegistry& TaskRegistry::Global() {
  static TaskRegistry* registry = new TaskRegistry;
  return *registry;
}

absl::Status TaskRegistry::Add(Task task) {
  if (task.name.empty() || !task.source || task.vocabulary == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", task.name, "\" needs a name, a source and a vocabulary"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (tasks_.count(task.name)) {
    return absl::AlreadyExistsError(absl::StrCat("task \"", task.name, "\" is already registered"));
  }
  const std::string name = task.name;
  tasks_[name] = std::make_unique<Task>(std::move(task));
  return absl::OkStatus();
}

absl::StatusOr<const Task*> TaskRegistry::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(name);
  if (it == tasks_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, t] : tasks_) names.push_back(n);
    return absl::NotFoundError(absl::StrCat("no task \"", name, "\"; registered: ",
                                            names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
  }
  return it->second.get();
}

std::vector<std::string> TaskRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [n, t] : tasks_) names.push_back(n);
  return names;
}

absl::Status RegisterDigitsToWords(const std::string& vocabulary_path, TaskRegistry* registry) {
  absl::StatusOr<std::unique_ptr<Vocabulary>> vocab = Vocabulary::Load(vocabulary_path);
  if (!vocab.ok()) return vocab.status();
  Task task;
  task.name = "digits_to_words";
  task.source = DigitsToWordsSource;
  task.vocabulary = std::shared_ptr<const Vocabulary>(std::move(*vocab));
  task.metric_fns = {"exact_match", "sequence_accuracy"};
  return registry->Add(std::move(task));
}

}  // namespace trainyard
