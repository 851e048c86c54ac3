// The tasks and mixtures a job spec can name: the bundled task names, the
// preprocessing chains of task_definitions and their arithmetic (how long a
// document segment is, what span corruption makes of it), and the mixtures
// of mixture_definitions (known components, rates > 0, no cycles). Tensor
// free: the coordinator and `trainyard validate` check a spec with it before
// any worker reads a file, and data/ builds the same chains from it.
#ifndef TRAINYARD_SPEC_TASK_SPEC_H_
#define TRAINYARD_SPEC_TASK_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace trainyard {

// The tasks every worker registers before a job starts (data/bundled.h
// registers exactly these; a test checks the two agree).
const std::vector<std::string>& BundledTaskNames();

// Span-corruption defaults (T5's).
constexpr double kDefaultNoiseDensity = 0.15;
constexpr double kDefaultMeanNoiseSpanLength = 3.0;
constexpr int kDefaultSpanCorruptionExtraIds = 100;

// What span corruption (data/span_corruption.h) makes of a segment of
// `segment_tokens` tokens: exactly these lengths, each with `eos` (0 or 1)
// EOS tokens appended.
struct SpanCorruptionLengths {
  int64_t segment_tokens = 0;
  int64_t noise_tokens = 0;
  int64_t spans = 0;    // noise spans = sentinels used
  int64_t inputs = 0;   // kept tokens + one sentinel per span + eos
  int64_t targets = 0;  // noise tokens + one sentinel per span + eos
};
SpanCorruptionLengths SpanCorruptionLengthsOf(int64_t segment_tokens, double noise_density,
                                              double mean_noise_span_length, int eos);

// T5's random_spans_helper: the longest segment (at least 2 tokens) whose
// corrupted inputs fit in `inputs_length`, and what it becomes.
SpanCorruptionLengths SpanCorruptionLengthsFor(int64_t inputs_length, double noise_density,
                                               double mean_noise_span_length, int eos);

// The first span_corruption / prefix_lm / split_tokens of `def`'s chain, or
// null.
const SpanCorruptionConfig* FindSpanCorruption(const TaskDefinition& def);
bool HasPrefixLm(const TaskDefinition& def);
const SplitTokensConfig* FindSplitTokens(const TaskDefinition& def);

// Whether `def`'s chain splits documents into segments (split_tokens,
// span_corruption or prefix_lm).
bool SplitsDocuments(const TaskDefinition& def);
// The length of the segments `def`'s chain splits each document's targets
// into, for a job with feature_lengths.inputs = inputs_length; 0 when the
// chain does not split (see SplitTokensConfig in proto/job.proto).
int64_t SegmentLength(const TaskDefinition& def, int64_t inputs_length);

// The sentinel ids `def`'s vocabulary gets (extra_ids, or its default).
int ExtraIds(const TaskDefinition& def);

// Whether a split's path names plain text (one document per line).
bool IsPlainTextPath(const std::string& path);

// Whether a split's path names TFRecord files of tf.train.Example: a file
// name ending in .tfrecord or .tfrecord.gz, or a shard of one
// ("train.tfrecord-00000-of-00004") or a pattern of them
// ("train.tfrecord-*-of-*").
bool IsTfRecordPath(const std::string& path);

// The features a task's TFRecord, TFDS or seqio-cache examples are read
// with: those its first text step (rekey, translate, summarize) takes, else
// inputs and targets.
std::vector<std::string> TfRecordFeatures(const TaskDefinition& def);

// Whether the chain has a text step: rekey, translate or summarize.
bool HasTextStep(const TaskDefinition& def);

// The English name T5's translate gives a language ("de" -> "German"), from
// the code's first two letters as T5 does ("de-CH" -> "German");
// kInvalidArgument listing the codes known.
absl::StatusOr<std::string> T5LanguageName(const std::string& code);

// How a split's value (TaskDefinition.splits) names its examples.
enum class SplitFormat {
  kTsv,
  kJsonl,
  kText,
  kTfRecord,    // IsTfRecordPath
  kSeqioCache,  // "seqio_cache:DIR"
  kTfds,        // "tfds:NAME[/CONFIG][:VERSION]:SPLIT[SLICE]"
};
SplitFormat SplitFormatOf(const std::string& value);
inline constexpr char kSeqioCachePrefix[] = "seqio_cache:";
inline constexpr char kTfdsPrefix[] = "tfds:";

// A TFDS split as TFDS names it: "tfds:c4/en:3.0.1:train[:95%]".
struct TfdsSplit {
  std::string name;
  std::string config;   // "" when not given
  std::string version;  // "" when not given: the newest one prepared
  std::string split;
  // The slice [from:to] of the split's examples (TFDS's: negative counts
  // from the end; percentages round to the closest example, halves to
  // even); unset bounds are the split's start and end.
  bool has_from = false, has_to = false;
  int64_t from = 0, to = 0;
  bool percent = false;
};
// kInvalidArgument saying what is wrong with `value`.
absl::StatusOr<TfdsSplit> ParseTfdsSplit(const std::string& value);

// The tasks (not mixtures) a name of `spec` stands for, with the share of
// examples each gets (summing to 1): a task is itself; a mixture its
// components, a nested mixture's rate shared among its own. kNotFound for a
// name neither bundled nor defined; kInvalidArgument for a cycle. Order:
// first appearance, depth first.
absl::StatusOr<std::vector<std::pair<std::string, double>>> LeafTasks(const JobSpec& spec, const std::string& name);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_TASK_SPEC_H_
