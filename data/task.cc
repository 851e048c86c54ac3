#include "data/task.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random.h"
#include "data/span_corruption.h"

namespace trainyard {
namespace {

constexpr char kComponentField[] = "__mixture_component";

// The examples of a mixture's split: position i comes from component
// schedule_[i].first, at its index schedule_[i].second.
class MixtureSource : public ExampleSource {
 public:
  MixtureSource(std::vector<std::unique_ptr<ExampleSource>> sources, std::vector<std::pair<int32_t, int64_t>> schedule)
      : sources_(std::move(sources)), schedule_(std::move(schedule)) {}
  int64_t size() const override { return static_cast<int64_t>(schedule_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index < 0 || index >= size()) return absl::OutOfRangeError(absl::StrCat("example ", index));
    const auto& [component, local] = schedule_[static_cast<size_t>(index)];
    absl::StatusOr<Example> ex = sources_[component]->Get(local);
    if (ex.ok()) (*ex)[kComponentField] = std::to_string(component);
    return ex;
  }

 private:
  std::vector<std::unique_ptr<ExampleSource>> sources_;
  std::vector<std::pair<int32_t, int64_t>> schedule_;
};

// The task an example of `task` goes through: a mixture's example names
// its component (and loses that field); any other task is itself.
absl::StatusOr<const Task*> ChainOf(const Task& task, Example* example) {
  if (task.components.empty()) return &task;
  auto it = example->find(kComponentField);
  size_t k = 0;
  if (it == example->end() || !absl::SimpleAtoi(it->second, &k) || k >= task.components.size()) {
    return absl::InternalError(absl::StrCat("mixture ", task.name, ": an example without its component"));
  }
  example->erase(it);
  return task.components[k].first;
}

// A pretokenized feature's ids (little-endian int32s), each one the
// vocabulary has.
absl::Status UnpackCheckedIds(const Task& task, const std::string& feature, const std::string& packed,
                              TokenizedExample* out) {
  std::vector<int32_t>& ids = feature == "inputs" ? out->inputs : out->targets;
  ids.resize(packed.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), packed.data(), ids.size() * 4);
  const int32_t size = task.vocabulary->size();
  for (int32_t id : ids) {
    if (id < 0 || id >= size) {
      return absl::InvalidArgumentError(absl::StrCat("task ", task.name, ": ", feature, " has the token id ", id,
                                                     ", outside its vocabulary's ", size, " ids"));
    }
  }
  return absl::OkStatus();
}

absl::Status EncodeFeatures(const Task& task, const Example& example, TokenizedExample* out) {
  for (const char* feature : {"inputs", "targets"}) {
    auto it = example.find(feature);
    if (it == example.end()) continue;
    if (task.pretokenized) {
      if (absl::Status s = UnpackCheckedIds(task, feature, it->second, out); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<std::vector<int>> ids = task.vocabulary->Encode(it->second);
    if (!ids.ok()) return ids.status();
    (std::string(feature) == "inputs" ? out->inputs : out->targets).assign(ids->begin(), ids->end());
  }
  return absl::OkStatus();
}

// The token preprocessors, EOS, and the check that both features are there.
absl::StatusOr<TokenizedExample> FinishTokens(const Task& task, TokenizedExample out, std::mt19937_64* rng) {
  for (const TokenPreprocessor& preprocess : task.token_preprocessors) {
    if (rng == nullptr) return absl::InternalError("token preprocessors need a generator");
    absl::StatusOr<TokenizedExample> next = preprocess(std::move(out), rng);
    if (!next.ok()) return next.status();
    out = std::move(*next);
  }
  if (task.add_eos) {
    out.inputs.push_back(Vocabulary::kEosId);
    out.targets.push_back(Vocabulary::kEosId);
  }
  if (out.inputs.empty() || out.targets.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task.name, ": an example has no ", out.inputs.empty() ? "inputs" : "targets"));
  }
  return out;
}

}  // namespace

absl::StatusOr<TokenizedExample> Tokenize(const Task& task, const Example& example, std::mt19937_64* rng) {
  Example ex = example;
  absl::StatusOr<const Task*> chain = ChainOf(task, &ex);
  if (!chain.ok()) return chain.status();
  TokenizedExample out;
  if (absl::Status s = EncodeFeatures(**chain, ex, &out); !s.ok()) return s;
  return FinishTokens(**chain, std::move(out), rng);
}

