#include "data/task_definition.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/bundled.h"
#include "data/prepared_data.h"
#include "data/source.h"
#include "data/tfrecord.h"
#include "data/vocabulary.h"
#include "spec/task_spec.h"

namespace trainyard {
namespace {

// A translate or summarize step.
absl::StatusOr<Preprocessor> TextStep(const PreprocessorConfig& p) {
  if (p.has_summarize()) return Summarize(p.summarize().article_key(), p.summarize().summary_key());
  const TranslateConfig& t = p.translate();
  absl::StatusOr<std::string> source = T5LanguageName(t.source_language());
  if (!source.ok()) return source.status();
  absl::StatusOr<std::string> target = T5LanguageName(t.target_language());
  if (!target.ok()) return target.status();
  return Translate(t.source_language(), *source, t.target_language(), *target);
}

absl::Status BuildChain(const TaskDefinition& def, Task* task) {
  bool plain = false;
  for (const auto& [split, path] : def.splits()) plain |= IsPlainTextPath(path);
  // T5's rekey of plain text (the validator writes it into the spec; a
  // definition that did not pass through it gets the same).
  if (plain && !HasTextStep(def)) task->preprocessors.push_back(Rekey({{"targets", "text"}}));
  bool token_stage = false;
  for (const PreprocessorConfig& p : def.preprocessors()) {
    switch (p.kind_case()) {
      case PreprocessorConfig::kRekey:
        if (token_stage) {
          return absl::InvalidArgumentError(
              absl::StrCat("task ", def.name(), ": rekey comes before split_tokens, span_corruption and prefix_lm"));
        }
        task->preprocessors.push_back(
            Rekey(std::map<std::string, std::string>(p.rekey().key_map().begin(), p.rekey().key_map().end())));
        break;
      case PreprocessorConfig::kTranslate:
      case PreprocessorConfig::kSummarize: {
        if (token_stage) {
          return absl::InvalidArgumentError(
              absl::StrCat("task ", def.name(),
                           ": translate and summarize come before split_tokens, span_corruption and prefix_lm"));
        }
        absl::StatusOr<Preprocessor> step = TextStep(p);
        if (!step.ok())
          return absl::InvalidArgumentError(absl::StrCat("task ", def.name(), ": ", step.status().message()));
        task->preprocessors.push_back(*std::move(step));
        break;
      }
      case PreprocessorConfig::kSplitTokens:
        token_stage = true;
        break;
      case PreprocessorConfig::kSpanCorruption: {
        const SpanCorruptionConfig& s = p.span_corruption();
        task->token_preprocessors.push_back(
            SpanCorruption(*task->vocabulary, s.has_noise_density() ? s.noise_density() : kDefaultNoiseDensity,
                           s.has_mean_noise_span_length() ? s.mean_noise_span_length() : kDefaultMeanNoiseSpanLength));
        token_stage = true;
        break;
      }
      case PreprocessorConfig::kPrefixLm:
        task->token_preprocessors.push_back(PrefixLm());
        token_stage = true;
        break;
      case PreprocessorConfig::KIND_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat("task ", def.name(), ": a preprocessor with no kind"));
    }
  }
  if (SplitsDocuments(def)) {
    const TaskDefinition copy = def;
    task->split_length = [copy](int64_t inputs_length) { return SegmentLength(copy, inputs_length); };
  }
  return absl::OkStatus();
}

// How a definition's splits are read.
struct SplitReader {
  FileSourceOptions tfrecord_options;  // TFRecord, TFDS and seqio caches: the features
  std::string tfds_data_dir;
};

// Split `split`'s examples, by the form of its value.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSplit(const std::string& split, const std::string& value,
                                                         const SplitReader& reader) {
  switch (SplitFormatOf(value)) {
    case SplitFormat::kTfRecord:
      return OpenTfRecordSource({value}, reader.tfrecord_options);
    case SplitFormat::kTfds:
      return OpenTfdsSource(value, reader.tfds_data_dir, reader.tfrecord_options);
    case SplitFormat::kSeqioCache:
      return OpenSeqioCacheSource(value.substr(std::string(kSeqioCachePrefix).size()), split,
                                  reader.tfrecord_options.fields);
    case SplitFormat::kJsonl:
      return OpenJsonlSource({value});
    case SplitFormat::kText:
      return OpenTextSource({value});
    case SplitFormat::kTsv:
      break;
  }
  return OpenTsvSource({value});
}

}  // namespace

