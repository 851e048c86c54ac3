// No field accepted that does nothing: for every leaf field of JobSpec (found
// by walking its descriptor, so a field added later without a case here
// fails this test), a case shows that changing it changes the run or its
// outputs, or that validation refuses it with a reason naming it.
//
// A run is the real thing without gRPC: the coordinator's JobDriver drives
// one WorkerCore per rank (Gloo over loopback for more than one), as the
// coordinator does over the network. Its fingerprint: how the attempt ended
// and why, every progress record the driver made (step, rank 0's summary
// and eval metrics without timings, the newest checkpoint), the files under
// output_dir (names; contents of the JSON outputs), and every checkpoint's
// tensors, data positions and world size. Two runs of one spec have the
// same fingerprint (checked), so a different one is the field's doing.
//
// Fields whose effect is arithmetic-neutral by design are shown by what they
// do instead: data_parallel's by the collective calls a step makes,
// checkpoint.async by a save that fails in the background, name by the job
// id, max_restarts by the driver's restart decision.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "collective/collective.h"
#include "collective/fake_collective.h"
#include "collective/ranks_on_threads.h"
#include "collective/store.h"
#include "common/mutex.h"
#include "common/testing/status_matchers.h"
#include "coordinator/job_driver.h"
#include "coordinator/testing/fake_worker_client.h"
#include "data/bundled.h"
#include "data/tfrecord.h"
#include "gtest/gtest.h"
#include "job/training_job.h"
#include "proto/job.pb.h"
#include "proto/job_service.pb.h"
#include "proto/tf_example.pb.h"
#include "spec/actions.h"
#include "spec/jobspec_validator.h"
#include "trainer/train_checkpoint.h"
#include "worker/worker_core.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// The JobSpec's leaf fields, as dotted paths ("optimizer.adafactor.beta1"):
// scalars, enums, maps and repeated scalars are leaves; a message field is
// walked into (an empty message is a leaf: its presence is its value).

void CollectLeaves(const google::protobuf::Descriptor* d, const std::string& prefix, std::set<std::string>* seen,
                   std::vector<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    const std::string path = prefix + f->name();
    if (f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || f->is_map() ||
        f->message_type()->field_count() == 0 || seen->count(f->message_type()->full_name())) {
      out->push_back(path);
      continue;
    }
    seen->insert(f->message_type()->full_name());
    CollectLeaves(f->message_type(), path + ".", seen, out);
    seen->erase(f->message_type()->full_name());
  }
}

std::vector<std::string> JobSpecLeaves() {
  std::set<std::string> seen = {JobSpec::descriptor()->full_name()};
  std::vector<std::string> out;
  CollectLeaves(JobSpec::descriptor(), "", &seen, &out);
  return out;
}

// ---------------------------------------------------------------------------
// The in-process system.

// A worker answering the coordinator's calls with a WorkerCore in this
// process. `fail_run`: the first RunSteps answers UNAVAILABLE (a lost worker).
class CoreResponder : public FakeWorker::Responder {
 public:
  CoreResponder(WorkerCore* core, bool fail_run) : core_(core), fail_run_(fail_run) {}
  absl::StatusOr<StartJobResponse> StartJob(const StartJobRequest& r) override { return core_->StartJob(r); }
  absl::StatusOr<RunStepsResponse> RunSteps(const RunStepsRequest& r) override {
    if (fail_run_.exchange(false)) return absl::UnavailableError("the worker's host went away");
    return core_->RunSteps(r);
  }
  absl::StatusOr<EvaluateResponse> Evaluate(const EvaluateRequest& r) override { return core_->Evaluate(r); }
  absl::StatusOr<InferResponse> Infer(const InferRequest& r) override { return core_->Infer(r); }
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& r) override {
    return core_->SaveCheckpoint(r);
  }
  absl::StatusOr<OpenSessionResponse> OpenSession(const WorkerOpenSessionRequest& r) override {
    return core_->OpenSession(r);
  }
  absl::StatusOr<SessionResponse> RunSession(const SessionRequest& r) override { return core_->RunSession(r); }
  absl::Status AbortJob(const AbortJobRequest& r) override { return core_->AbortJob(r); }
  absl::StatusOr<RegroupResponse> Regroup(const RegroupRequest& r) override { return core_->Regroup(r); }

 private:
  WorkerCore* const core_;
  std::atomic<bool> fail_run_;
};

std::string Num(double v) { return absl::StrFormat("%.17g", v); }

// The coordinator's side: every progress record, as text.
class RecordingHost : public JobDriverHost {
 public:
  Goodput GoodputNow(const std::string& /*job_id*/) override { return Goodput(); }
  void RecordProgress(const std::string& /*job_id*/, const std::function<void(JobInfo*)>& edit) override {
    MutexLock lock(&mu_);
    edit(&info_);
    std::string line =
        absl::StrCat("step ", info_.step(), " ckpt ", fs::path(info_.latest_checkpoint()).filename().string());
    for (const auto& [k, v] : std::map<std::string, double>(info_.metrics().begin(), info_.metrics().end())) {
      if (absl::StrContains(k, "timing/")) continue;  // wall times
      absl::StrAppend(&line, " ", k, "=", Num(v));
    }
    records_.push_back(line);
  }
  void ChangeState(const std::string& /*job_id*/, JobState state, const std::string& reason,
                   const std::function<void(JobInfo*)>& edit) override {
    MutexLock lock(&mu_);
    if (edit) edit(&info_);
    info_.set_state(state);
    info_.set_reason(reason);
    records_.push_back(absl::StrCat("state ", JobState_Name(state), ": ", reason));
  }
  void SetRanks(const std::string& /*job_id*/, const std::vector<std::string>& worker_ids,
                const std::vector<std::string>& /*joining*/) override {
    MutexLock lock(&mu_);
    records_.push_back(absl::StrCat("ranks ", absl::StrJoin(worker_ids, ",")));
  }
  void CloseRendezvous(const std::string& scope, const std::string& reason) override {
    MutexLock lock(&mu_);
    records_.push_back(absl::StrCat("rendezvous ", scope, " closed: ", reason));
  }
  void ReleaseWorkers(const std::string& /*job_id*/, const std::vector<std::string>& worker_ids) override {
    MutexLock lock(&mu_);
    records_.push_back(absl::StrCat("released ", absl::StrJoin(worker_ids, ",")));
  }
  // No idle workers here: a degraded ELASTIC group goes on with its ranks.
  std::vector<JoiningWorker> AcquireWorkers(const std::string& /*job_id*/, int /*n*/, int /*unit*/,
                                            const std::set<std::string>& /*exclude*/) override {
    return {};
  }
  std::vector<std::string> records() {
    MutexLock lock(&mu_);
    return records_;
  }
  JobInfo info() {
    MutexLock lock(&mu_);
    return info_;
  }

 private:
  Mutex mu_;
  JobInfo info_;
  std::vector<std::string> records_;
};

uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string TensorDigest(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().cpu();
  return absl::StrCat(c.scalar_type(), c.sizes().vec().size(), ":",
                      Fnv(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Outcome {
  JobState state = JOB_STATE_UNSPECIFIED;
  std::string reason;
  std::vector<std::string> records;  // the driver's progress records
  std::vector<std::string> files;    // under output_dir: names, digests of outputs and checkpoints

  std::string Fingerprint() const {
    return absl::StrCat(JobState_Name(state), "\n", absl::StrJoin(records, "\n"), "\n", absl::StrJoin(files, "\n"));
  }
};

// What is under `dir`, relative names in order: TensorBoard event files as
// their directory (their names hold the host and time), JSON outputs with a
// digest of their contents, checkpoints with their tensors, step, world size
// and data positions. The stored spec (config.textproto, a checkpoint's
// metadata) is left out: it differs whenever any field does.
std::vector<std::string> DescribeOutputs(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  std::set<std::string> lines;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = fs::relative(it->path(), dir).string();
    const std::string name = it->path().filename().string();
    if (it->is_directory() && absl::StartsWith(name, "checkpoint_") && !absl::StrContains(name, ".tmp-")) {
      it.disable_recursion_pending();
      absl::StatusOr<TrainCheckpoint> ckpt = ReadTrainCheckpoint(it->path().string());
      if (!ckpt.ok()) {
        lines.insert(absl::StrCat(rel, " unreadable: ", ckpt.status().code()));
        continue;
      }
      std::string line = absl::StrCat(rel, " step ", ckpt->step, " world ", ckpt->world_size, " data [",
                                      absl::StrJoin(ckpt->data_states, "|"), "]");
      for (const auto& [k, t] : ckpt->params) absl::StrAppend(&line, " ", k, "=", TensorDigest(t));
      for (const auto& [k, t] : ckpt->optimizer) absl::StrAppend(&line, " opt:", k, "=", TensorDigest(t));
      lines.insert(line);
      continue;
    }
    if (!it->is_regular_file()) continue;
    if (absl::StrContains(name, "tfevents")) {
      lines.insert(absl::StrCat(fs::path(rel).parent_path().string(), "/events"));
    } else if (name == "config.textproto") {
      continue;
    } else if (absl::EndsWith(name, ".json") || absl::EndsWith(name, ".jsonl")) {
      const std::string text = ReadFile(it->path().string());
      lines.insert(absl::StrCat(rel, " ", Fnv(text.data(), text.size())));
    } else {
      lines.insert(rel);
    }
  }
  return std::vector<std::string>(lines.begin(), lines.end());
}

// How a case's run is set up beyond its spec.
struct RunOptions {
  bool lose_worker = false;             // rank 0's first RunSteps fails (UNAVAILABLE)
  int restarts_so_far = 0;              // the attempt's AttemptPlan.restarts
  bool block_first_checkpoint = false;  // a file stands where checkpoint_2 would go
  bool copy_source = false;             // the source checkpoints are in output_dir already
  absl::Duration collective_timeout = absl::Seconds(60);
};

class FieldCoverageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(std::string(std::getenv("TEST_TMPDIR")) + "/coverage");
    fs::remove_all(*root_);
    fs::create_directories(*root_ + "/data");
    // Example files for defined tasks: two TSV tasks and plain text.
    std::ofstream a(*root_ + "/data/qa_train.tsv"), b(*root_ + "/data/qa_valid.tsv"), c(*root_ + "/data/qa_other.tsv");
    const char* words[] = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"};
    for (int i = 0; i < 64; ++i) {
      a << "what is " << i % 10 << " plus " << (i / 10) << "\t" << words[(i % 10 + i / 10) % 10] << "\n";
      b << "what is " << (i * 7) % 10 << " minus zero\t" << words[(i * 7) % 10] << "\n";
      c << "say " << words[i % 10] << " twice\t" << words[i % 10] << " " << words[i % 10] << "\n";
    }
    // One text in three languages (a TFRecord file of tf.Example), for
    // translate and summarize.
    std::ofstream w(*root_ + "/data/words.tfrecord", std::ios::binary);
    const char* german[] = {"null", "eins", "zwei", "drei", "vier", "fuenf", "sechs", "sieben", "acht", "neun"};
    const char* french[] = {"zero", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf"};
    for (int i = 0; i < 64; ++i) {
      tfexample::Example ex;
      auto& features = *ex.mutable_features()->mutable_feature();
      for (const auto& [name, language] :
           {std::pair<const char*, const char**>{"en", words}, {"de", german}, {"fr", french}}) {
        features[name].mutable_bytes_list()->add_value(absl::StrCat(language[i % 10], " ", language[i / 10 % 10]));
      }
      w << FrameTfRecord(ex.SerializeAsString());
    }
    w.close();
    source_ = new std::string(*root_ + "/source");
    // The checkpoints restore cases start from: the common spec's run.
    Outcome source = Run(Common(), "output_dir: \"" + *source_ + "\"", {});
    ASSERT_EQ(source.state, SUCCEEDED) << source.Fingerprint();
  }
  static void TearDownTestSuite() {
    delete root_;
    delete source_;
  }

  static std::string Common() {
    return R"pb(
      name: "cov"
      model { preset: "tiny" dropout_rate: 0.0 }
      task: "digits_to_words"
      feature_lengths { inputs: 16 targets: 32 }
      batch_size: 4
      total_steps: 4
      summary_period: 2
      eval_period: 2
      checkpoint_period: 2
      seed: 1
      eval { num_batches: 1 }
      checkpoint { async: false }
    )pb";
  }

  // $ROOT, $SOURCE and $CORPUS (data/corpus) in spec text.
  static std::string Expand(const std::string& text) {
    return absl::StrReplaceAll(text, {{"$ROOT", *root_}, {"$SOURCE", *source_}, {"$CORPUS", CorpusDir()}});
  }
  static std::string CorpusDir() { return fs::absolute("data/corpus").string(); }

  // Common + base + extra, parsed in turn (a later singular value wins;
  // repeated fields append). A part with an explicit model config replaces
  // Common's preset model.
  static absl::StatusOr<JobSpec> Parse(const std::vector<std::string>& parts) {
    JobSpec spec;
    for (const std::string& part : parts) {
      if (spec.model().has_preset() && absl::StrContains(part, "model {") && absl::StrContains(part, "config {")) {
        spec.clear_model();
      }
      if (!google::protobuf::TextFormat::MergeFromString(Expand(part), &spec)) {
        return absl::InvalidArgumentError(absl::StrCat("cannot parse: ", part));
      }
    }
    return spec;
  }

  static Outcome Run(const std::string& base, const std::string& extra, const RunOptions& run) {
    Outcome outcome;
    absl::StatusOr<JobSpec> parsed = Parse({Common(), base, extra});
    EXPECT_THAT(parsed.status(), IsOk());
    if (!parsed.ok()) return outcome;
    JobSpec spec = *parsed;
    if (spec.output_dir().empty()) spec.set_output_dir(absl::StrCat(*root_, "/run_", ++runs_));
    fs::remove_all(spec.output_dir());
    const absl::Status valid = ValidateAndNormalize(&spec);
    EXPECT_THAT(valid, IsOk()) << base << extra;
    if (!valid.ok()) return outcome;
    if (run.copy_source) fs::copy(*source_, spec.output_dir(), fs::copy_options::recursive);
    if (run.block_first_checkpoint) {
      fs::create_directories(spec.output_dir());
      std::ofstream(spec.output_dir() + "/checkpoint_2") << "not a checkpoint\n";
    }
    const int world = std::max(spec.num_workers(), 1);
    auto store = std::make_shared<InMemoryStore>();
    WorkerCoreOptions options;
    options.store_factory = [store](const std::string& scope) -> std::shared_ptr<Store> {
      return std::make_shared<PrefixStore>(scope + "/", store.get());
    };
    options.peak_flops = 1e12;  // no probe
    options.collective_timeout = run.collective_timeout;
    std::vector<std::unique_ptr<WorkerCore>> cores;
    std::vector<std::unique_ptr<FakeWorker>> fakes;
    AttemptPlan plan;
    plan.job_id = JobIdFor(spec.name(), 1);
    plan.spec = spec;
    plan.restarts = run.restarts_so_far;
    for (int r = 0; r < world; ++r) {
      cores.push_back(std::make_unique<WorkerCore>(options));
      fakes.push_back(
          std::make_unique<FakeWorker>(std::make_shared<CoreResponder>(cores.back().get(), run.lose_worker && r == 0)));
      plan.clients.push_back(fakes.back()->Connect());
      plan.workers.push_back("");  // named "rank R" in messages
      plan.worker_ids.push_back(absl::StrCat("w", r));
    }
    RecordingHost host;
    JobDriver(plan, &host).Run();
    fakes.clear();  // every call answered
    cores.clear();  // joins the teardowns: every file written
    outcome.state = host.info().state();
    outcome.reason = host.info().reason();
    // Paths in reasons name the run's own directory: the same for every run.
    for (const std::string& record : host.records()) {
      outcome.records.push_back(absl::StrReplaceAll(record, {{spec.output_dir(), "OUT"}}));
    }
    outcome.files = DescribeOutputs(spec.output_dir());
    return outcome;
  }

  static std::string* root_;
  static std::string* source_;
  static int runs_;
};

