#include "spec/task_spec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "evaluation/metric_fns.h"
#include "spec/task_validation.h"

namespace trainyard {

const std::vector<std::string>& BundledTaskNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>{"digits_to_words"};
  return *names;
}

SpanCorruptionLengths SpanCorruptionLengthsOf(int64_t segment_tokens, double noise_density,
                                              double mean_noise_span_length, int eos) {
  // The same rounding as RandomSpansNoiseMask (data/span_corruption.cc).
  SpanCorruptionLengths out;
  const int64_t length = std::max<int64_t>(segment_tokens, 2);
  int64_t noise = static_cast<int64_t>(std::llround(static_cast<double>(length) * noise_density));
  noise = std::min(std::max<int64_t>(noise, 1), length - 1);
  int64_t spans =
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(noise) / mean_noise_span_length)));
  spans = std::min(spans, std::min(noise, length - noise));
  out.segment_tokens = segment_tokens;
  out.noise_tokens = noise;
  out.spans = spans;
  out.inputs = length - noise + spans + eos;
  out.targets = noise + spans + eos;
  return out;
}

SpanCorruptionLengths SpanCorruptionLengthsFor(int64_t inputs_length, double noise_density,
                                               double mean_noise_span_length, int eos) {
  int64_t tokens = 2;
  while (tokens < (int64_t{1} << 24) &&
         SpanCorruptionLengthsOf(tokens + 1, noise_density, mean_noise_span_length, eos).inputs <= inputs_length) {
    ++tokens;
  }
  return SpanCorruptionLengthsOf(tokens, noise_density, mean_noise_span_length, eos);
}

const SpanCorruptionConfig* FindSpanCorruption(const TaskDefinition& def) {
  for (const PreprocessorConfig& p : def.preprocessors()) {
    if (p.has_span_corruption()) return &p.span_corruption();
  }
  return nullptr;
}

bool HasPrefixLm(const TaskDefinition& def) {
  for (const PreprocessorConfig& p : def.preprocessors()) {
    if (p.has_prefix_lm()) return true;
  }
  return false;
}

const SplitTokensConfig* FindSplitTokens(const TaskDefinition& def) {
  for (const PreprocessorConfig& p : def.preprocessors()) {
    if (p.has_split_tokens()) return &p.split_tokens();
  }
  return nullptr;
}

namespace {

double NoiseDensity(const SpanCorruptionConfig& s) {
  return s.has_noise_density() ? s.noise_density() : kDefaultNoiseDensity;
}
double MeanNoiseSpanLength(const SpanCorruptionConfig& s) {
  return s.has_mean_noise_span_length() ? s.mean_noise_span_length() : kDefaultMeanNoiseSpanLength;
}
int Eos(const TaskDefinition& def) { return !def.has_add_eos() || def.add_eos() ? 1 : 0; }

}  // namespace

bool SplitsDocuments(const TaskDefinition& def) {
  return FindSplitTokens(def) != nullptr || FindSpanCorruption(def) != nullptr || HasPrefixLm(def);
}

int64_t SegmentLength(const TaskDefinition& def, int64_t inputs_length) {
  const SplitTokensConfig* split = FindSplitTokens(def);
  const SpanCorruptionConfig* span = FindSpanCorruption(def);
  if (split != nullptr && split->max_tokens_per_segment() > 0) return split->max_tokens_per_segment();
  if (span != nullptr) {
    return SpanCorruptionLengthsFor(inputs_length, NoiseDensity(*span), MeanNoiseSpanLength(*span), Eos(def))
        .segment_tokens;
  }
  if (split != nullptr || HasPrefixLm(def)) return std::max<int64_t>(1, inputs_length - Eos(def));
  return 0;
}

int ExtraIds(const TaskDefinition& def) {
  if (def.has_extra_ids()) return def.extra_ids();
  return FindSpanCorruption(def) != nullptr ? kDefaultSpanCorruptionExtraIds : 0;
}

