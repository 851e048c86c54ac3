#include "gin/t5_tasks.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

enum class Objective { kSpanCorruption, kPrefixLm, kTranslate, kSummarize };

// One of T5's tasks: its TFDS source, the splits it has, and its chain.
struct T5Task {
  std::string tfds;  // NAME[/CONFIG]:VERSION
  std::vector<std::string> splits;
  Objective objective;
  std::string source, target;  // translate: the languages; summarize: the features
  std::string metric;          // "" = none
};

const std::map<std::string, T5Task>& Catalog() {
  static const auto* const kTasks = new std::map<std::string, T5Task>{
      {"c4_v220_span_corruption", {"c4/en:2.2.0", {"train", "validation"}, Objective::kSpanCorruption, "", "", ""}},
      {"c4_v220_prefix_lm", {"c4/en:2.2.0", {"train", "validation"}, Objective::kPrefixLm, "", "", ""}},
      {"wmt_t2t_ende_v003",
       {"wmt_t2t_translate/de-en:1.0.0", {"train", "validation", "test"}, Objective::kTranslate, "en", "de", "bleu"}},
      {"wmt14_ende_v003",
       {"wmt14_translate/de-en:1.0.0", {"train", "validation", "test"}, Objective::kTranslate, "en", "de", "bleu"}},
      {"wmt14_enfr_v003",
       {"wmt14_translate/fr-en:1.0.0", {"train", "validation", "test"}, Objective::kTranslate, "en", "fr", "bleu"}},
      {"wmt15_enfr_v003",
       {"wmt15_translate/fr-en:1.0.0", {"train", "validation", "test"}, Objective::kTranslate, "en", "fr", "bleu"}},
      {"wmt16_enro_v003",
       {"wmt16_translate/ro-en:1.0.0", {"train", "validation", "test"}, Objective::kTranslate, "en", "ro", "bleu"}},
      {"wmt19_ende_v003",
       {"wmt19_translate/de-en:1.0.0", {"train", "validation"}, Objective::kTranslate, "en", "de", "bleu"}},
      {"cnn_dailymail_v002",
       {"cnn_dailymail:3.1.0",
        {"train", "validation", "test"},
        Objective::kSummarize,
        "article",
        "highlights",
        "rouge"}},
  };
  return *kTasks;
}

// T5 tasks known by their name's form whose preprocessors Trainyard lacks.
absl::Status Unsupported(const std::string& name) {
  static const auto* const kFamilies = new std::vector<std::pair<std::string, std::string>>{
      {"glue_", "GLUE's text preprocessors (sentence pairs and class labels as words)"},
      {"super_glue_", "SuperGLUE's text preprocessors (sentence pairs and class labels as words)"},
      {"squad_", "SQuAD's preprocessor (question and context joined, punctuation padded)"},
      {"trivia_qa", "TriviaQA's preprocessor (one example per matching context)"},
      {"dpr_", "definite pronoun resolution's preprocessor"},
      {"c4_v220_iid_denoising", "T5's iid denoising objective"},
      {"_v020_unsupervised", "T5's unsupervised objective"},
      {"wikipedia_", "T5's unsupervised objective"},
  };
  for (const auto& [pattern, what] : *kFamilies) {
    if (absl::StartsWith(name, pattern) || absl::EndsWith(name, pattern)) {
      return absl::UnimplementedError(absl::StrCat(
          "T5's task ", name, " needs ", what,
          ", which Trainyard does not have: define the task over your data with --task-definitions (text features "
          "already formatted as inputs and targets, e.g. TFRecord files written by seqio or tf.data)"));
    }
  }
  return absl::NotFoundError(absl::StrCat("\"", name, "\" is not one of T5's tasks Trainyard defines (",
                                          absl::StrJoin(T5TaskNames(), ", "), "); define it with --task-definitions"));
}

void AddChain(const T5Task& t, TaskDefinition* def) {
  switch (t.objective) {
    case Objective::kSpanCorruption:
    case Objective::kPrefixLm:
      (*def->add_preprocessors()->mutable_rekey()->mutable_key_map())["targets"] = "text";
      if (t.objective == Objective::kSpanCorruption) {
        def->add_preprocessors()->mutable_span_corruption();  // T5's defaults: 0.15, 3.0
      } else {
        def->add_preprocessors()->mutable_prefix_lm();
      }
      break;
    case Objective::kTranslate: {
      TranslateConfig* translate = def->add_preprocessors()->mutable_translate();
      translate->set_source_language(t.source);
      translate->set_target_language(t.target);
      break;
    }
    case Objective::kSummarize: {
      SummarizeConfig* summarize = def->add_preprocessors()->mutable_summarize();
      summarize->set_article_key(t.source);
      summarize->set_summary_key(t.target);
      break;
    }
  }
}

}  // namespace

absl::StatusOr<TaskDefinition> T5TaskDefinition(const std::string& name, const std::string& tfds_data_dir) {
  auto it = Catalog().find(name);
  if (it == Catalog().end()) return Unsupported(name);
  const T5Task& t = it->second;
  TaskDefinition def;
  def.set_name(name);
  for (const std::string& split : t.splits) (*def.mutable_splits())[split] = absl::StrCat("tfds:", t.tfds, ":", split);
  def.set_tfds_data_dir(tfds_data_dir);
  AddChain(t, &def);
  if (!t.metric.empty()) def.add_metric_fns(t.metric);
  return def;
}

std::vector<std::string> T5TaskNames() {
  std::vector<std::string> names;
  for (const auto& [name, task] : Catalog()) names.push_back(name);
  return names;
}

}  // namespace trainyard