std::string* FieldCoverageTest::root_ = nullptr;
std::string* FieldCoverageTest::source_ = nullptr;
int FieldCoverageTest::runs_ = 0;

// ---------------------------------------------------------------------------
// The cases.

enum class Evidence {
  kRun,      // the run with `changed` differs from the run with `base`
  kRefused,  // validation refuses `changed` (kInvalidArgument containing `refusal`)
  kCheck,    // `check` shows what the field does
};

struct Case {
  std::string field;
  std::string base;     // on top of Common()
  std::string changed;  // on top of Common() + base (or of Common() alone: `replace`)
  Evidence evidence = Evidence::kRun;
  std::string refusal;
  bool replace = false;
  RunOptions options;
};

Case R(std::string field, std::string base, std::string changed, RunOptions options = {}) {
  return Case{std::move(field), std::move(base), std::move(changed), Evidence::kRun, "", false, options};
}
// A repeated field's element changed: `changed` is the whole alternative.
Case Replace(std::string field, std::string base, std::string changed, RunOptions options = {}) {
  return Case{std::move(field), std::move(base), std::move(changed), Evidence::kRun, "", true, options};
}
Case Refused(std::string field, std::string base, std::string changed, std::string refusal) {
  return Case{std::move(field), std::move(base), std::move(changed), Evidence::kRefused, std::move(refusal), false, {}};
}
Case Check(std::string field) { return Case{std::move(field), "", "", Evidence::kCheck, "", false, {}}; }

// An explicit model configuration equal to the `tiny` preset.
constexpr char kTinyConfig[] = R"pb(
  model {
    config {
      vocab_size: 512
      d_model: 64
      num_heads: 4
      d_kv: 16
      d_ff: 256
      num_encoder_layers: 2
      num_decoder_layers: 2
      feed_forward: GATED_GELU
      tie_embeddings: false
      relative_attention_num_buckets: 32
      relative_attention_max_distance: 128
      dropout_rate: 0.0
      layer_norm_epsilon: 1e-6
    }
  }
)pb";

// A restore from the source run's checkpoint at step 2, training to step 6.
constexpr char kFromSource2[] = R"pb(
  total_steps: 6
  restore { mode: SPECIFIC path: "$SOURCE/checkpoint_2" }
)pb";
constexpr char kInference[] = R"pb(
  kind: INFERENCE
  restore { mode: SPECIFIC path: "$SOURCE/checkpoint_4" }
  inference { num_batches: 1 }
)pb";
constexpr char kSample[] = R"pb(
  kind: INFERENCE
  restore { mode: SPECIFIC path: "$SOURCE/checkpoint_4" }
  inference { num_batches: 1 method: SAMPLE seed: 3 }
)pb";
constexpr char kBeam[] = R"pb(
  kind: INFERENCE
  restore { mode: SPECIFIC path: "$SOURCE/checkpoint_4" }
  inference { num_batches: 1 method: BEAM beam_size: 2 }
)pb";
// Two defined tasks on TSV files.
constexpr char kQaTasks[] = R"pb(
  task_definitions {
    name: "qa"
    splits { key: "train" value: "$ROOT/data/qa_train.tsv" }
    splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
    splits { key: "other" value: "$ROOT/data/qa_other.tsv" }
  }
)pb";
std::string QaTask(const std::string& extra) {
  return absl::StrCat(R"pb(
                        task: "qa"
                        task_definitions { name: "qa"
                                           splits { key: "train" value: "$ROOT/data/qa_train.tsv" }
                                           splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
                                           splits { key: "other" value: "$ROOT/data/qa_other.tsv" }
                      )pb",
                      extra, "}");
}
// Span corruption on the bundled corpus.
std::string CorpusTask(const std::string& preprocessors, const std::string& extra = "") {
  return absl::StrCat(R"pb(
                        task: "prose"
                        feature_lengths { inputs: 32 targets: 32 }
                        task_definitions { name: "prose"
                                           splits { key: "train" value: "$CORPUS/train.txt" }
                                           splits { key: "validation" value: "$CORPUS/valid.txt" }
                                           vocabulary: "$CORPUS/spm.model"
                      )pb",
                      preprocessors, extra, "}");
}
// A task over words.tfrecord (features en, de, fr) with the given chain.
std::string WordsTask(const std::string& preprocessors) {
  return absl::StrCat(R"pb(
                        task: "words"
                        task_definitions { name: "words"
                                           splits { key: "train" value: "$ROOT/data/words.tfrecord" }
                                           splits { key: "validation" value: "$ROOT/data/words.tfrecord" }
                      )pb",
                      preprocessors, "}");
}
std::string Translate(const std::string& from, const std::string& to) {
  return absl::StrCat(R"pb(preprocessors { translate { source_language: ")pb", from, R"pb(" target_language: ")pb", to,
                      R"pb(" } })pb");
}
std::string Summarize(const std::string& article, const std::string& summary) {
  return absl::StrCat(R"pb(preprocessors { summarize { article_key: ")pb", article, R"pb(" summary_key: ")pb", summary,
                      R"pb(" } })pb");
}
std::string Mixture(const std::string& components) {
  return absl::StrCat(kQaTasks, R"pb(task: "mix"
                                     mixture_definitions { name: "mix")pb",
                      components, "}");
}
// Early stopping on the train loss after every summary.
std::string EarlyStop(const std::string& fields, const std::string& on = "ACTION_TRAIN") {
  return absl::StrCat(" summary_period: 1 total_steps: 8 actions { on: ", on, " early_stopping { ", fields, " } }");
}