bool IsPlainTextPath(const std::string& path) { return absl::EndsWith(path, ".txt"); }

bool IsTfRecordPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t at = name.rfind(".tfrecord");
  if (at == std::string::npos) return false;
  const std::string rest = name.substr(at + std::string(".tfrecord").size());
  return rest.empty() || rest == ".gz" || rest[0] == '-' || rest[0] == '*' || rest[0] == '?';
}

SplitFormat SplitFormatOf(const std::string& value) {
  if (absl::StartsWith(value, kSeqioCachePrefix)) return SplitFormat::kSeqioCache;
  if (absl::StartsWith(value, kTfdsPrefix)) return SplitFormat::kTfds;
  if (IsTfRecordPath(value)) return SplitFormat::kTfRecord;
  if (absl::EndsWith(value, ".jsonl")) return SplitFormat::kJsonl;
  if (IsPlainTextPath(value)) return SplitFormat::kText;
  return SplitFormat::kTsv;
}

namespace {

// "[from:to]" of a TFDS split: integers or percentages (both bounds the
// same unit), either may be left out.
absl::Status ParseTfdsSlice(const std::string& slice, TfdsSplit* out) {
  const std::vector<std::string> bounds = absl::StrSplit(slice, ':');
  if (bounds.size() != 2) return absl::InvalidArgumentError("a slice is [from:to], e.g. [:95%] or [100:200]");
  int percents = 0;
  for (int k = 0; k < 2; ++k) {
    std::string b = bounds[static_cast<size_t>(k)];
    if (b.empty()) continue;
    if (b.back() == '%') {
      b.pop_back();
      ++percents;
    } else if (percents > 0) {
      return absl::InvalidArgumentError("both bounds of a slice are percentages or neither is");
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(b, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", bounds[static_cast<size_t>(k)], "\" is not a bound"));
    }
    (k == 0 ? out->has_from : out->has_to) = true;
    (k == 0 ? out->from : out->to) = v;
  }
  if (percents > 0 && percents != static_cast<int>(out->has_from) + static_cast<int>(out->has_to)) {
    return absl::InvalidArgumentError("both bounds of a slice are percentages or neither is");
  }
  out->percent = percents > 0;
  if (out->percent && ((out->has_from && std::abs(out->from) > 100) || (out->has_to && std::abs(out->to) > 100))) {
    return absl::InvalidArgumentError("a percentage bound is in [-100%, 100%]");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TfdsSplit> ParseTfdsSplit(const std::string& value) {
  const std::string usage = "; write tfds:NAME[/CONFIG][:VERSION]:SPLIT[SLICE], e.g. tfds:c4/en:3.0.1:train[:95%]";
  if (!absl::StartsWith(value, kTfdsPrefix)) return absl::InvalidArgumentError("not a tfds: split" + usage);
  std::string rest = value.substr(std::string(kTfdsPrefix).size());
  TfdsSplit out;
  const size_t bracket = rest.find('[');
  if (bracket != std::string::npos) {
    if (rest.back() != ']') return absl::InvalidArgumentError("the slice does not end with ]" + usage);
    if (absl::Status s = ParseTfdsSlice(rest.substr(bracket + 1, rest.size() - bracket - 2), &out); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), usage));
    }
    rest = rest.substr(0, bracket);
  }
  const std::vector<std::string> parts = absl::StrSplit(rest, ':');
  if (parts.size() < 2 || parts.size() > 3) return absl::InvalidArgumentError("no split named" + usage);
  const std::vector<std::string> name = absl::StrSplit(parts[0], '/');
  if (name.size() > 2) return absl::InvalidArgumentError("a dataset is NAME or NAME/CONFIG" + usage);
  out.name = name[0];
  if (name.size() == 2) out.config = name[1];
  if (parts.size() == 3) out.version = parts[1];
  out.split = parts.back();
  for (const std::string* part : {&out.name, &out.config, &out.version, &out.split}) {
    if (part->find_first_of("/\\*?[]") != std::string::npos || *part == "." || *part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("\"", *part, "\" is not a name", usage));
    }
  }
  if (out.name.empty() || out.split.empty() || (name.size() == 2 && out.config.empty()) ||
      (parts.size() == 3 && out.version.empty())) {
    return absl::InvalidArgumentError("an empty name" + usage);
  }
  return out;
}

