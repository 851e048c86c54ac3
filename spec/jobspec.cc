#include "spec/jobspec.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace trainyard {
namespace {

// Collects every parse error with its position (1-based, as editors count).
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorCollector(absl::string_view source) : source_(source) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

bool LooksLikeJson(absl::string_view content) {
  for (char c : content) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) continue;
    return c == '{';
  }
  return false;
}

absl::StatusOr<JobSpec> ParseText(absl::string_view content, absl::string_view source) {
  JobSpec spec;
  ErrorCollector errors(source);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(content), &spec)) {
    if (errors.errors().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid text-format JobSpec"));
    }
    return absl::InvalidArgumentError(absl::StrJoin(errors.errors(), "\n"));
  }
  return spec;
}

absl::StatusOr<JobSpec> ParseJson(absl::string_view content, absl::string_view source) {
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(content.data(), content.size()), &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON JobSpec: ", status.message().as_string()));
  }
  return spec;
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view content, absl::string_view source, SpecFormat format) {
  if (content.size() > kMaxSpecBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", content.size(), " bytes; a job spec may be at most ", kMaxSpecBytes, " bytes"));
  }
  if (format == SpecFormat::kAuto) {
    format = LooksLikeJson(content) ? SpecFormat::kJson : SpecFormat::kText;
  }
  return format == SpecFormat::kJson ? ParseJson(content, source) : ParseText(content, source);
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::string content;
  if (path == "-") {
    content.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      const int err = errno;
      if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
      return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read: ", std::strerror(err)));
    }
    // Read at most one byte more than allowed, so a huge file is not slurped.
    content.resize(kMaxSpecBytes + 1);
    in.read(&content[0], static_cast<std::streamsize>(content.size()));
    content.resize(static_cast<size_t>(in.gcount()));
    if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  }
  SpecFormat format = SpecFormat::kAuto;
  if (absl::EndsWith(path, ".json")) {
    format = SpecFormat::kJson;
  } else if (absl::EndsWith(path, ".textproto") || absl::EndsWith(path, ".txtpb") || absl::EndsWith(path, ".pbtxt") ||
             absl::EndsWith(path, ".prototxt")) {
    format = SpecFormat::kText;
  }
  return ParseJobSpec(content, path == "-" ? "<stdin>" : path, format);
}

bool IsTrainingKind(JobKind kind) {
  return kind == JOB_KIND_UNSPECIFIED || kind == TRAIN || kind == PRETRAINING || kind == FINETUNING;
}

bool IsElasticTraining(const JobSpec& spec) {
  return spec.fault_tolerance().mode() == FaultToleranceConfig::ELASTIC && IsTrainingKind(spec.kind());
}

bool IsReproducibleTraining(const JobSpec& spec) {
  return spec.data_parallel().reproducible() && IsTrainingKind(spec.kind());
}

bool ReadsGlobalBatches(const JobSpec& spec) { return IsElasticTraining(spec) || IsReproducibleTraining(spec); }

int ShardGroupSize(const JobSpec& spec, int world_size) {
  const DataParallelConfig& dp = spec.data_parallel();
  if (dp.sharding() == DataParallelConfig::NONE || dp.sharding() == DataParallelConfig::SHARDING_UNSPECIFIED) return 1;
  const int g = dp.shard_group_size();
  return g > 0 && g < world_size ? g : world_size;
}

absl::Status CheckBatchSplit(int64_t batch_size, int world_size, int num_microbatches, bool elastic) {
  if (elastic ? batch_size < world_size : world_size < 1 || batch_size % world_size != 0) {
    return absl::InvalidArgumentError(
        elastic ? absl::StrCat("batch_size: ", batch_size, " is less than the ", world_size,
                               " workers (ELASTIC gives every worker at least one row of a batch)")
                : absl::StrCat("batch_size: ", batch_size, " is not a multiple of num_workers ", world_size,
                               " (each worker takes an equal share of a batch)"));
  }
  if (elastic || num_microbatches <= 0) return absl::OkStatus();
  const int64_t rows = batch_size / world_size;
  if (rows % num_microbatches != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_microbatches: ", num_microbatches,
                                                   " does not divide the per-worker batch of ", rows, " rows"));
  }
  return absl::OkStatus();
}

std::string FormatJobSpecText(const JobSpec& spec) {
  std::string out;
  google::protobuf::TextFormat::Printer printer;
  printer.PrintToString(spec, &out);
  return out;
}

std::string FormatJobSpecJson(const JobSpec& spec, bool compact) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = !compact;
  options.preserve_proto_field_names = true;
  // Every field of a JobSpec is known to this binary, so printing cannot fail.
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

}  // namespace trainyard