std::vector<Case> Cases() {
  return {
      Check("name"),
      R("model.preset", "total_steps: 1 eval_period: 0 checkpoint_period: 0", R"pb(model { preset: "t5_small" })pb"),
      R("model.config.vocab_size", kTinyConfig, "model { config { vocab_size: 640 } }"),
      R("model.config.d_model", kTinyConfig, "model { config { d_model: 32 } }"),
      R("model.config.num_heads", kTinyConfig, "model { config { num_heads: 2 } }"),
      R("model.config.d_kv", kTinyConfig, "model { config { d_kv: 8 } }"),
      R("model.config.d_ff", kTinyConfig, "model { config { d_ff: 128 } }"),
      R("model.config.num_encoder_layers", kTinyConfig, "model { config { num_encoder_layers: 1 } }"),
      R("model.config.num_decoder_layers", kTinyConfig, "model { config { num_decoder_layers: 1 } }"),
      R("model.config.feed_forward", kTinyConfig, "model { config { feed_forward: RELU } }"),
      R("model.config.tie_embeddings", kTinyConfig, "model { config { tie_embeddings: true } }"),
      R("model.config.relative_attention_num_buckets", kTinyConfig,
        "model { config { relative_attention_num_buckets: 8 } }"),
      // (With 32 buckets every distance in these short examples has its own.)
      R("model.config.relative_attention_max_distance",
        absl::StrCat(kTinyConfig, "model { config { relative_attention_num_buckets: 8 } }"),
        "model { config { relative_attention_max_distance: 16 } }"),
      R("model.config.dropout_rate", kTinyConfig, "model { config { dropout_rate: 0.2 } }"),
      R("model.config.layer_norm_epsilon", kTinyConfig, "model { config { layer_norm_epsilon: 0.5 } }"),
      R("model.dropout_rate", "", "model { dropout_rate: 0.2 }"),
      R("model.vocab_size", "", "model { vocab_size: 640 }"),
      R("task", kQaTasks, R"pb(task: "qa")pb"),
      R("feature_lengths.inputs", "", "feature_lengths { inputs: 8 }"),
      R("feature_lengths.targets", "", "feature_lengths { targets: 8 }"),
      R("batch_size", "", "batch_size: 2"),
      // With dropout, each microbatch draws its own masks (the arithmetic is
      // otherwise the same: //tests/microbatch).
      R("num_microbatches", "model { dropout_rate: 0.1 }", "num_microbatches: 2"),
      R("num_workers", "", "num_workers: 2"),
      R("total_steps", "", "total_steps: 2"),
      R("eval_period", "", "eval_period: 4"),
      R("summary_period", "", "summary_period: 1"),
      R("checkpoint_period", "", "checkpoint_period: 4"),
      R("keep_checkpoints", "", "keep_checkpoints: 1"),
      R("seed", "", "seed: 2"),
      Check("output_dir"),
      R("optimizer.adafactor.decay_rate", "", "optimizer { adafactor { decay_rate: 0.5 } }"),
      R("optimizer.adafactor.clipping_threshold", "", "optimizer { adafactor { clipping_threshold: 0.01 } }"),
      R("optimizer.adafactor.multiply_by_parameter_scale", "",
        "optimizer { adafactor { multiply_by_parameter_scale: false } }"),
      R("optimizer.adafactor.epsilon1", "", "optimizer { adafactor { epsilon1: 0.001 } }"),
      R("optimizer.adafactor.epsilon2", "", "optimizer { adafactor { epsilon2: 0.1 } }"),
      R("optimizer.adafactor.beta1", "", "optimizer { adafactor { beta1: 0.9 } }"),
      R("optimizer.adafactor.min_dim_size_to_factor", "", "optimizer { adafactor { min_dim_size_to_factor: 32 } }"),
      R("optimizer.adafactor.weight_decay_rate", "", "optimizer { adafactor { weight_decay_rate: 0.1 } }"),
      R("optimizer.adamw.beta1", "optimizer { adamw {} }", "optimizer { adamw { beta1: 0.5 } }"),
      R("optimizer.adamw.beta2", "optimizer { adamw {} }", "optimizer { adamw { beta2: 0.9 } }"),
      R("optimizer.adamw.epsilon", "optimizer { adamw {} }", "optimizer { adamw { epsilon: 0.1 } }"),
      R("optimizer.adamw.weight_decay", "optimizer { adamw {} }", "optimizer { adamw { weight_decay: 0.5 } }"),
      R("optimizer.max_grad_norm", "", "optimizer { max_grad_norm: 0.001 }"),
      R("learning_rate.factors", "", R"pb(learning_rate { factors: "constant" })pb"),
      R("learning_rate.base_learning_rate", "", "learning_rate { base_learning_rate: 0.5 }"),
      R("learning_rate.warmup_steps", R"pb(learning_rate { factors: "constant * linear_warmup" warmup_steps: 2 })pb",
        "learning_rate { warmup_steps: 4 }"),
      R("learning_rate.decay_factor",
        R"pb(learning_rate { factors: "constant * decay_every" steps_per_decay: 1 decay_factor: 0.5 })pb",
        "learning_rate { decay_factor: 0.1 }"),
      R("learning_rate.steps_per_decay",
        R"pb(learning_rate { factors: "constant * decay_every" steps_per_decay: 1 decay_factor: 0.5 })pb",
        "learning_rate { steps_per_decay: 2 }"),
      R("learning_rate.steps_per_cycle",
        R"pb(learning_rate { factors: "constant * cosine_decay" steps_per_cycle: 4 })pb",
        "learning_rate { steps_per_cycle: 8 }"),
      R("learning_rate.step_offset", R"pb(learning_rate { factors: "constant * linear_warmup" warmup_steps: 8 })pb",
        "learning_rate { step_offset: 2 }"),
      R("learning_rate.min_learning_rate",
        R"pb(learning_rate { factors: "constant * cosine_decay" steps_per_cycle: 4 })pb",
        "learning_rate { min_learning_rate: 0.5 }"),
      R("restore.mode", R"pb(total_steps: 6
                             restore { mode: NONE path: "$SOURCE" })pb",
        "restore { mode: LATEST }"),
      R("restore.path", kFromSource2, R"pb(restore { path: "$SOURCE/checkpoint_4" })pb"),
      R("restore.step", "total_steps: 6 checkpoint_period: 0 restore { mode: SPECIFIC step: 2 }", "restore { step: 4 }",
        RunOptions{.copy_source = true}),
      R("restore.fallback_to_scratch",
        R"pb(kind: FINETUNING
             restore { mode: LATEST path: "$ROOT/nothing_here" fallback_to_scratch: true })pb",
        "restore { fallback_to_scratch: false }"),
      Refused("restore.dtype", kFromSource2, "restore { dtype: BFLOAT16 }", "restore.dtype"),
      Refused("restore.wait_seconds", kFromSource2, "restore { wait_seconds: 5 }", "restore.wait_seconds"),
      R("restore.assignment_map.pattern", absl::StrCat(kFromSource2, R"pb(restore {
                                                                            strict: false
                                                                            assignment_map { pattern: "nothing" }
                                                                          })pb"),
        absl::StrCat(kFromSource2, R"pb(restore {
                                          strict: false
                                          assignment_map { pattern: "encoder_layers\\.0\\.pre_mlp_layer_norm\\.scale" }
                                        })pb"),
        {}),
      Replace("restore.assignment_map.replacement",
              absl::StrCat(kFromSource2,
                           R"pb(restore {
                                  strict: false
                                  assignment_map { pattern: "(encoder_layers\\.0)\\.pre_mlp_layer_norm\\.scale" }
                                })pb"),
              absl::StrCat(kFromSource2, R"pb(restore {
                                                strict: false
                                                assignment_map {
                                                  pattern: "(encoder_layers\\.0)\\.pre_mlp_layer_norm\\.scale"
                                                  replacement: "\\1.pre_mlp_layer_norm.scale"
                                                }
                                              })pb")),
      R("restore.strict",
        absl::StrCat(kFromSource2, R"pb(restore {
                                          strict: false
                                          assignment_map { pattern: "encoder_layers\\.0\\.pre_mlp_layer_norm\\.scale" }
                                        })pb"),
        "restore { strict: true }"),
      Replace("actions.on",
              absl::StrCat("eval { infer_metrics: true } eval_period: 1 ", EarlyStop(R"pb(task: "digits_to_words"
                                                                                          metric: "loss"
                                                                                          mode: MAX
                                                                                          patience: 1)pb",
                                                                                     "ACTION_TRAIN_EVAL")),
              absl::StrCat("eval { infer_metrics: true } eval_period: 1 ", EarlyStop(R"pb(task: "digits_to_words"
                                                                                          metric: "loss"
                                                                                          mode: MAX
                                                                                          patience: 1)pb",
                                                                                     "ACTION_INFER_EVAL"))),
      Replace("actions.early_stopping.task",
              absl::StrCat(kQaTasks, R"pb(eval { tasks: "digits_to_words" tasks: "qa" }
                                          eval_period: 1)pb",
                           EarlyStop(R"pb(task: "digits_to_words" metric: "loss" mode: MIN patience: 1)pb",
                                     "ACTION_TRAIN_EVAL")),
              absl::StrCat(kQaTasks, R"pb(eval { tasks: "digits_to_words" tasks: "qa" }
                                          eval_period: 1)pb",
                           EarlyStop(R"pb(task: "qa" metric: "loss" mode: MIN patience: 1)pb", "ACTION_TRAIN_EVAL"))),
      Replace("actions.early_stopping.metric", EarlyStop(R"pb(task: "train" metric: "loss" mode: MAX patience: 1)pb"),
              EarlyStop(R"pb(task: "train" metric: "accuracy" mode: MAX patience: 1)pb")),
      Replace("actions.early_stopping.mode", EarlyStop(R"pb(task: "train" metric: "loss" mode: MAX patience: 1)pb"),
              EarlyStop(R"pb(task: "train" metric: "loss" mode: MIN patience: 1)pb")),
      Replace("actions.early_stopping.patience", EarlyStop(R"pb(task: "train" metric: "loss" mode: MAX patience: 1)pb"),
              EarlyStop(R"pb(task: "train" metric: "loss" mode: MAX patience: 3)pb")),
      Replace("actions.early_stopping.atol", EarlyStop(R"pb(task: "train" metric: "loss" mode: MIN patience: 1)pb"),
              EarlyStop(R"pb(task: "train" metric: "loss" mode: MIN patience: 1 atol: 100)pb")),
      Replace("actions.early_stopping.rtol", EarlyStop(R"pb(task: "train" metric: "loss" mode: MIN patience: 1)pb"),
              EarlyStop(R"pb(task: "train" metric: "loss" mode: MIN patience: 1 rtol: 0.9)pb")),
      Check("actions.terminate_on_nan.task"),
      Check("actions.terminate_on_nan.metric"),
      Check("max_restarts"),
      R("fault_tolerance.mode", "num_workers: 2", "fault_tolerance { mode: ELASTIC }"),
      Check("fault_tolerance.min_workers"),
      R("dtype", "", "dtype: BFLOAT16"),
      R("kind", absl::StrCat(kFromSource2, "inference { num_batches: 1 }"), "kind: EVALUATION"),
      R("loss.z_loss", "", "loss { z_loss: 0.1 }"),
      R("loss.label_smoothing", "", "loss { label_smoothing: 0.1 }"),
      R("loss.normalization", "", "loss { normalization: NO_NORMALIZATION }"),
      R("loss.normalizing_constant", "loss { normalization: CONSTANT normalizing_constant: 10 }",
        "loss { normalizing_constant: 1000 }"),
      R("data.train_split", QaTask(""), R"pb(data { train_split: "other" })pb"),
      R("data.pack", "", "data { pack: false }"),
      R("data.shuffle", "", "data { shuffle: false }"),
      Refused("data.vocabulary", "", R"pb(data { vocabulary: "$CORPUS/spm.model" })pb", "data.vocabulary"),
      Replace("eval.tasks", absl::StrCat(kQaTasks, R"pb(eval { tasks: "digits_to_words" })pb"),
              absl::StrCat(kQaTasks, R"pb(eval { tasks: "qa" })pb")),
      R("eval.split", QaTask(""), R"pb(eval { split: "other" })pb"),
      R("eval.num_batches", "", "eval { num_batches: 2 }"),
      R("eval.infer_metrics", "", "eval { infer_metrics: true }"),
      R("inference.method", kInference, "inference { method: SAMPLE }"),
      R("inference.beam_size", kBeam, "inference { beam_size: 3 }"),
      R("inference.alpha", kBeam, "inference { alpha: 3.0 }"),
      R("inference.temperature", kSample, "inference { temperature: 0.1 }"),
      R("inference.top_k", kSample, "inference { top_k: 1 }"),
      R("inference.top_p", kSample, "inference { top_p: 0.01 }"),
      R("inference.max_decode_length", kInference, "inference { max_decode_length: 3 }"),
      R("inference.split", kInference, R"pb(inference { split: "train" })pb"),
      R("inference.num_batches", kInference, "inference { num_batches: 2 }"),
      R("inference.seed", kSample, "inference { seed: 4 }"),
      R("checkpoint.save_dtype", "", "checkpoint { save_dtype: BFLOAT16 }"),
      Check("checkpoint.async"),
      R("checkpoint.keep_best", R"pb(keep_checkpoints: 1
                                     checkpoint { best_metric: "digits_to_words/loss" best_mode: MAX })pb",
        "checkpoint { keep_best: 1 }"),
      R("checkpoint.best_metric",
        R"pb(keep_checkpoints: 1
             checkpoint { keep_best: 1 best_metric: "digits_to_words/loss" best_mode: MAX })pb",
        R"pb(checkpoint { best_metric: "digits_to_words/accuracy" })pb"),
      R("checkpoint.best_mode",
        R"pb(keep_checkpoints: 1
             checkpoint { keep_best: 1 best_metric: "digits_to_words/loss" best_mode: MAX })pb",
        "checkpoint { best_mode: MIN }"),
      Replace("task_definitions.name",
              absl::StrCat(QaTask(""), R"pb(task_definitions {
                                              name: "qb"
                                              splits { key: "train" value: "$ROOT/data/qa_other.tsv" }
                                              splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
                                            })pb"),
              absl::StrCat(R"pb(task: "qa"
                                task_definitions {
                                  name: "qb"
                                  splits { key: "train" value: "$ROOT/data/qa_train.tsv" }
                                  splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
                                })pb",
                           R"pb(task_definitions {
                                  name: "qa"
                                  splits { key: "train" value: "$ROOT/data/qa_other.tsv" }
                                  splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
                                })pb")),
      Replace("task_definitions.splits", QaTask(""),
              R"pb(task: "qa"
                   task_definitions {
                     name: "qa"
                     splits { key: "train" value: "$ROOT/data/qa_other.tsv" }
                     splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
                   })pb"),
      Replace("task_definitions.vocabulary", QaTask(""), QaTask(R"pb(vocabulary: "$CORPUS/spm.model")pb")),
      Replace("task_definitions.add_eos", QaTask(""), QaTask("add_eos: false")),
      Replace("task_definitions.metric_fns",
              absl::StrCat(QaTask(R"pb(metric_fns: "token_f1")pb"), "eval { infer_metrics: true }"),
              absl::StrCat(QaTask(R"pb(metric_fns: "exact_match")pb"), "eval { infer_metrics: true }")),
      Replace("task_definitions.preprocessors.rekey.key_map",
              QaTask(R"pb(preprocessors {
                            rekey {
                              key_map { key: "inputs" value: "inputs" }
                              key_map { key: "targets" value: "targets" }
                            }
                          })pb"),
              QaTask(R"pb(preprocessors {
                            rekey {
                              key_map { key: "inputs" value: "targets" }
                              key_map { key: "targets" value: "inputs" }
                            }
                          })pb")),
      Replace("task_definitions.preprocessors.split_tokens.max_tokens_per_segment",
              CorpusTask(R"pb(preprocessors { split_tokens { max_tokens_per_segment: 30 } }
                              preprocessors { span_corruption {} })pb"),
              CorpusTask(R"pb(preprocessors { split_tokens { max_tokens_per_segment: 20 } }
                              preprocessors { span_corruption {} })pb")),
      Replace("task_definitions.preprocessors.span_corruption.noise_density",
              CorpusTask(R"pb(preprocessors { span_corruption {} })pb"),
              CorpusTask(R"pb(preprocessors { span_corruption { noise_density: 0.3 } })pb")),
      Replace("task_definitions.preprocessors.span_corruption.mean_noise_span_length",
              CorpusTask(R"pb(preprocessors { span_corruption {} })pb"),
              CorpusTask(R"pb(preprocessors { span_corruption { mean_noise_span_length: 1.0 } })pb")),
      Replace("task_definitions.preprocessors.prefix_lm", CorpusTask(R"pb(preprocessors { span_corruption {} })pb"),
              CorpusTask(R"pb(preprocessors { prefix_lm {} })pb")),
      Replace("task_definitions.preprocessors.translate.source_language", WordsTask(Translate("en", "de")),
              WordsTask(Translate("fr", "de"))),
      Replace("task_definitions.preprocessors.translate.target_language", WordsTask(Translate("en", "de")),
              WordsTask(Translate("en", "fr"))),
      Replace("task_definitions.preprocessors.summarize.article_key", WordsTask(Summarize("en", "de")),
              WordsTask(Summarize("fr", "de"))),
      Replace("task_definitions.preprocessors.summarize.summary_key", WordsTask(Summarize("en", "de")),
              WordsTask(Summarize("en", "fr"))),
      Refused("task_definitions.tfds_data_dir", "", QaTask(R"pb(tfds_data_dir: "/data/tfds")pb"),
              "tfds_data_dir: set, but no split is a TFDS split"),
      Replace("task_definitions.extra_ids", CorpusTask(R"pb(preprocessors { span_corruption {} })pb"),
              CorpusTask(R"pb(preprocessors { span_corruption {} })pb", "extra_ids: 50")),
      Check("data_parallel.overlap_allreduce"),
      Check("data_parallel.bucket_mb"),
      Check("data_parallel.sharding"),
      Check("data_parallel.overlap_allgather"),
      Check("data_parallel.shard_group_size"),
      R("data_parallel.reproducible", "num_workers: 2", "data_parallel { reproducible: true }"),
      Replace("mixture_definitions.name",
              absl::StrCat(Mixture(R"pb(tasks { name: "digits_to_words" rate: 1 }
                                        tasks { name: "qa" rate: 3 })pb"),
                           R"pb(mixture_definitions {
                                  name: "other"
                                  tasks { name: "qa" rate: 1 }
                                })pb"),
              absl::StrCat(kQaTasks, R"pb(task: "mix"
                                          mixture_definitions {
                                            name: "other"
                                            tasks { name: "digits_to_words" rate: 1 }
                                            tasks { name: "qa" rate: 3 }
                                          })pb",
                           R"pb(mixture_definitions {
                                  name: "mix"
                                  tasks { name: "qa" rate: 1 }
                                })pb")),
      Replace("mixture_definitions.tasks.name", Mixture(R"pb(tasks { name: "digits_to_words" rate: 1 }
                                                             tasks { name: "qa" rate: 3 })pb"),
              absl::StrCat(Mixture(R"pb(tasks { name: "digits_to_words" rate: 1 }
                                        tasks { name: "qb" rate: 3 })pb"),
                           R"pb(task_definitions {
                                  name: "qb"
                                  splits { key: "train" value: "$ROOT/data/qa_other.tsv" }
                                  splits { key: "validation" value: "$ROOT/data/qa_valid.tsv" }
                                })pb")),
      Replace("mixture_definitions.tasks.rate", Mixture(R"pb(tasks { name: "digits_to_words" rate: 1 }
                                                             tasks { name: "qa" rate: 3 })pb"),
              Mixture(R"pb(tasks { name: "digits_to_words" rate: 3 }
                           tasks { name: "qa" rate: 1 })pb")),
      R("summary.weight_metrics", "", "summary { weight_metrics: true }"),
  };
}

