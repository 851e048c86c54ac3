// Metric functions over decoded text, in the three forms of T5X's
// InteractiveModel and seqio tasks:
//   (targets, scores)                  - scores: the log-likelihood the model
//                                        gave each target given its input
//   (targets, predictions)
//   (targets, predictions, aux_values) - aux_values: named per-example values
//                                        (e.g. "scores" of the predictions)
// Each returns named values; the caller merges them (a name returned by two
// functions is an error, see MergeMetricValues).
//
// Built-ins, all in percent like T5's:
//   exact_match        SQuAD-normalised string equality (lowercase, no ASCII
//                      punctuation, no articles a/an/the, single spaces)
//   sequence_accuracy  exact string equality
//   token_f1           mean per-example token F1 on SQuAD-normalised text
//                      ("f1"); both empty counts as 1
//   bleu               corpus BLEU, sacrebleu's defaults: 13a tokenisation,
//                      4-grams, "exp" smoothing, one reference per example
//   rouge              mean per-example ROUGE-1/2/L F-measures (rouge1,
//                      rouge2, rougeL) with rouge-score's tokeniser
//                      (lowercase, [a-z0-9]+ tokens), no stemming
//   mean_log_likelihood (targets, scores): the mean score
//
// Thread-safety: the functions are pure.
#ifndef TRAINYARD_EVALUATION_METRIC_FNS_H_
#define TRAINYARD_EVALUATION_METRIC_FNS_H_

#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

using MetricResults = std::map<std::string, double>;
using AuxValues = std::map<std::string, std::vector<double>>;

using ScoreMetricFn = std::function<absl::StatusOr<MetricResults>(const std::vector<std::string>& targets,
                                                                  const std::vector<double>& scores)>;
using PredictionMetricFn = std::function<absl::StatusOr<MetricResults>(const std::vector<std::string>& targets,
                                                                       const std::vector<std::string>& predictions)>;
using PredictionAuxMetricFn = std::function<absl::StatusOr<MetricResults>(
    const std::vector<std::string>& targets, const std::vector<std::string>& predictions, const AuxValues& aux)>;

// One metric function of any of the three forms, with a name for errors.
struct MetricFn {
  std::string name;
  std::variant<ScoreMetricFn, PredictionMetricFn, PredictionAuxMetricFn> fn;

  bool needs_predictions() const { return fn.index() != 0; }
  bool needs_scores() const { return fn.index() == 0; }
};

// Built-in metric functions (see the file comment).
absl::StatusOr<MetricResults> ExactMatch(const std::vector<std::string>& targets,
                                         const std::vector<std::string>& predictions);
absl::StatusOr<MetricResults> SequenceAccuracy(const std::vector<std::string>& targets,
                                               const std::vector<std::string>& predictions);
absl::StatusOr<MetricResults> TokenF1(const std::vector<std::string>& targets,
                                      const std::vector<std::string>& predictions);
absl::StatusOr<MetricResults> Bleu(const std::vector<std::string>& targets,
                                   const std::vector<std::string>& predictions);
absl::StatusOr<MetricResults> Rouge(const std::vector<std::string>& targets,
                                    const std::vector<std::string>& predictions);
absl::StatusOr<MetricResults> MeanLogLikelihood(const std::vector<std::string>& targets,
                                                const std::vector<double>& scores);

// The built-ins by name ("exact_match", "sequence_accuracy", "token_f1",
// "bleu", "rouge", "mean_log_likelihood"); kNotFound lists the names.
absl::StatusOr<MetricFn> BuiltinMetricFn(const std::string& name);
std::vector<std::string> BuiltinMetricFnNames();
// The built-ins `names` names, in order: what a task, a request or a flag
// lists. kInvalidArgument "<context>: metric function '<name>' is not one
// of: ..." for the first unknown name.
absl::StatusOr<std::vector<MetricFn>> BuiltinMetricFns(const std::vector<std::string>& names,
                                                       absl::string_view context);

// Runs every function on what it needs and merges the results.
// kInvalidArgument when a function returns a name another one returned
// (naming both functions and the value), when sizes differ, or when a
// function needs predictions/scores that were not given (nullptr).
absl::StatusOr<MetricResults> ComputeMetrics(const std::vector<MetricFn>& fns, const std::vector<std::string>& targets,
                                             const std::vector<std::string>* predictions, const AuxValues* aux,
                                             const std::vector<double>* scores);

// Helpers, exposed for tests.
std::string Tokenize13a(const std::string& line);  // sacrebleu's "13a", tokens joined by spaces
std::string NormalizeSquad(const std::string& text);
std::vector<std::string> RougeTokens(const std::string& text);

}  // namespace trainyard

#endif  // TRAINYARD_EVALUATION_METRIC_FNS_H_