uint64_t SegmentSeed(uint64_t seed, int64_t segment) {
  // Segment 0 keeps the example's own seed: a task that does not split
  // draws exactly what it drew before splitting existed.
  return segment == 0 ? seed : seed ^ SplitMix64(static_cast<uint64_t>(segment) + 0x5347u);
}

uint64_t ExampleSeed(uint64_t seed, int64_t epoch, int64_t index) {
  return SplitMix64(seed) ^ SplitMix64(static_cast<uint64_t>(epoch) << 1) ^
         SplitMix64(static_cast<uint64_t>(index) * 2 + 1);
}

absl::StatusOr<std::vector<TokenizedExample>> TokenizeSegments(const Task& task, const Example& example,
                                                               int64_t inputs_length, uint64_t seed) {
  Example ex = example;
  absl::StatusOr<const Task*> chain_or = ChainOf(task, &ex);
  if (!chain_or.ok()) return chain_or.status();
  const Task& chain = **chain_or;
  TokenizedExample tokens;
  if (absl::Status s = EncodeFeatures(chain, ex, &tokens); !s.ok()) return s;
  const int64_t length = chain.split_length ? chain.split_length(inputs_length) : 0;
  std::vector<TokenizedExample> segments;
  const int64_t n = static_cast<int64_t>(tokens.targets.size());
  if (length <= 0 || n <= length) {
    segments.push_back(std::move(tokens));
  } else {
    for (int64_t begin = 0; begin < n; begin += length) {
      TokenizedExample segment;
      segment.inputs = tokens.inputs;
      segment.targets.assign(tokens.targets.begin() + begin, tokens.targets.begin() + std::min(n, begin + length));
      segments.push_back(std::move(segment));
    }
  }
  std::vector<TokenizedExample> out;
  out.reserve(segments.size());
  for (size_t s = 0; s < segments.size(); ++s) {
    std::mt19937_64 rng(SegmentSeed(seed, static_cast<int64_t>(s)));
    absl::StatusOr<TokenizedExample> done = FinishTokens(chain, std::move(segments[s]), &rng);
    if (!done.ok()) return done.status();
    out.push_back(std::move(*done));
  }
  return out;
}

Preprocessor Rekey(std::map<std::string, std::string> mapping) {
  return [mapping](Example ex) -> absl::StatusOr<absl::optional<Example>> {
    Example out;
    for (const auto& [to, from] : mapping) {
      auto it = ex.find(from);
      if (it == ex.end()) return absl::InvalidArgumentError(absl::StrCat("rekey: no feature \"", from, "\""));
      out[to] = it->second;
    }
    return absl::optional<Example>(std::move(out));
  };
}

namespace {

// A text step's input feature, or kInvalidArgument naming it.
absl::StatusOr<std::string> TextFeature(const Example& ex, const std::string& step, const std::string& name) {
  auto it = ex.find(name);
  if (it == ex.end()) return absl::InvalidArgumentError(absl::StrCat(step, ": no feature \"", name, "\""));
  return it->second;
}

}  // namespace

Preprocessor Translate(std::string source_feature, std::string source_name, std::string target_feature,
                       std::string target_name) {
  const std::string prefix = absl::StrCat("translate ", source_name, " to ", target_name, ": ");
  return [=](Example ex) -> absl::StatusOr<absl::optional<Example>> {
    absl::StatusOr<std::string> source = TextFeature(ex, "translate", source_feature);
    if (!source.ok()) return source.status();
    absl::StatusOr<std::string> target = TextFeature(ex, "translate", target_feature);
    if (!target.ok()) return target.status();
    return absl::optional<Example>(Example{{"inputs", prefix + *source}, {"targets", std::move(*target)}});
  };
}

Preprocessor Summarize(std::string article_key, std::string summary_key) {
  return [=](Example ex) -> absl::StatusOr<absl::optional<Example>> {
    absl::StatusOr<std::string> article = TextFeature(ex, "summarize", article_key);
    if (!article.ok()) return article.status();
    absl::StatusOr<std::string> summary = TextFeature(ex, "summarize", summary_key);
    if (!summary.ok()) return summary.status();
    return absl::optional<Example>(Example{{"inputs", "summarize: " + *article}, {"targets", std::move(*summary)}});
  };
}