// Every leaf field has a case, and every case names a leaf field.
TEST_F(FieldCoverageTest, EveryFieldHasACase) {
  std::set<std::string> cased;
  for (const Case& c : Cases()) {
    EXPECT_TRUE(cased.insert(c.field).second) << "two cases for " << c.field;
  }
  std::set<std::string> leaves;
  for (const std::string& leaf : JobSpecLeaves()) {
    leaves.insert(leaf);
    EXPECT_TRUE(cased.count(leaf)) << "JobSpec." << leaf << " has no case: show what it does, or refuse it";
  }
  for (const std::string& field : cased) EXPECT_TRUE(leaves.count(field)) << field << " is not a JobSpec field";
  EXPECT_GE(leaves.size(), 110u);
}

// Without which a different fingerprint would prove nothing: training on
// one and two ranks, restoring, and decoding give the same fingerprint twice.
TEST_F(FieldCoverageTest, ARunIsReproducible) {
  for (const std::string& spec :
       {std::string("num_workers: 2"), std::string(kFromSource2), std::string(kInference), std::string(kSample),
        absl::StrCat(kQaTasks, R"pb(task: "mix"
                                    mixture_definitions {
                                      name: "mix"
                                      tasks { name: "digits_to_words" rate: 1 }
                                      tasks { name: "qa" rate: 3 }
                                    })pb")}) {
    const Outcome a = Run(spec, "", {});
    const Outcome b = Run(spec, "", {});
    ASSERT_EQ(a.state, SUCCEEDED) << a.Fingerprint();
    EXPECT_EQ(a.Fingerprint(), b.Fingerprint()) << spec;
  }
  const Outcome a = Run("", "", {});
  const Outcome b = Run("", "", {});
  ASSERT_EQ(a.state, SUCCEEDED) << a.Fingerprint();
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  // The fingerprint sees the run: steps, metrics, checkpoints, eval outputs.
  EXPECT_THAT(a.Fingerprint(), HasSubstr("step 4 ckpt checkpoint_4"));
  EXPECT_THAT(a.Fingerprint(), HasSubstr("training_eval/digits_to_words/loss="));
  EXPECT_THAT(a.Fingerprint(), HasSubstr("checkpoint_2 step 2 world 1"));
  EXPECT_THAT(a.Fingerprint(), HasSubstr("opt:"));
}

class FieldCaseTest : public FieldCoverageTest, public ::testing::WithParamInterface<Case> {};

TEST_P(FieldCaseTest, ChangesTheRunOrIsRefused) {
  const Case& c = GetParam();
  switch (c.evidence) {
    case Evidence::kRun: {
      const Outcome base = Run(c.base, "", c.options);
      ASSERT_EQ(base.state, SUCCEEDED) << base.Fingerprint();
      const Outcome changed = c.replace ? Run(c.changed, "", c.options) : Run(c.base, c.changed, c.options);
      EXPECT_NE(base.Fingerprint(), changed.Fingerprint()) << c.field << ": the run did not change\n"
                                                           << base.Fingerprint();
      break;
    }
    case Evidence::kRefused: {
      absl::StatusOr<JobSpec> base = Parse({Common(), c.base});
      ASSERT_THAT(base.status(), IsOk());
      base->set_output_dir(*root_ + "/refused");
      EXPECT_THAT(ValidateAndNormalize(&*base), IsOk());
      absl::StatusOr<JobSpec> changed = Parse({Common(), c.base, c.changed});
      ASSERT_THAT(changed.status(), IsOk());
      changed->set_output_dir(*root_ + "/refused");
      EXPECT_THAT(ValidateAndNormalize(&*changed), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.refusal)));
      break;
    }
    case Evidence::kCheck:
      GTEST_FAIL() << c.field << " is checked by its own test";
  }
}