std::vector<std::string> TfRecordFeatures(const TaskDefinition& def) {
  for (const PreprocessorConfig& p : def.preprocessors()) {
    std::set<std::string> taken;
    if (p.has_rekey()) {
      for (const auto& [to, from] : p.rekey().key_map()) taken.insert(from);
    } else if (p.has_translate()) {
      taken = {p.translate().source_language(), p.translate().target_language()};
    } else if (p.has_summarize()) {
      taken = {p.summarize().article_key(), p.summarize().summary_key()};
    } else {
      continue;
    }
    return std::vector<std::string>(taken.begin(), taken.end());
  }
  return {"inputs", "targets"};
}

bool HasTextStep(const TaskDefinition& def) {
  for (const PreprocessorConfig& p : def.preprocessors()) {
    if (p.has_rekey() || p.has_translate() || p.has_summarize()) return true;
  }
  return false;
}

absl::StatusOr<std::string> T5LanguageName(const std::string& code) {
  // English names as T5's translate takes them (babel's english_name of the
  // code's first two letters), for the languages of WMT and T5's tasks.
  static const std::map<std::string, std::string>* const kNames = new std::map<std::string, std::string>{
      {"ar", "Arabic"},     {"bg", "Bulgarian"},  {"cs", "Czech"},    {"da", "Danish"},    {"de", "German"},
      {"el", "Greek"},      {"en", "English"},    {"es", "Spanish"},  {"et", "Estonian"},  {"fi", "Finnish"},
      {"fr", "French"},     {"gu", "Gujarati"},   {"hi", "Hindi"},    {"hr", "Croatian"},  {"hu", "Hungarian"},
      {"it", "Italian"},    {"ja", "Japanese"},   {"kk", "Kazakh"},   {"km", "Khmer"},     {"ko", "Korean"},
      {"lt", "Lithuanian"}, {"lv", "Latvian"},    {"ne", "Nepali"},   {"nl", "Dutch"},     {"pl", "Polish"},
      {"ps", "Pashto"},     {"pt", "Portuguese"}, {"ro", "Romanian"}, {"ru", "Russian"},   {"si", "Sinhala"},
      {"sv", "Swedish"},    {"ta", "Tamil"},      {"tr", "Turkish"},  {"uk", "Ukrainian"}, {"zh", "Chinese"},
  };
  auto it = kNames->find(code.substr(0, 2));
  if (code.size() < 2 || it == kNames->end()) {
    std::vector<std::string> known;
    for (const auto& [c, name] : *kNames) known.push_back(c);
    return absl::InvalidArgumentError(
        absl::StrCat(spec_internal::Quote(code), " is not a language code Trainyard names (T5 takes ",
                     "the first two letters of an ISO 639-1 code): ", absl::StrJoin(known, ", ")));
  }
  return it->second;
}

