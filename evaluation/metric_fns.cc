#include "evaluation/metric_fns.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace trainyard {
namespace {

absl::Status CheckSizes(const char* what, size_t targets, size_t other) {
  if (targets != other) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", targets, " targets but ", other, " predictions or scores"));
  }
  return absl::OkStatus();
}

std::vector<std::string> SplitWhitespace(const std::string& s) {
  return absl::StrSplit(s, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The characters sacrebleu's 13a tokeniser surrounds with spaces:
// [{-~], [[-`], [ -&], [(-+], [:-@], and '/'.
bool Is13aSymbol(unsigned char c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) || (c >= 0x28 && c <= 0x2B) ||
         (c >= 0x3A && c <= 0x40) || c == '/';
}

bool IsPeriodOrComma(char c) { return c == '.' || c == ','; }

// n-gram counts of `tokens` for n = 1..max_n, keyed by the joined n-gram.
std::map<std::string, int64_t> NGrams(const std::vector<std::string>& tokens, int n) {
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i + n <= tokens.size(); ++i) {
    std::string key = tokens[i];
    for (int k = 1; k < n; ++k) absl::StrAppend(&key, "\x1f", tokens[i + k]);
    ++out[key];
  }
  return out;
}

double FMeasure(double overlap, double predicted, double target) {
  if (overlap <= 0 || predicted <= 0 || target <= 0) return 0;
  const double precision = overlap / predicted, recall = overlap / target;
  return 2 * precision * recall / (precision + recall);
}

size_t LongestCommonSubsequence(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<size_t> row(b.size() + 1, 0), prev(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      row[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], row[j - 1]);
    }
    std::swap(row, prev);
  }
  return prev[b.size()];
}

}  // namespace

std::string Tokenize13a(const std::string& input) {
  std::string line = absl::StrReplaceAll(input, {{"<skipped>", ""}, {"-\n", ""}, {"\n", " "}});
  if (line.find('&') != std::string::npos) {
    line = absl::StrReplaceAll(line, {{"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}});
  }
  line = " " + line + " ";
  // 1: symbols get spaces around them.
  std::string a;
  for (char c : line) {
    if (Is13aSymbol(static_cast<unsigned char>(c))) {
      a += ' ';
      a += c;
      a += ' ';
    } else {
      a += c;
    }
  }
  // 2: period and comma unless preceded by a digit: "X." -> "X . ".
  std::string b;
  for (size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && !IsDigit(a[i]) && IsPeriodOrComma(a[i + 1])) {
      b += a[i];
      b += ' ';
      b += a[i + 1];
      b += ' ';
      i += 2;
    } else {
      b += a[i++];
    }
  }
  // 3: period and comma unless followed by a digit: ".X" -> " . X".
  std::string c;
  for (size_t i = 0; i < b.size();) {
    if (i + 1 < b.size() && IsPeriodOrComma(b[i]) && !IsDigit(b[i + 1])) {
      c += ' ';
      c += b[i];
      c += ' ';
      c += b[i + 1];
      i += 2;
    } else {
      c += b[i++];
    }
  }
  // 4: a dash preceded by a digit: "9-" -> "9 - ".
  std::string d;
  for (size_t i = 0; i < c.size();) {
    if (i + 1 < c.size() && IsDigit(c[i]) && c[i + 1] == '-') {
      d += c[i];
      d += " - ";
      i += 2;
    } else {
      d += c[i++];
    }
  }
  return absl::StrJoin(SplitWhitespace(d), " ");
}

std::string NormalizeSquad(const std::string& text) {
  std::string lower;
  for (char ch : text) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (u < 128 && std::ispunct(u)) continue;  // Python's string.punctuation
    lower += static_cast<char>(u < 128 ? std::tolower(u) : u);
  }
  std::vector<std::string> words;
  for (std::string& w : SplitWhitespace(lower)) {
    if (w != "a" && w != "an" && w != "the") words.push_back(std::move(w));
  }
  return absl::StrJoin(words, " ");
}

std::vector<std::string> RougeTokens(const std::string& text) {
  std::string cleaned;
  for (char ch : text) {
    const unsigned char u = static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(ch)));
    cleaned += (std::isalnum(u) && u < 128) ? static_cast<char>(u) : ' ';
  }
  return SplitWhitespace(cleaned);
}

absl::StatusOr<MetricResults> ExactMatch(const std::vector<std::string>& targets,
                                         const std::vector<std::string>& predictions) {
  if (absl::Status s = CheckSizes("exact_match", targets.size(), predictions.size()); !s.ok()) return s;
  if (targets.empty()) return MetricResults{{"exact_match", 0.0}};
  double same = 0;
  for (size_t i = 0; i < targets.size(); ++i) same += NormalizeSquad(targets[i]) == NormalizeSquad(predictions[i]);
  return MetricResults{{"exact_match", 100.0 * same / static_cast<double>(targets.size())}};
}

absl::StatusOr<MetricResults> SequenceAccuracy(const std::vector<std::string>& targets,
                                               const std::vector<std::string>& predictions) {
  if (absl::Status s = CheckSizes("sequence_accuracy", targets.size(), predictions.size()); !s.ok()) return s;
  if (targets.empty()) return MetricResults{{"sequence_accuracy", 0.0}};
  double same = 0;
  for (size_t i = 0; i < targets.size(); ++i) same += targets[i] == predictions[i];
  return MetricResults{{"sequence_accuracy", 100.0 * same / static_cast<double>(targets.size())}};
}

absl::StatusOr<MetricResults> TokenF1(const std::vector<std::string>& targets,
                                      const std::vector<std::string>& predictions) {
  if (absl::Status s = CheckSizes("token_f1", targets.size(), predictions.size()); !s.ok()) return s;
  if (targets.empty()) return MetricResults{{"f1", 0.0}};
  double total = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::vector<std::string> gold = SplitWhitespace(NormalizeSquad(targets[i]));
    const std::vector<std::string> pred = SplitWhitespace(NormalizeSquad(predictions[i]));
    if (gold.empty() || pred.empty()) {
      total += gold.empty() && pred.empty() ? 1.0 : 0.0;
      continue;
    }
    const std::map<std::string, int64_t> g = NGrams(gold, 1), p = NGrams(pred, 1);
    double same = 0;
    for (const auto& [token, count] : p) {
      auto it = g.find(token);
      if (it != g.end()) same += static_cast<double>(std::min(count, it->second));
    }
    total += FMeasure(same, static_cast<double>(pred.size()), static_cast<double>(gold.size()));
  }
  return MetricResults{{"f1", 100.0 * total / static_cast<double>(targets.size())}};
}

absl::StatusOr<MetricResults> Bleu(const std::vector<std::string>& targets,
                                   const std::vector<std::string>& predictions) {
  if (absl::Status s = CheckSizes("bleu", targets.size(), predictions.size()); !s.ok()) return s;
  constexpr int kOrder = 4;
  double correct[kOrder] = {0, 0, 0, 0}, total[kOrder] = {0, 0, 0, 0};
  double sys_len = 0, ref_len = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::vector<std::string> ref = SplitWhitespace(Tokenize13a(targets[i]));
    const std::vector<std::string> hyp = SplitWhitespace(Tokenize13a(predictions[i]));
    sys_len += static_cast<double>(hyp.size());
    ref_len += static_cast<double>(ref.size());
    for (int n = 1; n <= kOrder; ++n) {
      const std::map<std::string, int64_t> h = NGrams(hyp, n), r = NGrams(ref, n);
      for (const auto& [gram, count] : h) {
        auto it = r.find(gram);
        if (it != r.end()) correct[n - 1] += static_cast<double>(std::min(count, it->second));
        total[n - 1] += static_cast<double>(count);
      }
    }
  }
  // sacrebleu's compute_bleu with smooth_method "exp", effective order off.
  double precisions[kOrder] = {0, 0, 0, 0};
  double smooth = 1;
  for (int n = 0; n < kOrder; ++n) {
    if (total[n] == 0) break;
    if (correct[n] == 0) {
      smooth *= 2;
      precisions[n] = 100.0 / (smooth * total[n]);
    } else {
      precisions[n] = 100.0 * correct[n] / total[n];
    }
  }
  double log_sum = 0;
  for (double p : precisions) log_sum += p > 0 ? std::log(p) : -9999999999.0;
  const double brevity = sys_len < ref_len ? (sys_len > 0 ? std::exp(1 - ref_len / sys_len) : 0.0) : 1.0;
  return MetricResults{{"bleu", brevity * std::exp(log_sum / kOrder)}};
}

absl::StatusOr<MetricResults> Rouge(const std::vector<std::string>& targets,
                                    const std::vector<std::string>& predictions) {
  if (absl::Status s = CheckSizes("rouge", targets.size(), predictions.size()); !s.ok()) return s;
  double r1 = 0, r2 = 0, rl = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::vector<std::string> t = RougeTokens(targets[i]), p = RougeTokens(predictions[i]);
    for (int n : {1, 2}) {
      const std::map<std::string, int64_t> tg = NGrams(t, n), pg = NGrams(p, n);
      double overlap = 0, tn = 0, pn = 0;
      for (const auto& [gram, count] : tg) tn += static_cast<double>(count);
      for (const auto& [gram, count] : pg) {
        pn += static_cast<double>(count);
        auto it = tg.find(gram);
        if (it != tg.end()) overlap += static_cast<double>(std::min(count, it->second));
      }
      (n == 1 ? r1 : r2) += FMeasure(overlap, pn, tn);
    }
    rl += FMeasure(static_cast<double>(LongestCommonSubsequence(t, p)), static_cast<double>(p.size()),
                   static_cast<double>(t.size()));
  }
  const double n = targets.empty() ? 1.0 : static_cast<double>(targets.size());
  return MetricResults{{"rouge1", 100 * r1 / n}, {"rouge2", 100 * r2 / n}, {"rougeL", 100 * rl / n}};
}

absl::StatusOr<MetricResults> MeanLogLikelihood(const std::vector<std::string>& targets,
                                                const std::vector<double>& scores) {
  if (absl::Status s = CheckSizes("mean_log_likelihood", targets.size(), scores.size()); !s.ok()) return s;
  if (scores.empty()) return MetricResults{{"mean_log_likelihood", 0.0}};
  return MetricResults{
      {"mean_log_likelihood", std::accumulate(scores.begin(), scores.end(), 0.0) / static_cast<double>(scores.size())}};
}

std::vector<std::string> BuiltinMetricFnNames() {
  return {"bleu", "exact_match", "mean_log_likelihood", "rouge", "sequence_accuracy", "token_f1"};
}

absl::StatusOr<MetricFn> BuiltinMetricFn(const std::string& name) {
  if (name == "exact_match") return MetricFn{name, PredictionMetricFn(ExactMatch)};
  if (name == "sequence_accuracy") return MetricFn{name, PredictionMetricFn(SequenceAccuracy)};
  if (name == "token_f1") return MetricFn{name, PredictionMetricFn(TokenF1)};
  if (name == "bleu") return MetricFn{name, PredictionMetricFn(Bleu)};
  if (name == "rouge") return MetricFn{name, PredictionMetricFn(Rouge)};
  if (name == "mean_log_likelihood") return MetricFn{name, ScoreMetricFn(MeanLogLikelihood)};
  return absl::NotFoundError(
      absl::StrCat("metric function '", name, "' is not one of: ", absl::StrJoin(BuiltinMetricFnNames(), ", ")));
}

absl::StatusOr<std::vector<MetricFn>> BuiltinMetricFns(const std::vector<std::string>& names,
                                                       absl::string_view context) {
  std::vector<MetricFn> fns;
  fns.reserve(names.size());
  for (const std::string& name : names) {
    absl::StatusOr<MetricFn> fn = BuiltinMetricFn(name);
    if (!fn.ok()) return absl::InvalidArgumentError(absl::StrCat(context, ": ", fn.status().message()));
    fns.push_back(*std::move(fn));
  }
  return fns;
}

absl::StatusOr<MetricResults> ComputeMetrics(const std::vector<MetricFn>& fns, const std::vector<std::string>& targets,
                                             const std::vector<std::string>* predictions, const AuxValues* aux,
                                             const std::vector<double>* scores) {
  MetricResults out;
  std::map<std::string, std::string> owner;  // value name -> function name
  for (const MetricFn& f : fns) {
    absl::StatusOr<MetricResults> values;
    if (const auto* fn = std::get_if<ScoreMetricFn>(&f.fn)) {
      if (scores == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("metric function '", f.name, "' needs scores"));
      }
      values = (*fn)(targets, *scores);
    } else if (const auto* fn = std::get_if<PredictionMetricFn>(&f.fn)) {
      if (predictions == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("metric function '", f.name, "' needs predictions"));
      }
      values = (*fn)(targets, *predictions);
    } else {
      const auto& with_aux = std::get<PredictionAuxMetricFn>(f.fn);
      if (predictions == nullptr || aux == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("metric function '", f.name, "' needs predictions and aux values"));
      }
      values = with_aux(targets, *predictions, *aux);
    }
    if (!values.ok()) {
      return absl::Status(values.status().code(),
                          absl::StrCat("metric function '", f.name, "': ", values.status().message()));
    }
    for (const auto& [k, v] : *values) {
      auto [it, inserted] = owner.emplace(k, f.name);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("metric '", k, "' is returned by both '", it->second, "' and '",
                                                       f.name, "'; metric names must be unique"));
      }
      out[k] = v;
    }
  }
  return out;
}

}  // namespace trainyard