std::vector<Case> RunCases() {
  std::vector<Case> out;
  for (const Case& c : Cases()) {
    if (c.evidence != Evidence::kCheck) out.push_back(c);
  }
  return out;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.field;
  for (char& ch : name) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fields, FieldCaseTest, ::testing::ValuesIn(RunCases()), CaseName);

// The fields shown by what they do rather than by a different run.

TEST_F(FieldCoverageTest, NameIsTheJobId) {
  EXPECT_EQ(JobIdFor("cov", 1), "cov-1");
  EXPECT_EQ(JobIdFor("my job/v2", 7), "my-job-v2-7");
  EXPECT_EQ(JobIdFor("", 3), "job-3");
}

TEST_F(FieldCoverageTest, OutputDirIsWhereTheJobWrites) {
  const std::string dir = *root_ + "/somewhere/else";
  const Outcome out = Run("", absl::StrCat("output_dir: \"", dir, "\""), {});
  ASSERT_EQ(out.state, SUCCEEDED) << out.Fingerprint();
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_4/MANIFEST.json"));
  EXPECT_TRUE(fs::exists(dir + "/config.textproto"));
}

TEST_F(FieldCoverageTest, MaxRestartsDecidesWhetherALostWorkerRestartsTheJob) {
  RunOptions lost;
  lost.lose_worker = true;
  lost.restarts_so_far = 1;
  const Outcome restarts = Run("", "max_restarts: 2", lost);
  EXPECT_EQ(restarts.state, RESTARTING) << restarts.Fingerprint();
  EXPECT_THAT(restarts.reason, HasSubstr("restart 2 of 2"));
  const Outcome ends = Run("", "max_restarts: 1", lost);
  EXPECT_EQ(ends.state, FAILED) << ends.Fingerprint();
  EXPECT_THAT(ends.reason, HasSubstr("no restarts left: max_restarts 1"));
}

