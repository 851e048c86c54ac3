#include "spec/jobspec.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr char kText[] = R"pb(
  name: "demo"
  model { preset: "tiny" }
  task: "copy"
  feature_lengths { inputs: 32 targets: 16 }
  batch_size: 8
)pb";

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = std::string(testing::TempDir()) + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(ParseJobSpecTest, TextFormat) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kText, "job.textproto");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "demo");
  EXPECT_EQ(spec->model().preset(), "tiny");
  EXPECT_EQ(spec->feature_lengths().inputs(), 32);
  EXPECT_EQ(spec->batch_size(), 8);
}

TEST(ParseJobSpecTest, JsonIsDetectedByContent) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      R"({"name": "demo", "model": {"preset": "tiny"}, "batch_size": 8, "kind": "EVALUATION"})", "<stdin>");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size(), 8);
  EXPECT_EQ(spec->kind(), EVALUATION);
}

TEST(ParseJobSpecTest, TextErrorNamesSourceLineAndColumn) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec("name: \"x\"\nbatchsize: 8\n", "job.textproto");
  EXPECT_THAT(spec.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("job.textproto:2:10: Message type \"trainyard.JobSpec\" has no "
                                                "field named \"batchsize\"")));
}

TEST(ParseJobSpecTest, DuplicateScalarFieldIsAnError) {
  EXPECT_THAT(ParseJobSpec("batch_size: 8\nbatch_size: 16\n", "a.textproto").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.textproto:2:")));
}

TEST(ParseJobSpecTest, UnknownEnumNameIsAnError) {
  EXPECT_THAT(ParseJobSpec("dtype: FLOAT16\n", "a.textproto").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("FLOAT16")));
}

TEST(ParseJobSpecTest, JsonErrorNamesSourceAndField) {
  EXPECT_THAT(
      ParseJobSpec(R"({"batchsize": 8})", "job.json", SpecFormat::kJson).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::AllOf(HasSubstr("job.json"), HasSubstr("batchsize"))));
}

TEST(ParseJobSpecTest, OversizedInputIsRejectedBeforeParsing) {
  const std::string huge(kMaxSpecBytes + 1, ' ');
  EXPECT_THAT(ParseJobSpec(huge, "big.textproto").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 1048576 bytes")));
}

TEST(LoadJobSpecTest, ReadsFileByExtension) {
  const std::string path = WriteTemp("spec.textproto", kText);
  absl::StatusOr<JobSpec> spec = LoadJobSpec(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task(), "copy");
}

TEST(LoadJobSpecTest, JsonExtensionForcesJson) {
  // Text format in a .json file is reported as bad JSON, not parsed as text.
  const std::string path = WriteTemp("spec.json", kText);
  EXPECT_THAT(LoadJobSpec(path).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid JSON")));
}

TEST(LoadJobSpecTest, MissingFileIsNotFound) {
  EXPECT_THAT(LoadJobSpec("/nonexistent/spec.textproto").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/spec.textproto")));
}

TEST(FormatJobSpecTest, TextAndJsonRoundTrip) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kText, "job");
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<JobSpec> from_text = ParseJobSpec(FormatJobSpecText(*spec), "text");
  absl::StatusOr<JobSpec> from_json = ParseJobSpec(FormatJobSpecJson(*spec), "json");
  ASSERT_TRUE(from_text.ok());
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(from_text->SerializeAsString(), spec->SerializeAsString());
  EXPECT_EQ(from_json->SerializeAsString(), spec->SerializeAsString());
  EXPECT_THAT(FormatJobSpecJson(*spec), HasSubstr("\"batch_size\": 8"));
}

TEST(ShardGroupSizeTest, ReplicatedHybridAndEveryRank) {
  JobSpec spec;
  EXPECT_EQ(ShardGroupSize(spec, 4), 1);  // sharding unset: replicated
  spec.mutable_data_parallel()->set_shard_group_size(2);
  spec.mutable_data_parallel()->set_sharding(DataParallelConfig::NONE);
  EXPECT_EQ(ShardGroupSize(spec, 4), 1);
  spec.mutable_data_parallel()->set_sharding(DataParallelConfig::PARAMETERS);
  EXPECT_EQ(ShardGroupSize(spec, 4), 2);  // two groups of 2
  EXPECT_EQ(ShardGroupSize(spec, 2), 2);  // one group: every rank
  spec.mutable_data_parallel()->set_shard_group_size(0);
  EXPECT_EQ(ShardGroupSize(spec, 4), 4);
  EXPECT_EQ(ShardGroupSize(spec, 1), 1);
}

}  // namespace
}  // namespace trainyard