TokenPreprocessor SpanCorruption(const Vocabulary& vocabulary, double noise_density, double mean_noise_span_length) {
  const int extra_ids = vocabulary.extra_ids();
  const int32_t first_sentinel = extra_ids > 0 ? vocabulary.ExtraId(0) : -1;
  return [=](TokenizedExample ex, std::mt19937_64* rng) -> absl::StatusOr<TokenizedExample> {
    if (extra_ids == 0) return absl::FailedPreconditionError("span corruption needs extra ids");
    TokenizedExample out = SpanCorrupt(ex.targets, first_sentinel, noise_density, mean_noise_span_length, rng);
    // SpanCorrupt appends EOS; the task appends its own.
    out.inputs.pop_back();
    out.targets.pop_back();
    return out;
  };
}

TokenPreprocessor PrefixLm() {
  return [](TokenizedExample ex, std::mt19937_64* rng) -> absl::StatusOr<TokenizedExample> {
    const size_t n = ex.targets.size();
    if (n < 2) return absl::InvalidArgumentError("prefix LM needs at least 2 target tokens");
    const size_t split = 1 + static_cast<size_t>((*rng)() % (n - 1));  // 1..n-1
    TokenizedExample out;
    out.inputs.assign(ex.targets.begin(), ex.targets.begin() + static_cast<std::ptrdiff_t>(split));
    out.targets.assign(ex.targets.begin() + static_cast<std::ptrdiff_t>(split), ex.targets.end());
    return out;
  };
}

std::vector<std::string> TokenPreprocessorNames() { return {"span_corruption", "prefix_lm"}; }

absl::StatusOr<TokenPreprocessor> TokenPreprocessorByName(const std::string& name, const Vocabulary& vocabulary) {
  if (name == "prefix_lm") return PrefixLm();
  if (name == "span_corruption") {
    if (vocabulary.extra_ids() == 0) {
      return absl::FailedPreconditionError(absl::StrCat("span_corruption: the vocabulary ", vocabulary.path(),
                                                        " has no extra ids (the sentinels that replace the spans)"));
    }
    return SpanCorruption(vocabulary);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("token preprocessor \"", name, "\" is not one of: ", absl::StrJoin(TokenPreprocessorNames(), ", ")));
}

TaskRegistry& TaskRegistry::Global() {
  static TaskRegistry* registry = new TaskRegistry;
  return *registry;
}

absl::Status TaskRegistry::Add(Task task) {
  if (task.name.empty() || !task.source || task.vocabulary == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("task \"", task.name, "\" needs a name, a source and a vocabulary"));
  }
  MutexLock lock(&mu_);
  if (tasks_.count(task.name)) {
    return absl::AlreadyExistsError(absl::StrCat("task \"", task.name, "\" is already registered"));
  }
  const std::string name = task.name;
  tasks_[name] = std::make_unique<Task>(std::move(task));
  return absl::OkStatus();
}

absl::StatusOr<const Task*> TaskRegistry::Get(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = tasks_.find(name);
  if (it == tasks_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, t] : tasks_) names.push_back(n);
    return absl::NotFoundError(
        absl::StrCat("no task \"", name, "\"; registered: ", names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
  }
  return it->second.get();
}

std::vector<std::string> TaskRegistry::Names() const {
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [n, t] : tasks_) names.push_back(n);
  return names;
}

namespace {

// A mixture's tasks (a nested mixture counts as its own) and their rates,
// each task once.
struct MixtureComponents {
  std::vector<const Task*> tasks;
  std::vector<double> weights;

  void Add(const Task* task, double rate) {
    for (size_t k = 0; k < tasks.size(); ++k) {
      if (tasks[k] == task) {
        weights[k] += rate;
        return;
      }
    }
    tasks.push_back(task);
    weights.push_back(rate);
  }
};

// The components of mixture `name` from the registered tasks in `rates`: a
// nested mixture's rate is shared among its tasks by their shares.
absl::StatusOr<MixtureComponents> ResolveComponents(const TaskRegistry& registry, const std::string& name,
                                                    const std::vector<std::pair<std::string, double>>& rates) {
  MixtureComponents components;
  for (const auto& [task_name, rate] : rates) {
    if (!(rate > 0) || !std::isfinite(rate)) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture ", name, ": rate of ", task_name, " is ", rate, "; must be > 0"));
    }
    absl::StatusOr<const Task*> task = registry.Get(task_name);
    if (!task.ok()) return absl::NotFoundError(absl::StrCat("mixture ", name, ": ", task.status().message()));
    if ((*task)->components.empty()) {
      components.Add(*task, rate);
    } else {
      for (const auto& [leaf, share] : (*task)->components) components.Add(leaf, rate * share);
    }
  }
  return components;
}