absl::Status RegisterTaskDefinition(const TaskDefinition& def, TaskRegistry* registry) {
  std::string vocab_path = def.vocabulary();
  if (vocab_path.empty()) {
    absl::StatusOr<std::string> bundled = FindBundledFile("vocab/digits_to_words.model");
    if (!bundled.ok()) return bundled.status();
    vocab_path = *bundled;
  }
  absl::StatusOr<std::unique_ptr<Vocabulary>> vocab = Vocabulary::Load(vocab_path, ExtraIds(def));
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(),
                        absl::StrCat("task ", def.name(), ": vocabulary: ", vocab.status().message()));
  }
  Task task;
  task.name = def.name();
  task.vocabulary = std::shared_ptr<const Vocabulary>(std::move(*vocab));
  task.add_eos = !def.has_add_eos() || def.add_eos();
  task.metric_fns.assign(def.metric_fns().begin(), def.metric_fns().end());
  if (absl::Status s = BuildChain(def, &task); !s.ok()) return s;
  const std::map<std::string, std::string> splits(def.splits().begin(), def.splits().end());
  const std::string name = def.name();
  SplitReader reader;
  reader.tfrecord_options.fields = TfRecordFeatures(def);
  reader.tfds_data_dir = def.tfds_data_dir();
  for (const auto& [split, value] : splits) task.pretokenized |= SplitFormatOf(value) == SplitFormat::kSeqioCache;
  task.source = [splits, name, reader](const std::string& split) -> absl::StatusOr<std::unique_ptr<ExampleSource>> {
    auto it = splits.find(split);
    if (it == splits.end()) {
      std::vector<std::string> names;
      for (const auto& [k, v] : splits) names.push_back(k);
      return absl::InvalidArgumentError(
          absl::StrCat("task ", name, ": split \"", split, "\" is not one of ", absl::StrJoin(names, ", ")));
    }
    absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenSplit(split, it->second, reader);
    if (!source.ok()) {
      return absl::Status(source.status().code(),
                          absl::StrCat("task ", name, " split ", split, ": ", source.status().message()));
    }
    return source;
  };
  return registry->Add(std::move(task));
}

absl::Status RegisterSpecTasks(const JobSpec& spec, TaskRegistry* registry, const std::string& vocabulary) {
  for (TaskDefinition def : spec.task_definitions()) {
    if (!vocabulary.empty()) def.set_vocabulary(vocabulary);
    if (absl::Status s = RegisterTaskDefinition(def, registry); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("task_definitions: ", s.message()));
    }
  }
  // Mixtures once the mixtures they name are registered; what is left when
  // no more can be added names an unknown component or a cycle.
  std::vector<const MixtureDefinition*> pending;
  for (const MixtureDefinition& mix : spec.mixture_definitions()) pending.push_back(&mix);
  auto is_pending = [&](const std::string& name) {
    for (const MixtureDefinition* m : pending) {
      if (m->name() == name) return true;
    }
    return false;
  };
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const MixtureDefinition& mix = **it;
      bool ready = true;
      for (const auto& c : mix.tasks()) ready = ready && !is_pending(c.name());
      if (!ready) {
        ++it;
        continue;
      }
      std::vector<std::pair<std::string, double>> rates;
      for (const auto& c : mix.tasks()) rates.emplace_back(c.name(), c.rate());
      if (absl::Status s = registry->AddMixture(mix.name(), rates); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("mixture_definitions: ", s.message()));
      }
      it = pending.erase(it);
      progress = true;
    }
    if (!progress) {
      std::vector<std::string> names;
      for (const MixtureDefinition* m : pending) names.push_back(m->name());
      return absl::InvalidArgumentError(
          absl::StrCat("mixture_definitions: ", absl::StrJoin(names, ", "), " contain each other (a cycle)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTaskVocabularies(const JobSpec& spec, const TaskRegistry& registry, int64_t vocab_size) {
  std::vector<std::string> tasks(spec.eval().tasks().begin(), spec.eval().tasks().end());
  tasks.push_back(spec.task());
  for (const std::string& name : tasks) {
    absl::StatusOr<const Task*> task = registry.Get(name);
    if (!task.ok()) return absl::InvalidArgumentError(absl::StrCat("eval.tasks: ", task.status().message()));
    const Vocabulary& vocab = *(*task)->vocabulary;
    if (vocab.size() > vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", name, ": its vocabulary has ", vocab.size(), " ids (", vocab.size() - vocab.extra_ids(),
          " pieces of ", vocab.path(), " and ", vocab.extra_ids(), " extra ids), more than the model's vocab_size ",
          vocab_size, "; use a smaller vocabulary or a model with a larger vocab_size (model.vocab_size overrides a ",
          "preset's)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard
