// `trainyard score`, `trainyard evaluate`, and `trainyard predict
// --examples/--json` (in trainyard-torch): the interactive model's Score,
// Evaluate and PredictWithAux on a checkpoint, in this process.
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/job_client.h"
#include "common/status_macros.h"
#include "interactive/interactive_model.h"
#include "job/infer_eval.h"
#include "nlohmann/json.hpp"
#include "spec/session_request.h"

namespace trainyard {
namespace {

// Decoding flags (predict, evaluate), as an InferenceConfig's fields.
struct Decoding {
  std::string method, alpha, temperature, top_p, seed;
  int beam_size = 0, top_k = 0, max_decode_length = 0;
};

struct Common {
  bool decodes = false;  // the command has the decoding flags
  Decoding decoding;
  std::string coordinator;  // set: a session on the coordinator's workers
  std::string checkpoint;
  std::vector<std::string> inputs, targets;
  std::string examples_file;
  bool json = false;
  int batch_size = 32, input_length = 64, target_length = 64;
  int workers = 1;
};

void AddCommon(FlagSet* flags, Common* c, bool targets) {
  flags->AddString("checkpoint", &c->checkpoint, "DIR", "a checkpoint directory (checkpoint_<step>), required");
  flags->AddString("coordinator", &c->coordinator, "HOST:PORT",
                   "run on an idle worker of this coordinator (an interactive session; the checkpoint\n"
                   "path is read by the worker); default: in this process");
  flags->AddRepeated("input", &c->inputs, "TEXT", "an example's input (repeatable)");
  if (targets) flags->AddRepeated("target", &c->targets, "TEXT", "the target of the --input at the same position");
  flags->AddString("examples", &c->examples_file, "FILE.jsonl",
                   "examples as JSON lines: {\"input\": ...} or {\"input\": ..., \"target\": ...}");
  flags->AddBool("json", &c->json, "one JSON object per example (per run, for evaluate)");
  flags->AddInt("batch-size", &c->batch_size, "N", "examples per batch (default 32)");
  flags->AddInt("input-length", &c->input_length, "N", "input tokens kept (default 64)");
  flags->AddInt("target-length", &c->target_length, "N", "target tokens kept, and longest prediction (default 64)");
  flags->AddInt("workers", &c->workers, "N",
                "with --coordinator: hold the model on N workers, data-parallel (each takes\n"
                "--batch-size / N rows of every batch; default 1)");
}

// The decoding options INFERENCE jobs have (InferenceConfig), in this
// process and in sessions alike.
void AddDecoding(FlagSet* flags, Common* c) {
  c->decodes = true;
  Decoding* d = &c->decoding;
  flags->AddString("method", &d->method, "greedy|beam|sample", "how to decode (default greedy)");
  flags->AddInt("beam-size", &d->beam_size, "N", "beam: beams per example (default 4)");
  flags->AddString("alpha", &d->alpha, "X", "beam: length penalty exponent (default 0.6)");
  flags->AddString("temperature", &d->temperature, "X", "sample: softmax temperature (default 1.0)");
  flags->AddInt("top-k", &d->top_k, "N", "sample: draw from the N likeliest tokens (default: all)");
  flags->AddString("top-p", &d->top_p, "X", "sample: draw from the smallest set of probability >= X (default: all)");
  flags->AddString("sample-seed", &d->seed, "N", "sample: the seed (default 0; worker r of a session adds r)");
  flags->AddInt("max-decode-length", &d->max_decode_length, "N",
                "longest prediction in tokens (default --target-length)");
}

// The flags as an InferenceConfig (checked later with the session request).
absl::StatusOr<InferenceConfig> ToInference(const Decoding& d) {
  InferenceConfig config;
  const std::string method = absl::AsciiStrToLower(d.method);
  if (method == "beam") {
    config.set_method(InferenceConfig::BEAM);
  } else if (method == "sample") {
    config.set_method(InferenceConfig::SAMPLE);
  } else if (method == "greedy" || method.empty()) {
    config.set_method(InferenceConfig::GREEDY);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--method: '", d.method, "'; one of greedy, beam, sample"));
  }
  auto number = [](const std::string& flag, const std::string& text, auto set) -> absl::Status {
    if (text.empty()) return absl::OkStatus();
    double v;
    if (!absl::SimpleAtod(text, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text, "' is not a number"));
    }
    set(v);
    return absl::OkStatus();
  };
  TY_RETURN_IF_ERROR(number("alpha", d.alpha, [&](double v) { config.set_alpha(static_cast<float>(v)); }));
  TY_RETURN_IF_ERROR(
      number("temperature", d.temperature, [&](double v) { config.set_temperature(static_cast<float>(v)); }));
  TY_RETURN_IF_ERROR(number("top-p", d.top_p, [&](double v) { config.set_top_p(static_cast<float>(v)); }));
  if (!d.seed.empty()) {
    int64_t seed;
    if (!absl::SimpleAtoi(d.seed, &seed)) {
      return absl::InvalidArgumentError(absl::StrCat("--sample-seed: '", d.seed, "' is not an integer"));
    }
    config.set_seed(seed);
  }
  config.set_beam_size(d.beam_size);
  config.set_top_k(d.top_k);
  config.set_max_decode_length(d.max_decode_length);
  return config;
}

// The session request these flags ask for, normalised (also for a run in
// this process, so that both check and default alike).
absl::StatusOr<OpenSessionRequest> SessionRequestOf(const Common& c) {
  OpenSessionRequest open;
  open.set_checkpoint(c.checkpoint);
  open.set_batch_size(c.batch_size);
  open.mutable_feature_lengths()->set_inputs(c.input_length);
  open.mutable_feature_lengths()->set_targets(c.target_length);
  open.set_idle_timeout_seconds(120);
  open.set_num_workers(c.workers);
  if (c.decodes) {
    TY_ASSIGN_OR_RETURN(*open.mutable_inference(), ToInference(c.decoding));
  }
  absl::StatusOr<OpenSessionRequest> normalized = NormalizeOpenSessionRequest(open, {});
  if (!normalized.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("decoding and batch flags: ", normalized.status().message()));
  }
  return normalized;
}

absl::StatusOr<std::vector<NaturalExample>> LoadExamples(const Common& c, bool need_targets) {
  std::vector<NaturalExample> out;
  if (!c.examples_file.empty() && !c.inputs.empty()) {
    return absl::InvalidArgumentError("give --input or --examples, not both");
  }
  if (!c.examples_file.empty()) {
    std::ifstream in(c.examples_file);
    if (!in) return absl::NotFoundError(absl::StrCat("--examples: cannot read ", c.examples_file));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      const std::string where = absl::StrCat(c.examples_file, ":", n, ": ");
      if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(where + "not a JSON object");
      const char* input_key = j.contains("input") ? "input" : "inputs";
      const char* target_key = j.contains("target") ? "target" : "targets";
      if (!j.contains(input_key) || !j[input_key].is_string()) {
        return absl::InvalidArgumentError(where + "needs a string \"input\"");
      }
      if (j.contains(target_key)) {
        if (!j[target_key].is_string()) return absl::InvalidArgumentError(where + "\"target\" is not a string");
        out.emplace_back(j[input_key].get<std::string>(), j[target_key].get<std::string>());
      } else if (need_targets) {
        return absl::InvalidArgumentError(where + "needs a \"target\" here");
      } else {
        out.emplace_back(j[input_key].get<std::string>());
      }
    }
  } else {
    if (!c.targets.empty() && c.targets.size() != c.inputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.inputs.size(), " --input but ", c.targets.size(), " --target; give one target per input"));
    }
    if (need_targets && c.targets.empty() && !c.inputs.empty()) {
      return absl::InvalidArgumentError("each --input needs a --target here");
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.targets.empty()) {
        out.emplace_back(c.inputs[i]);
      } else {
        out.emplace_back(c.inputs[i], c.targets[i]);
      }
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("no examples: give --input TEXT or --examples FILE.jsonl");
  return out;
}

absl::StatusOr<std::unique_ptr<InteractiveModel>> Open(const Common& c, const OpenSessionRequest& request) {
  // Logs (warnings: truncation, skipped checkpoints) go to stderr; stdout
  // carries the results only.
  std::ostringstream ignored;
  (void)SetUpLogging("warn", ignored);
  if (c.checkpoint.empty()) return absl::InvalidArgumentError("--checkpoint: required");
  if (c.batch_size < 1 || c.input_length < 1 || c.target_length < 1) {
    return absl::InvalidArgumentError("--batch-size, --input-length and --target-length must be >= 1");
  }
  InteractiveModelOptions options;
  options.batch_size = c.batch_size;
  options.task_feature_lengths.set_inputs(c.input_length);
  options.task_feature_lengths.set_targets(c.target_length);
  options.restore.set_mode(RestoreConfig::SPECIFIC);
  options.restore.set_path(c.checkpoint);
  options.decode = DecodeOptionsFromConfig(request.inference(), /*seed=*/0);  // as a session's ranks
  return InteractiveModel::Create(options);                                   // the checkpoint's model, no output_dir
}

// Where the model runs: in this process, or in a session on a
// coordinator's worker (closed when this goes away).
class Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const Common& c) {
    auto b = std::unique_ptr<Backend>(new Backend);
    if (c.coordinator.empty()) {
      if (c.workers != 1) return absl::InvalidArgumentError("--workers: needs --coordinator");
      TY_ASSIGN_OR_RETURN(OpenSessionRequest request, SessionRequestOf(c));
      TY_ASSIGN_OR_RETURN(b->model_, Open(c, request));
      return b;
    }
    if (c.checkpoint.empty()) return absl::InvalidArgumentError("--checkpoint: required");
    if (c.workers < 1) return absl::InvalidArgumentError(absl::StrCat("--workers: ", c.workers, "; must be >= 1"));
    TY_ASSIGN_OR_RETURN(OpenSessionRequest open, SessionRequestOf(c));
    b->client_ = std::make_unique<JobClient>(c.coordinator);
    TY_ASSIGN_OR_RETURN(OpenSessionResponse opened, b->client_->OpenSession(open));
    b->session_ = opened.session_id();
    return b;
  }
  ~Backend() {
    if (!session_.empty()) client_->CloseSession(session_).IgnoreError();  // else it idles out
  }

  absl::StatusOr<Inference> Predict(const std::vector<NaturalExample>& examples) {
    if (model_) return model_->PredictWithAux(examples);
    TY_ASSIGN_OR_RETURN(SessionResponse r, Run(SessionRequest::PREDICT, examples, {}));
    Inference out;
    for (const NaturalExample& e : examples) out.inputs.push_back(e.input);
    out.predictions.assign(r.predictions().begin(), r.predictions().end());
    out.aux["scores"].assign(r.scores().begin(), r.scores().end());
    out.truncated_examples = r.truncated_examples();
    return out;
  }
  absl::StatusOr<std::vector<double>> Score(const std::vector<NaturalExample>& examples) {
    if (model_) return model_->Score(examples);
    TY_ASSIGN_OR_RETURN(SessionResponse r, Run(SessionRequest::SCORE, examples, {}));
    return std::vector<double>(r.scores().begin(), r.scores().end());
  }
  absl::StatusOr<MetricResults> Evaluate(const std::vector<NaturalExample>& examples,
                                         const std::vector<std::string>& metrics) {
    if (model_) {
      TY_ASSIGN_OR_RETURN(std::vector<MetricFn> fns, BuiltinMetricFns(metrics, "--metric"));
      return model_->Evaluate(examples, fns);
    }
    TY_ASSIGN_OR_RETURN(SessionResponse r, Run(SessionRequest::EVALUATE, examples, metrics));
    return MetricResults(r.metrics().begin(), r.metrics().end());
  }

 private:
  Backend() = default;
  absl::StatusOr<SessionResponse> Run(SessionRequest::Op op, const std::vector<NaturalExample>& examples,
                                      const std::vector<std::string>& metrics) {
    SessionRequest request;
    request.set_session_id(session_);
    request.set_op(op);
    for (const NaturalExample& e : examples) {
      SessionExample* x = request.add_examples();
      x->set_input(e.input);
      if (e.target.has_value()) x->set_target(*e.target);
    }
    for (const std::string& m : metrics) request.add_metric_fns(m);
    return client_->RunSession(request);
  }

  std::unique_ptr<InteractiveModel> model_;
  std::unique_ptr<JobClient> client_;
  std::string session_;
};

int Fail(const absl::Status& s, std::ostream& err) {
  err << "error: " << s.message() << "\n";
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? kExitUsage : kExitFailed;
}

}  // namespace

int RunPredictExamples(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common c;
  FlagSet flags("predict --checkpoint DIR (--input TEXT... | --examples FILE.jsonl) --json [decoding flags]",
                "Predictions (greedy, beam search or sampling) and their log-likelihoods, one\n"
                "JSON object per example: {\"input\", \"prediction\", \"score\"}.");
  AddCommon(&flags, &c, /*targets=*/false);
  AddDecoding(&flags, &c);
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  absl::StatusOr<std::vector<NaturalExample>> examples = LoadExamples(c, false);
  if (!examples.ok()) return Fail(examples.status(), err);
  absl::StatusOr<std::unique_ptr<Backend>> model = Backend::Create(c);
  if (!model.ok()) return Fail(model.status(), err);
  absl::StatusOr<Inference> predicted = (*model)->Predict(*examples);
  if (!predicted.ok()) return Fail(predicted.status(), err);
  for (size_t i = 0; i < examples->size(); ++i) {
    const double score = predicted->aux.at("scores")[i];
    if (c.json) {
      out << nlohmann::json(
                 {{"input", predicted->inputs[i]}, {"prediction", predicted->predictions[i]}, {"score", score}})
                 .dump()
          << "\n";
    } else {
      out << absl::StrFormat("%-20s -> %s  (log-likelihood %.3f)\n", predicted->inputs[i], predicted->predictions[i],
                             score);
    }
  }
  if (predicted->truncated_examples > 0) {
    // (Also reported by a session's worker, in its log.)
    err << "note: " << predicted->truncated_examples << " example(s) were cut to --input-length " << c.input_length
        << "\n";
  }
  return kExitOk;
}

int RunScore(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common c;
  FlagSet flags("score --checkpoint DIR (--input TEXT --target TEXT... | --examples FILE.jsonl) [--json]",
                "The log-likelihood of each target given its input under a checkpoint's\n"
                "model. With --json: one {\"input\", \"target\", \"score\"} per example.");
  AddCommon(&flags, &c, /*targets=*/true);
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  absl::StatusOr<std::vector<NaturalExample>> examples = LoadExamples(c, true);
  if (!examples.ok()) return Fail(examples.status(), err);
  absl::StatusOr<std::unique_ptr<Backend>> model = Backend::Create(c);
  if (!model.ok()) return Fail(model.status(), err);
  absl::StatusOr<std::vector<double>> scores = (*model)->Score(*examples);
  if (!scores.ok()) return Fail(scores.status(), err);
  for (size_t i = 0; i < examples->size(); ++i) {
    const NaturalExample& e = (*examples)[i];
    if (c.json) {
      out << nlohmann::json({{"input", e.input}, {"target", *e.target}, {"score", (*scores)[i]}}).dump() << "\n";
    } else {
      out << absl::StrFormat("%9.4f  %s -> %s\n", (*scores)[i], e.input, *e.target);
    }
  }
  return kExitOk;
}

int RunEvaluate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common c;
  std::vector<std::string> metrics;
  FlagSet flags(
      "evaluate --checkpoint DIR (--input TEXT --target TEXT... | --examples FILE.jsonl) "
      "[--metric NAME]... [--json]",
      "Decodes and scores the examples with a checkpoint's model and computes metric\n"
      "functions over them (default: exact_match, sequence_accuracy, token_f1, bleu,\n"
      "rouge, mean_log_likelihood).");
  AddCommon(&flags, &c, /*targets=*/true);
  AddDecoding(&flags, &c);
  flags.AddRepeated("metric", &metrics, "NAME", "a built-in metric function (repeatable)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (metrics.empty()) {
    metrics = {"exact_match", "sequence_accuracy", "token_f1", "bleu", "rouge", "mean_log_likelihood"};
  }
  if (absl::Status known = BuiltinMetricFns(metrics, "--metric").status(); !known.ok()) return Fail(known, err);
  absl::StatusOr<std::vector<NaturalExample>> examples = LoadExamples(c, true);
  if (!examples.ok()) return Fail(examples.status(), err);
  absl::StatusOr<std::unique_ptr<Backend>> model = Backend::Create(c);
  if (!model.ok()) return Fail(model.status(), err);
  absl::StatusOr<MetricResults> values = (*model)->Evaluate(*examples, metrics);
  if (!values.ok()) return Fail(values.status(), err);
  if (c.json) {
    out << nlohmann::json(*values).dump() << "\n";
  } else {
    out << examples->size() << " example(s), checkpoint " << c.checkpoint
        << (c.coordinator.empty() ? "" : " (session on " + c.coordinator + ")") << "\n";
    for (const auto& [k, v] : *values) out << absl::StrFormat("  %-22s %10.4f\n", k, v);
  }
  return kExitOk;
}

}  // namespace trainyard
