// The preprocessing chain of a task definition, validated step by step:
// the order of text and token steps, each step's parameters, and the
// features each step sees (internal to spec/, see task_validation.h).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/task_spec.h"
#include "spec/task_validation.h"

namespace trainyard {
namespace spec_internal {
namespace {

std::string Features(const std::set<std::string>& features) {
  return features.empty() ? std::string("(none)") : absl::StrJoin(features, ", ");
}

// What the steps of a chain have made of its examples so far.
struct ChainState {
  std::set<std::string> features;  // the examples' features after the steps so far
  bool token_stage = false;        // split_tokens, span_corruption or prefix_lm seen
  bool split_seen = false;
  std::string objective;  // "span_corruption" or "prefix_lm"
};

// Whether any of the definition's splits is plain text (.txt); splits that
// mix plain text with example files are an error.
bool ValidateSplitFormats(Errors* errors, const std::string& prefix, const TaskDefinition& def) {
  bool plain = false, files = false;
  for (const auto& [split, path] : def.splits()) (IsPlainTextPath(path) ? plain : files) = true;
  if (plain && files) {
    errors->Add(prefix + ".splits",
                "mixes plain text (.txt) with example files (.jsonl, .tsv); a task's splits have the same features");
  }
  // TFRecord files and TFDS splits hold text; seqio's caches hold tokens.
  std::set<std::string> kinds;
  for (const auto& [split, path] : def.splits()) {
    const SplitFormat format = SplitFormatOf(path);
    kinds.insert(format == SplitFormat::kTfRecord || format == SplitFormat::kTfds ? "TFRecord or TFDS"
                 : format == SplitFormat::kSeqioCache                             ? "seqio caches"
                                                                                  : "other files");
    if (format == SplitFormat::kTfds) {
      if (absl::StatusOr<TfdsSplit> tfds = ParseTfdsSplit(path); !tfds.ok()) {
        errors->Add(absl::StrCat(prefix, ".splits[", split, "]"), std::string(tfds.status().message()));
      }
    }
    if (format == SplitFormat::kSeqioCache && path.size() == std::string(kSeqioCachePrefix).size()) {
      errors->Add(absl::StrCat(prefix, ".splits[", split, "]"), "seqio_cache: names no directory");
    }
  }
  bool tfds = false;
  for (const auto& [split, path] : def.splits()) tfds |= SplitFormatOf(path) == SplitFormat::kTfds;
  if (!def.tfds_data_dir().empty() && !tfds) {
    errors->Add(prefix + ".tfds_data_dir",
                "set, but no split is a TFDS split; name one as tfds:NAME[/CONFIG][:VERSION]:SPLIT");
  }
  if (kinds.size() > 1 && (kinds.count("TFRecord or TFDS") || kinds.count("seqio caches"))) {
    errors->Add(prefix + ".splits",
                absl::StrCat("mixes ", absl::StrJoin(kinds, " with "), "; a task's splits have the same features"));
  }
  return plain;
}

// A rekey step: before the token steps, a non-empty map of feature names to
// features the examples have here. The examples leave it with the new names.
void ValidateRekey(Errors* errors, const std::string& field, const RekeyConfig& rekey, ChainState* chain) {
  if (chain->token_stage) {
    errors->Add(field + ".rekey",
                "renames text features, so it comes before split_tokens, span_corruption and prefix_lm");
  }
  if (rekey.key_map().empty()) {
    errors->Add(field + ".rekey.key_map", "empty; map each new feature name to an existing feature");
  }
  std::set<std::string> next;
  for (const auto& [to, from] : rekey.key_map()) {
    if (!IsValidName(to, "_-", 64)) {
      errors->Add(field + ".rekey.key_map", absl::StrCat(Quote(to), " is not a feature name; use [A-Za-z0-9_-]"));
    }
    if (!chain->features.count(from)) {
      errors->Add(
          absl::StrCat(field, ".rekey.key_map[", to, "]"),
          absl::StrCat(Quote(from), " is not a feature of the examples here; they have: ", Features(chain->features)));
    }
    next.insert(to);
  }
  chain->features = std::move(next);
}

// Whether a text step (rekey, translate, summarize) comes first in the
// chain: then it decides which features the examples are read with.
void RequireTextStage(Errors* errors, const std::string& field, const char* step, const ChainState& chain) {
  if (chain.token_stage) {
    errors->Add(field + "." + step,
                "works on text features, so it comes before split_tokens, span_corruption and prefix_lm");
  }
}

// A feature the step reads: named, and present in the examples here.
void RequireFeature(Errors* errors, const std::string& field, const std::string& name, const ChainState& chain) {
  if (name.empty()) {
    errors->Add(field, absl::StrCat("empty; name a feature of the examples here: ", Features(chain.features)));
  } else if (!chain.features.count(name)) {
    errors->Add(field, absl::StrCat(Quote(name),
                                    " is not a feature of the examples here; they have: ", Features(chain.features)));
  }
}

// T5's translate: two languages with English names, both features.
void ValidateTranslate(Errors* errors, const std::string& field, const TranslateConfig& t, ChainState* chain) {
  RequireTextStage(errors, field, "translate", *chain);
  for (const auto& [name, code] : {std::pair<std::string, const std::string*>{"source_language", &t.source_language()},
                                   {"target_language", &t.target_language()}}) {
    const std::string sub = absl::StrCat(field, ".translate.", name);
    if (absl::StatusOr<std::string> english = T5LanguageName(*code); !english.ok()) {
      errors->Add(sub, std::string(english.status().message()));
    }
    RequireFeature(errors, sub, *code, *chain);
  }
  chain->features = {"inputs", "targets"};
}

// T5's summarize: the article and the summary, both features.
void ValidateSummarize(Errors* errors, const std::string& field, const SummarizeConfig& s, ChainState* chain) {
  RequireTextStage(errors, field, "summarize", *chain);
  RequireFeature(errors, field + ".summarize.article_key", s.article_key(), *chain);
  RequireFeature(errors, field + ".summarize.summary_key", s.summary_key(), *chain);
  chain->features = {"inputs", "targets"};
}

// A split_tokens step: once, before span_corruption or prefix_lm, with a
// segment length in range.
void ValidateSplitTokens(Errors* errors, const std::string& field, const SplitTokensConfig& split, ChainState* chain) {
  if (chain->split_seen) errors->Add(field + ".split_tokens", "a chain splits its documents once");
  if (!chain->objective.empty())
    errors->Add(field + ".split_tokens", absl::StrCat("comes after ", chain->objective, "; put it before"));
  CheckIntRange(errors, field + ".split_tokens.max_tokens_per_segment", split.max_tokens_per_segment(), 0, 1 << 20);
  chain->split_seen = chain->token_stage = true;
}

// A span_corruption or prefix_lm step: one of them per chain. Fills in span
// corruption's defaults and checks its parameters.
void ValidateObjective(Errors* errors, const std::string& field, PreprocessorConfig* p, ChainState* chain) {
  const std::string name = p->has_span_corruption() ? "span_corruption" : "prefix_lm";
  if (!chain->objective.empty()) {
    errors->Add(field + "." + name, absl::StrCat("the chain already has ", chain->objective,
                                                 "; each makes inputs from the targets, one per chain"));
  }
  chain->objective = name;
  chain->token_stage = true;
  if (p->has_span_corruption()) {
    SpanCorruptionConfig* s = p->mutable_span_corruption();
    if (!s->has_noise_density()) s->set_noise_density(static_cast<float>(kDefaultNoiseDensity));
    if (!s->has_mean_noise_span_length()) {
      s->set_mean_noise_span_length(static_cast<float>(kDefaultMeanNoiseSpanLength));
    }
    CheckRange(errors, field + ".span_corruption.noise_density", s->noise_density(), 0, true, 1, true);
    CheckRange(errors, field + ".span_corruption.mean_noise_span_length", s->mean_noise_span_length(), 1, false, 1000,
               false);
  }
}

// The features at the chain's end: `targets` for its token steps, inputs and
// targets for the model.
void ValidateChainFeatures(Errors* errors, const std::string& prefix, const ChainState& chain) {
  if (chain.token_stage && !chain.features.count("targets")) {
    errors->Add(prefix + ".preprocessors", absl::StrCat("split_tokens, span_corruption and prefix_lm work on the "
                                                        "`targets` feature; the examples have: ",
                                                        Features(chain.features), " (rekey one to targets)"));
  } else if (chain.objective.empty() && (!chain.features.count("inputs") || !chain.features.count("targets"))) {
    errors->Add(prefix + ".preprocessors",
                absl::StrCat("the examples reach the model with ", Features(chain.features),
                             "; they need inputs and targets: rekey them, or add span_corruption or prefix_lm to "
                             "make inputs from the targets"));
  }
}

// T5's rekey of plain text (its `text` becomes the targets) as the chain's
// first step.
void PrependPlainTextRekey(TaskDefinition* def) {
  std::vector<PreprocessorConfig> chain(def->preprocessors().begin(), def->preprocessors().end());
  def->clear_preprocessors();
  (*def->add_preprocessors()->mutable_rekey()->mutable_key_map())["targets"] = "text";
  for (PreprocessorConfig& p : chain) *def->add_preprocessors() = std::move(p);
}

// extra_ids: its default, its range, and some for span_corruption's
// sentinels.
void ValidateExtraIds(Errors* errors, const std::string& prefix, const std::string& objective, TaskDefinition* def) {
  if (!def->has_extra_ids()) def->set_extra_ids(ExtraIds(*def));
  CheckIntRange(errors, prefix + ".extra_ids", def->extra_ids(), 0, 1000);
  if (objective == "span_corruption" && def->extra_ids() < 1) {
    errors->Add(prefix + ".extra_ids", "0; span_corruption replaces spans by sentinel ids: give it some (T5: 100)");
  }
}

}  // namespace

// One definition's chain: order, parameters, and the features each step
// sees. Fills in defaults (and T5's rekey of plain text).
void ValidateChain(Errors* errors, const std::string& prefix, TaskDefinition* def) {
  const bool plain = ValidateSplitFormats(errors, prefix, *def);
  // Plain text without a text step of its own (rekey, translate,
  // summarize) gets T5's rekey, written into the spec after the checks (so
  // that errors name the steps as the user numbered them).
  const bool implicit_rekey = plain && !HasTextStep(*def);
  ChainState chain;
  bool tfrecord = false;
  for (const auto& [split, path] : def->splits()) {
    const SplitFormat format = SplitFormatOf(path);
    tfrecord |= format == SplitFormat::kTfRecord || format == SplitFormat::kTfds || format == SplitFormat::kSeqioCache;
  }
  const std::vector<std::string> tfrecord_features = TfRecordFeatures(*def);
  // TFRecord examples have the features the first text step takes.
  chain.features = implicit_rekey ? std::set<std::string>{"targets"}
                   : plain        ? std::set<std::string>{"text"}
                   : tfrecord     ? std::set<std::string>(tfrecord_features.begin(), tfrecord_features.end())
                                  : std::set<std::string>{"inputs", "targets"};
  for (int k = 0; k < def->preprocessors_size(); ++k) {
    PreprocessorConfig* p = def->mutable_preprocessors(k);
    const std::string field = absl::StrCat(prefix, ".preprocessors[", k, "]");
    switch (p->kind_case()) {
      case PreprocessorConfig::kRekey:
        ValidateRekey(errors, field, p->rekey(), &chain);
        break;
      case PreprocessorConfig::kTranslate:
        ValidateTranslate(errors, field, p->translate(), &chain);
        break;
      case PreprocessorConfig::kSummarize:
        ValidateSummarize(errors, field, p->summarize(), &chain);
        break;
      case PreprocessorConfig::kSplitTokens:
        ValidateSplitTokens(errors, field, p->split_tokens(), &chain);
        break;
      case PreprocessorConfig::kSpanCorruption:
      case PreprocessorConfig::kPrefixLm:
        ValidateObjective(errors, field, p, &chain);
        break;
      case PreprocessorConfig::KIND_NOT_SET:
        errors->Add(field, "set one of rekey, translate, summarize, split_tokens, span_corruption, prefix_lm");
        break;
    }
  }
  ValidateChainFeatures(errors, prefix, chain);
  if (implicit_rekey) PrependPlainTextRekey(def);
  ValidateExtraIds(errors, prefix, chain.objective, def);
}

}  // namespace spec_internal
}  // namespace trainyard