// fault_tolerance.min_workers: a lost rank (rank 0's RunSteps fails as a
// vanished worker's does; the other ranks' collective times out) leaves two
// of three ranks, which go on with min_workers 2 and end the attempt with 3.
TEST_F(FieldCoverageTest, MinWorkersDecidesWhetherTheSurvivorsGoOn) {
  RunOptions lost;
  lost.lose_worker = true;
  lost.collective_timeout = absl::Seconds(2);
  const std::string elastic = "num_workers: 3 batch_size: 6 fault_tolerance { mode: ELASTIC }";
  const Outcome goes_on = Run(elastic, "fault_tolerance { min_workers: 2 }", lost);
  EXPECT_EQ(goes_on.state, SUCCEEDED) << goes_on.Fingerprint();
  EXPECT_THAT(goes_on.records, ::testing::Contains("ranks w1,w2"));
  const Outcome restarts = Run(elastic, "fault_tolerance { min_workers: 3 }", lost);
  EXPECT_EQ(restarts.state, RESTARTING) << restarts.Fingerprint();
}

// The NaN action's task and metric choose what it watches (CreateActions,
// which the driver runs on rank 0's metrics).
TEST_F(FieldCoverageTest, TerminateOnNanWatchesItsTaskAndMetric) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto halts = [&](const std::string& action, ActionModeKind mode, const MetricsByTask& metrics) {
    absl::StatusOr<JobSpec> spec = Parse({Common(), kQaTasks, R"pb(eval { tasks: "digits_to_words" tasks: "qa" })pb",
                                          absl::StrCat("actions { ", action, " }")});
    EXPECT_THAT(spec.status(), IsOk());
    spec->set_output_dir(*root_ + "/nan");
    EXPECT_THAT(ValidateAndNormalize(&*spec), IsOk());
    absl::StatusOr<ActionsByMode> actions = CreateActions(*spec);
    EXPECT_THAT(actions.status(), IsOk());
    bool halted = false;
    for (const auto& a : (*actions)[mode]) halted = halted || a->Run(2, metrics);
    return halted;
  };
  const MetricsByTask nan_loss = {{"digits_to_words", {{"loss", nan}, {"accuracy", 0.5}}}, {"qa", {{"loss", 1.0}}}};
  EXPECT_TRUE(halts(R"pb(on: ACTION_TRAIN_EVAL
                         terminate_on_nan { task: "digits_to_words" })pb",
                    ActionModeKind::kTrainEval, nan_loss));
  EXPECT_FALSE(halts(R"pb(on: ACTION_TRAIN_EVAL
                          terminate_on_nan { task: "qa" })pb",
                     ActionModeKind::kTrainEval, nan_loss));
  EXPECT_FALSE(halts(R"pb(on: ACTION_TRAIN_EVAL
                          terminate_on_nan { task: "digits_to_words" metric: "accuracy" })pb",
                     ActionModeKind::kTrainEval, nan_loss));
}

// A save that cannot be written (a file stands where checkpoint_2 goes):
// waited for, it fails the job at step 2; in the background, it is logged,
// the previous good checkpoint stays, and training goes on.
TEST_F(FieldCoverageTest, AsyncCheckpointsDoNotStopTheStep) {
  RunOptions blocked;
  blocked.block_first_checkpoint = true;
  const Outcome waited = Run("", "checkpoint { async: false }", blocked);
  EXPECT_EQ(waited.state, FAILED) << waited.Fingerprint();
  const Outcome background = Run("", "checkpoint { async: true }", blocked);
  EXPECT_EQ(background.state, SUCCEEDED) << background.Fingerprint();
  EXPECT_THAT(background.Fingerprint(), HasSubstr("checkpoint_4 step 4"));
}

// The collective calls of a training step, counted on rank 0.
class CountingCollective : public Collective {
 public:
  explicit CountingCollective(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    if (n > 1000) ++large_all_reduces;
    return inner_->AllReduce(tensors, op);
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor tensor, ReduceOp op) override {
    ++started_all_reduces;
    return inner_->StartAllReduce(std::move(tensor), op);
  }
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    return inner_->Broadcast(tensors, root);
  }
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override {
    return inner_->AllGather(input, outputs);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                             ReduceOp op) override {
    reduce_scattered += input.numel();
    return inner_->ReduceScatter(std::move(input), counts, std::move(output), op);
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartReduceScatter(torch::Tensor input, std::vector<int64_t> counts,
                                                                     torch::Tensor output, ReduceOp op) override {
    reduce_scattered += input.numel();
    return inner_->StartReduceScatter(std::move(input), std::move(counts), std::move(output), op);
  }
  absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) override {
    all_gathered += output.numel();
    return inner_->AllGatherV(std::move(input), counts, std::move(output));
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor input, std::vector<int64_t> counts,
                                                                  torch::Tensor output) override {
    all_gathered += output.numel();
    ++started_all_gathers;
    return inner_->StartAllGatherV(std::move(input), std::move(counts), std::move(output));
  }

  std::atomic<int> large_all_reduces{0};     // gradients in one call
  std::atomic<int> started_all_reduces{0};   // buckets started from backward
  std::atomic<int64_t> reduce_scattered{0};  // elements, every rank's
  std::atomic<int64_t> all_gathered{0};      // elements, every rank's
  std::atomic<int> started_all_gathers{0};   // parameter units started

 private:
  std::unique_ptr<Collective> inner_;
};

struct StepCalls {
  int large_all_reduces = 0;
  int started_all_reduces = 0;
  int64_t reduce_scattered = 0;
  int64_t all_gathered = 0;
  int started_all_gathers = 0;
  int64_t parameters = 0;  // the model's elements
  int64_t units = 0;       // the model's parameter units
};

// Two ranks of tiny, four steps, with `extra` fields.
JobSpec TwoRankSpec(const std::string& extra, const std::string& dir) {
  JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(absl::StrCat(R"pb(
                                                                           name: "cov"
                                                                           model { preset: "tiny" dropout_rate: 0.0 }
                                                                           task: "digits_to_words"
                                                                           feature_lengths { inputs: 16 targets: 32 }
                                                                           batch_size: 4
                                                                           num_workers: 2
                                                                           total_steps: 4
                                                                           seed: 1
                                                                         )pb",
                                                                         extra),
                                                            &spec));
  spec.set_output_dir(dir);
  EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
  return spec;
}

// Two ranks (threads) train `steps` steps of TwoRankSpec(extra).
StepCalls CountStepCalls(const std::string& extra, const std::string& dir, int steps) {
  const JobSpec spec = TwoRankSpec(extra, dir);
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(60));
  StepCalls calls;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CountingCollective collective(std::make_unique<FakeCollective>(group, r));
      TrainingJobOptions options;
      options.id = "cov";
      options.peak_flops = 1e12;
      options.warm_up = false;  // a step's calls only
      absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &collective, options);
      ASSERT_THAT(job.status(), IsOk());
      ASSERT_THAT((*job)->Restore("").status(), IsOk());
      const int before_large = collective.large_all_reduces, before_started = collective.started_all_reduces;
      const int64_t before_scattered = collective.reduce_scattered, before_gathered = collective.all_gathered;
      const int before_started_gathers = collective.started_all_gathers;
      ASSERT_THAT((*job)->Train(steps).status(), IsOk());
      if (r == 0) {
        calls.large_all_reduces = collective.large_all_reduces - before_large;
        calls.started_all_reduces = collective.started_all_reduces - before_started;
        calls.reduce_scattered = collective.reduce_scattered - before_scattered;
        calls.all_gathered = collective.all_gathered - before_gathered;
        calls.started_all_gathers = collective.started_all_gathers - before_started_gathers;
        for (const auto& p : (*job)->model()->named_parameters()) calls.parameters += p.value().numel();
        calls.units = static_cast<int64_t>((*job)->model()->ParameterUnits().size());
      }
      (*job)->Close();
    });
  }
  for (auto& t : threads) t.join();
  return calls;
}