namespace {

const TaskDefinition* FindDefinition(const JobSpec& spec, const std::string& name) {
  for (const TaskDefinition& def : spec.task_definitions()) {
    if (def.name() == name) return &def;
  }
  return nullptr;
}

const MixtureDefinition* FindMixture(const JobSpec& spec, const std::string& name) {
  for (const MixtureDefinition& mix : spec.mixture_definitions()) {
    if (mix.name() == name) return &mix;
  }
  return nullptr;
}

bool IsBundled(const std::string& name) {
  const std::vector<std::string>& bundled = BundledTaskNames();
  return std::find(bundled.begin(), bundled.end(), name) != bundled.end();
}

absl::Status AddLeaves(const JobSpec& spec, const std::string& name, double share, std::vector<std::string>* path,
                       std::vector<std::pair<std::string, double>>* leaves) {
  const MixtureDefinition* mix = FindMixture(spec, name);
  if (mix == nullptr) {
    if (!IsBundled(name) && FindDefinition(spec, name) == nullptr) {
      return absl::NotFoundError(absl::StrCat("\"", name, "\" is neither a bundled task nor defined in the spec"));
    }
    for (auto& [leaf, s] : *leaves) {
      if (leaf == name) {
        s += share;
        return absl::OkStatus();
      }
    }
    leaves->emplace_back(name, share);
    return absl::OkStatus();
  }
  if (std::find(path->begin(), path->end(), name) != path->end()) {
    path->push_back(name);
    return absl::InvalidArgumentError(absl::StrCat("mixtures form a cycle: ", absl::StrJoin(*path, " -> ")));
  }
  double sum = 0;
  for (const auto& c : mix->tasks()) sum += c.rate();
  if (!(sum > 0) || !std::isfinite(sum)) {
    return absl::InvalidArgumentError(absl::StrCat("mixture \"", name, "\" has no positive rates"));
  }
  path->push_back(name);
  for (const auto& c : mix->tasks()) {
    absl::Status s = AddLeaves(spec, c.name(), share * c.rate() / sum, path, leaves);
    if (!s.ok()) return s;
  }
  path->pop_back();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, double>>> LeafTasks(const JobSpec& spec, const std::string& name) {
  std::vector<std::pair<std::string, double>> leaves;
  std::vector<std::string> path;
  absl::Status s = AddLeaves(spec, name, 1.0, &path, &leaves);
  if (!s.ok()) return s;
  return leaves;
}

namespace spec_internal {
namespace {

constexpr char kTaskNameChars[] = "_.:/-";

// What identifies a vocabulary in a mixture: its file (empty: the bundled
// one) and its extra ids.
std::pair<std::string, int> VocabularyKey(const JobSpec& spec, const std::string& leaf) {
  const TaskDefinition* def = FindDefinition(spec, leaf);
  if (def == nullptr) return {"", 0};  // bundled
  return {def->vocabulary(), def->extra_ids()};
}

std::string DescribeVocabulary(const std::pair<std::string, int>& key) {
  return absl::StrCat(key.first.empty() ? "the bundled vocabulary" : key.first, " with ", key.second, " extra ids");
}

// Every name a spec can use: the bundled tasks, and the spec's
// task_definitions and mixture_definitions.
class KnownTasks {
 public:
  KnownTasks(std::set<std::string> defined, std::set<std::string> mixtures)
      : defined_(std::move(defined)), mixtures_(std::move(mixtures)) {
    std::vector<std::string> known = BundledTaskNames();
    known.insert(known.end(), defined_.begin(), defined_.end());
    known.insert(known.end(), mixtures_.begin(), mixtures_.end());
    list_ = absl::StrJoin(known, ", ");
  }

  bool Contains(const std::string& name) const {
    return IsBundled(name) || defined_.count(name) > 0 || mixtures_.count(name) > 0;
  }

  // The error for a name that is none of them.
  std::string Unknown(const std::string& name) const {
    return absl::StrCat(Quote(name), " is not a known task or mixture; known: ", list_,
                        " (bundled tasks, and task_definitions and mixture_definitions of this spec)");
  }

 private:
  std::set<std::string> defined_;
  std::set<std::string> mixtures_;
  std::string list_;
};

// `task`: present, and a valid name (whether it is known is checked with
// the definitions).
void ValidateTaskName(Errors* errors, const std::string& task) {
  if (task.empty()) {
    errors->Add("task", "missing; the name of a registered task or mixture");
  } else if (!IsValidName(task, kTaskNameChars, 256)) {
    errors->Add("task", absl::StrCat(Quote(task), " is not a task name; use 1-256 of [A-Za-z0-9_.:/-]"));
  }
}

// task_definitions: names (valid, new), splits, metric functions and
// chains. Returns the names defined.
std::set<std::string> ValidateTaskDefinitions(Errors* errors, JobSpec* spec) {
  std::set<std::string> defined;
  for (int i = 0; i < spec->task_definitions_size(); ++i) {
    TaskDefinition* def = spec->mutable_task_definitions(i);
    const std::string prefix = absl::StrCat("task_definitions[", i, "]");
    if (!IsValidName(def->name(), kTaskNameChars, 256)) {
      errors->Add(prefix + ".name",
                  absl::StrCat(Quote(def->name()), " is not a task name; use 1-256 of [A-Za-z0-9_.:/-]"));
    } else if (IsBundled(def->name())) {
      errors->Add(prefix + ".name", absl::StrCat(Quote(def->name()), " is a bundled task; choose another name"));
    } else if (!defined.insert(def->name()).second) {
      errors->Add(prefix + ".name", absl::StrCat(Quote(def->name()), " is defined twice"));
    }
    if (def->splits().empty()) errors->Add(prefix + ".splits", "missing; map split names to files of examples");
    for (const auto& [split, path] : def->splits()) {
      if (!IsValidName(split, "_.-", 64)) {
        errors->Add(prefix + ".splits", absl::StrCat(Quote(split), " is not a split name; use [A-Za-z0-9_.-]"));
      }
      if (path.empty()) errors->Add(absl::StrCat(prefix, ".splits[", split, "]"), "empty path");
    }
    for (int k = 0; k < def->metric_fns_size(); ++k) {
      if (!BuiltinMetricFn(def->metric_fns(k)).ok()) {
        errors->Add(
            absl::StrCat(prefix, ".metric_fns[", k, "]"),
            absl::StrCat(Quote(def->metric_fns(k)), " is not one of: ", absl::StrJoin(BuiltinMetricFnNames(), ", ")));
      }
    }
    ValidateChain(errors, prefix, def);
  }
  return defined;
}

// mixture_definitions on their own: names (valid, new, no task's), and
// components listed once with finite rates > 0. Returns the names defined.
std::set<std::string> ValidateMixtureDefinitions(Errors* errors, const JobSpec& spec,
                                                 const std::set<std::string>& defined) {
  std::set<std::string> mixtures;
  for (int i = 0; i < spec.mixture_definitions_size(); ++i) {
    const MixtureDefinition& mix = spec.mixture_definitions(i);
    const std::string prefix = absl::StrCat("mixture_definitions[", i, "]");
    if (!IsValidName(mix.name(), kTaskNameChars, 256)) {
      errors->Add(prefix + ".name",
                  absl::StrCat(Quote(mix.name()), " is not a mixture name; use 1-256 of [A-Za-z0-9_.:/-]"));
    } else if (IsBundled(mix.name()) || defined.count(mix.name())) {
      errors->Add(prefix + ".name", absl::StrCat(Quote(mix.name()), " is already a task"));
    } else if (!mixtures.insert(mix.name()).second) {
      errors->Add(prefix + ".name", absl::StrCat(Quote(mix.name()), " is defined twice"));
    }
    if (mix.tasks().empty()) errors->Add(prefix + ".tasks", "missing; the component tasks and their rates");
    std::set<std::string> components;
    for (int k = 0; k < mix.tasks_size(); ++k) {
      const auto& c = mix.tasks(k);
      const std::string field = absl::StrCat(prefix, ".tasks[", k, "]");
      if (!components.insert(c.name()).second) {
        errors->Add(field + ".name", absl::StrCat(Quote(c.name()), " is listed twice"));
      }
      if (!(c.rate() > 0) || !std::isfinite(c.rate())) {
        errors->Add(field + ".rate", absl::StrCat(c.rate(), " is not allowed; a rate is a finite number > 0"));
      }
    }
  }
  return mixtures;
}

// A mixture's leaf tasks share one vocabulary.
void ValidateMixtureVocabulary(Errors* errors, const JobSpec& spec, const std::string& prefix,
                               const std::vector<std::pair<std::string, double>>& leaves) {
  const auto first = VocabularyKey(spec, leaves[0].first);
  for (const auto& [leaf, share] : leaves) {
    const auto key = VocabularyKey(spec, leaf);
    if (key != first) {
      errors->Add(prefix + ".tasks",
                  absl::StrCat(leaves[0].first, " uses ", DescribeVocabulary(first), ", ", leaf, " uses ",
                               DescribeVocabulary(key), "; a mixture's tasks share one vocabulary"));
      return;
    }
  }
}

// Mixtures: components known, no cycles, one vocabulary.
void ValidateMixtureComponents(Errors* errors, const JobSpec& spec, const KnownTasks& known) {
  for (int i = 0; i < spec.mixture_definitions_size(); ++i) {
    const MixtureDefinition& mix = spec.mixture_definitions(i);
    const std::string prefix = absl::StrCat("mixture_definitions[", i, "]");
    bool components_known = true;
    for (int k = 0; k < mix.tasks_size(); ++k) {
      const std::string& name = mix.tasks(k).name();
      if (!known.Contains(name)) {
        errors->Add(absl::StrCat(prefix, ".tasks[", k, "].name"), known.Unknown(name));
        components_known = false;
      }
    }
    if (!components_known || mix.tasks().empty()) continue;
    absl::StatusOr<std::vector<std::pair<std::string, double>>> leaves = LeafTasks(spec, mix.name());
    if (!leaves.ok()) {
      if (absl::IsInvalidArgument(leaves.status()) && absl::StrContains(leaves.status().message(), "cycle")) {
        errors->Add(prefix + ".tasks", leaves.status().message());
      }
      continue;  // a bad rate, reported above
    }
    ValidateMixtureVocabulary(errors, spec, prefix, *leaves);
  }
}

// `task` known. Returns its leaf tasks: none when it is not known (or not
// a valid name, reported by ValidateTaskName).
std::vector<std::string> KnownTaskLeaves(Errors* errors, const JobSpec& spec, const KnownTasks& known) {
  std::vector<std::string> leaf_names;
  if (spec.task().empty() || !IsValidName(spec.task(), kTaskNameChars, 256)) return leaf_names;
  if (!known.Contains(spec.task())) {
    errors->Add("task", known.Unknown(spec.task()));
  } else if (absl::StatusOr<std::vector<std::pair<std::string, double>>> leaves = LeafTasks(spec, spec.task());
             leaves.ok()) {
    for (const auto& [leaf, share] : *leaves) leaf_names.push_back(leaf);
  }
  return leaf_names;
}

// eval.tasks: default `task`; a mixture stands for its component tasks.
// Appends the leaf tasks evaluated to `used`.
void ValidateEvalTasks(Errors* errors, JobSpec* spec, const KnownTasks& known, std::vector<std::string>* used) {
  EvalConfig* eval = spec->mutable_eval();
  if (eval->tasks().empty() && !spec->task().empty()) eval->add_tasks(spec->task());
  std::vector<std::string> eval_tasks;
  for (int i = 0; i < eval->tasks_size(); ++i) {
    const std::string& name = eval->tasks(i);
    const std::string field = absl::StrCat("eval.tasks[", i, "]");
    if (!IsValidName(name, kTaskNameChars, 256)) {
      errors->Add(field, absl::StrCat(Quote(name), " is not a task name; use [A-Za-z0-9_.:/-]"));
      continue;
    }
    if (!known.Contains(name)) {
      errors->Add(field, known.Unknown(name));
      continue;
    }
    absl::StatusOr<std::vector<std::pair<std::string, double>>> leaves = LeafTasks(*spec, name);
    if (!leaves.ok()) continue;  // reported with the mixture
    for (const auto& [leaf, share] : *leaves) {
      if (std::find(eval_tasks.begin(), eval_tasks.end(), leaf) == eval_tasks.end()) eval_tasks.push_back(leaf);
      used->push_back(leaf);
    }
  }
  if (errors->empty()) {
    eval->clear_tasks();
    for (const std::string& t : eval_tasks) eval->add_tasks(t);
  }
}

// The span corruption of task_definitions[index] at this job's lengths
// (inputs_length > 0): the targets it makes must fit, and each span needs a
// sentinel.
void ValidateSpanCorruptionFits(Errors* errors, const JobSpec& spec, int index) {
  const TaskDefinition& def = spec.task_definitions(index);
  const SpanCorruptionConfig* span = FindSpanCorruption(def);
  if (span == nullptr) return;
  const int64_t inputs_length = spec.feature_lengths().inputs();
  const int64_t segment = SegmentLength(def, inputs_length);
  const SpanCorruptionLengths lengths =
      SpanCorruptionLengthsOf(segment, NoiseDensity(*span), MeanNoiseSpanLength(*span), Eos(def));
  const std::string& leaf = def.name();
  if (lengths.targets > spec.feature_lengths().targets()) {
    errors->Add("feature_lengths.targets",
                absl::StrCat(spec.feature_lengths().targets(), " is shorter than the ", lengths.targets,
                             " tokens span_corruption of task ", leaf, " makes of a ", segment,
                             "-token segment (inputs ", inputs_length, "); set targets to at least ", lengths.targets));
  }
  if (lengths.inputs > inputs_length) {
    errors->Add("feature_lengths.inputs",
                absl::StrCat(inputs_length, ": task ", leaf, "'s segments of ", segment, " tokens make inputs of ",
                             lengths.inputs, " tokens; shorten split_tokens.max_tokens_per_segment"));
  }
  if (lengths.spans > def.extra_ids()) {
    errors->Add(absl::StrCat("task_definitions[", index, "].extra_ids"),
                absl::StrCat(def.extra_ids(), ": span_corruption makes up to ", lengths.spans, " spans of a ", segment,
                             "-token segment, one sentinel id each; give at least ", lengths.spans));
  }
}

// Span corruption at this job's lengths, for each defined task in `used`
// (once each).
void ValidateSpanCorruptionLengths(Errors* errors, const JobSpec& spec, const std::vector<std::string>& used) {
  if (spec.feature_lengths().inputs() < 1) return;
  std::set<std::string> checked;
  for (const std::string& leaf : used) {
    int index = -1;
    for (int i = 0; i < spec.task_definitions_size(); ++i) {
      if (spec.task_definitions(i).name() == leaf) index = i;
    }
    if (index < 0 || !checked.insert(leaf).second) continue;
    ValidateSpanCorruptionFits(errors, spec, index);
  }
}

}  // namespace

void ValidateTasks(Errors* errors, JobSpec* spec) {
  ValidateTaskName(errors, spec->task());
  std::set<std::string> defined = ValidateTaskDefinitions(errors, spec);
  std::set<std::string> mixtures = ValidateMixtureDefinitions(errors, *spec, defined);
  const KnownTasks known(std::move(defined), std::move(mixtures));
  ValidateMixtureComponents(errors, *spec, known);
  // The tasks whose examples reach the model: the leaf tasks of `task` and
  // of eval.tasks.
  std::vector<std::string> used = KnownTaskLeaves(errors, *spec, known);
  ValidateEvalTasks(errors, spec, known, &used);
  ValidateSpanCorruptionLengths(errors, *spec, used);
}

}  // namespace spec_internal
}  // namespace trainyard