// kInvalidArgument unless the tasks of mixture `name` share one vocabulary
// (the same file and size).
absl::Status CheckSharedVocabulary(const std::string& name, const std::vector<const Task*>& components) {
  for (const Task* task : components) {
    if (task->vocabulary->path() != components[0]->vocabulary->path() ||
        task->vocabulary->size() != components[0]->vocabulary->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture ", name, ": ", task->name, " has another vocabulary than ", components[0]->name));
    }
  }
  return absl::OkStatus();
}

// The source of mixture `name`'s splits: each split holds its components'
// splits together, each component's examples in order, wrapping around.
std::function<absl::StatusOr<std::unique_ptr<ExampleSource>>(const std::string& split)> MixtureSplits(
    const std::string& name, const std::vector<const Task*>& components, const std::vector<double>& weights,
    double sum) {
  return [components, weights, sum, name](const std::string& split) -> absl::StatusOr<std::unique_ptr<ExampleSource>> {
    std::vector<std::unique_ptr<ExampleSource>> sources;
    int64_t total = 0;
    for (const Task* t : components) {
      absl::StatusOr<std::unique_ptr<ExampleSource>> source = t->source(split);
      if (!source.ok()) return source.status();
      if ((*source)->size() == 0) {
        return absl::FailedPreconditionError(absl::StrCat("task ", t->name, ", split ", split, ": no examples"));
      }
      total += (*source)->size();
      sources.push_back(std::move(*source));
    }
    // Which component each position draws from: a weighted draw per
    // position from a generator seeded by the mixture's name.
    std::mt19937_64 gen(std::hash<std::string>()(name) ^ 0x6d69787475726573ull);
    std::vector<int64_t> next(sources.size(), 0);
    std::vector<std::pair<int32_t, int64_t>> schedule;
    schedule.reserve(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) {
      double u = static_cast<double>(gen() >> 11) / 9007199254740992.0 * sum;  // [0, sum)
      size_t k = 0;
      while (k + 1 < weights.size() && u >= weights[k]) u -= weights[k++];
      schedule.emplace_back(static_cast<int32_t>(k), next[k]++ % sources[k]->size());
    }
    return std::unique_ptr<ExampleSource>(new MixtureSource(std::move(sources), std::move(schedule)));
  };
}

// Each example goes through its own task's text preprocessors and keeps
// the name of its component for the token stage (ChainOf).
Preprocessor ComponentPreprocessors(const std::vector<const Task*>& components) {
  return [components](Example ex) -> absl::StatusOr<absl::optional<Example>> {
    const std::string component = ex.at(kComponentField);
    const size_t k = static_cast<size_t>(std::stoul(component));
    ex.erase(kComponentField);
    for (const Preprocessor& preprocess : components[k]->preprocessors) {
      absl::StatusOr<absl::optional<Example>> out = preprocess(std::move(ex));
      if (!out.ok() || !out->has_value()) return out;
      ex = std::move(**out);
    }
    ex[kComponentField] = component;
    return absl::optional<Example>(std::move(ex));
  };
}

}  // namespace

absl::Status TaskRegistry::AddMixture(const std::string& name,
                                      const std::vector<std::pair<std::string, double>>& rates) {
  if (rates.empty()) return absl::InvalidArgumentError(absl::StrCat("mixture ", name, ": no tasks"));
  absl::StatusOr<MixtureComponents> resolved = ResolveComponents(*this, name, rates);
  if (!resolved.ok()) return resolved.status();
  const std::vector<const Task*>& components = resolved->tasks;
  const std::vector<double>& weights = resolved->weights;
  if (absl::Status s = CheckSharedVocabulary(name, components); !s.ok()) return s;
  double sum = 0;
  for (double w : weights) sum += w;
  Task mixture;
  mixture.name = name;
  mixture.vocabulary = components[0]->vocabulary;
  mixture.add_eos = components[0]->add_eos;
  for (size_t k = 0; k < components.size(); ++k) {
    mixture.components.emplace_back(components[k], weights[k] / sum);
    mixture.drops_examples |= components[k]->drops_examples;
  }
  mixture.source = MixtureSplits(name, components, weights, sum);
  mixture.preprocessors.push_back(ComponentPreprocessors(components));
  return Add(std::move(mixture));
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