TEST_F(FieldCoverageTest, OverlapAllreduceStartsBucketsDuringBackward) {
  const StepCalls overlapped = CountStepCalls("data_parallel { overlap_allreduce: true }", *root_ + "/dp1", 2);
  const StepCalls plain = CountStepCalls("data_parallel { overlap_allreduce: false }", *root_ + "/dp2", 2);
  EXPECT_GT(overlapped.started_all_reduces, 0);
  EXPECT_EQ(overlapped.large_all_reduces, 0);
  EXPECT_EQ(plain.started_all_reduces, 0);
  EXPECT_EQ(plain.large_all_reduces, 2);  // one per step
}

TEST_F(FieldCoverageTest, BucketMbSetsTheBucketsPerStep) {
  // tiny: about 2 MiB of float32 gradients.
  const StepCalls one = CountStepCalls("data_parallel { bucket_mb: 1 }", *root_ + "/dp3", 1);
  const StepCalls four = CountStepCalls("data_parallel { bucket_mb: 4 }", *root_ + "/dp4", 1);
  EXPECT_GT(one.started_all_reduces, four.started_all_reduces);
  EXPECT_GE(four.started_all_reduces, 1);
}

// A sharded step moves what a replicated one does, in two halves: each
// gradient bucket is reduce-scattered instead of all-reduced (overlapped
// with backward or after it), and the updated parameters are all-gathered.
// GRADIENTS reduce-scatters every microbatch's gradients.
TEST_F(FieldCoverageTest, ShardingReduceScattersGradientsAndGathersParameters) {
  for (const char* mode : {"OPTIMIZER", "GRADIENTS"}) {
    for (const char* overlap : {"true", "false"}) {
      const std::string what = absl::StrCat(mode, " overlap_allreduce: ", overlap);
      const StepCalls calls = CountStepCalls(
          absl::StrCat("num_microbatches: 2 data_parallel { sharding: ", mode, " overlap_allreduce: ", overlap, " }"),
          *root_ + "/rs_" + mode + overlap, 2);
      const int passes = std::string(mode) == "GRADIENTS" ? 2 : 1;  // per step
      EXPECT_EQ(calls.large_all_reduces, 0) << what;
      EXPECT_EQ(calls.started_all_reduces, 0) << what;
      EXPECT_EQ(calls.reduce_scattered, 2 * passes * calls.parameters) << what;  // 2 steps
      EXPECT_EQ(calls.all_gathered, 2 * calls.parameters) << what;
    }
  }
}

// overlap_allgather gathers the updated parameters unit by unit, started
// (and prefetched) from the next forward pass: one started all-gather per
// unit and step; off, the whole all-gather after the update. The same
// elements either way (the parameters: bit for bit, //job:sharded_training_test).
TEST_F(FieldCoverageTest, OverlapAllgatherGathersUnitByUnit) {
  for (const char* mode : {"OPTIMIZER", "GRADIENTS"}) {
    const StepCalls overlapped = CountStepCalls(
        absl::StrCat("data_parallel { sharding: ", mode, " overlap_allgather: true }"), *root_ + "/ag1" + mode, 2);
    const StepCalls whole = CountStepCalls(
        absl::StrCat("data_parallel { sharding: ", mode, " overlap_allgather: false }"), *root_ + "/ag2" + mode, 2);
    EXPECT_GT(overlapped.units, 4) << mode;
    EXPECT_EQ(overlapped.started_all_gathers, 2 * overlapped.units) << mode;
    EXPECT_EQ(overlapped.all_gathered, 2 * overlapped.parameters) << mode;
    EXPECT_EQ(whole.started_all_gathers, 0) << mode;
    EXPECT_EQ(whole.all_gathered, 2 * whole.parameters) << mode;
  }
}

// PARAMETERS gathers each unit just before its use, in forward and again
// in backward (units n-2 .. 1: the last stays whole from forward, the
// embedding through the step). With 2 microbatches and n units, each step
// starts from this rank's own parameters only (the trainer releases the
// others' when it is made): the first pass gathers n units forward and
// n-2 backward, the second n-1 forward (the embedding is still whole) and
// n-2 backward: 8n - 10 gathers in 2 steps. The gradients go as
// GRADIENTS' do.
TEST_F(FieldCoverageTest, ParameterShardingGathersEachUnitForwardAndBackward) {
  const StepCalls calls =
      CountStepCalls("num_microbatches: 2 data_parallel { sharding: PARAMETERS }", *root_ + "/zero3", 2);
  const int64_t n = calls.units;
  EXPECT_GT(n, 4);
  EXPECT_EQ(calls.started_all_gathers, 8 * n - 10);
  EXPECT_EQ(calls.reduce_scattered, 2 * 2 * calls.parameters);
  EXPECT_EQ(calls.large_all_reduces, 0);
}

// OPTIMIZER sharding trains the same parameters as NONE (bit for bit:
// //job:sharded_training_test); what it changes is what each rank holds.
TEST_F(FieldCoverageTest, ShardingSplitsTheOptimizerStateOverTheRanks) {
  auto state_per_rank = [&](const std::string& sharding) {
    const JobSpec spec =
        TwoRankSpec(absl::StrCat("data_parallel { sharding: ", sharding, " }"), *root_ + "/sharding_" + sharding);
    auto group = std::make_shared<FakeGroup>(2, absl::Seconds(60));
    std::vector<int64_t> elements(2, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        FakeCollective collective(group, r);
        TrainingJobOptions options;
        options.id = "cov";
        options.peak_flops = 1e12;
        absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &collective, options);
        ASSERT_THAT(job.status(), IsOk());
        for (const auto& [k, t] : (*job)->optimizer()->State()) {
          if (k != "step") elements[r] += t.numel();
        }
        (*job)->Close();
      });
    }
    for (auto& t : threads) t.join();
    return elements;
  };
  const std::vector<int64_t> none = state_per_rank("NONE"), sharded = state_per_rank("OPTIMIZER");
  EXPECT_EQ(none[0], none[1]);
  EXPECT_LT(sharded[0], none[0]);
  EXPECT_LT(sharded[1], none[0]);
  EXPECT_EQ(sharded[0] + sharded[1], none[0]);
}

// shard_group_size 2 of 4 ranks (HSDP): each rank holds half the optimizer
// state instead of a quarter, the same halves in both groups (what it
// trains: //job:sharded_training_test).
TEST_F(FieldCoverageTest, ShardGroupSizeShardsTheStateWithinGroups) {
  auto state_per_rank = [&](int group_size) {
    JobSpec spec =
        TwoRankSpec("data_parallel { sharding: OPTIMIZER }", *root_ + "/groups" + std::to_string(group_size));
    spec.set_num_workers(4);
    spec.set_batch_size(8);
    spec.mutable_data_parallel()->set_shard_group_size(group_size);
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    std::mutex mu;
    std::vector<int64_t> elements(4, 0);
    const RankBody body = [&](int r, Collective* collective) {
      TrainingJobOptions options;
      options.id = "cov";
      options.peak_flops = 1e12;
      absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, collective, options);
      ASSERT_THAT(job.status(), IsOk());
      int64_t mine = 0;
      for (const auto& [k, t] : (*job)->optimizer()->State()) {
        if (k != "step") mine += t.numel();
      }
      (*job)->Close();
      std::lock_guard<std::mutex> lock(mu);
      elements[r] = mine;
    };
    if (group_size > 0) {
      OnFakeHybridRanks(4, group_size, body);
    } else {
      OnFakeRanks(4, body);
    }
    return elements;
  };
  const std::vector<int64_t> every = state_per_rank(0), groups = state_per_rank(2);
  EXPECT_EQ(groups[0] + groups[1], every[0] + every[1] + every[2] + every[3]);
  EXPECT_EQ(groups[2], groups[0]);
  EXPECT_EQ(groups[3], groups[1]);
  EXPECT_GT(groups[0], every[0]);
}

}  // namespace
}  // namespace trainyard
