#include "client/commands.h"

#include <sstream>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunCommand(int (*command)(const std::vector<std::string>&, std::ostream&, std::ostream&),
                  const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = command(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(ValidateCommandTest, PrintsNormalizedSpec) {
  Result r = RunCommand(RunValidate, {"examples/tiny_local.textproto"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name: \"tiny-local\""));
  EXPECT_THAT(r.out, HasSubstr("max_restarts: 3"));  // a default made explicit
  EXPECT_THAT(r.out, HasSubstr("decay_rate: 0.8"));  // Adafactor's defaults
  // Nothing on stderr but, in a sanitized build (where SentencePiece cannot
  // load beside libprotobuf), the note that vocabularies went unchecked.
  EXPECT_TRUE(r.err.empty() || absl::StartsWith(r.err,
                                                "note: examples/tiny_local.textproto: the tasks' "
                                                "vocabularies are not checked here: cannot load the "
                                                "SentencePiece shim"))
      << r.err;
}

TEST(ValidateCommandTest, JsonOutputParses) {
  Result r = RunCommand(RunValidate, {"examples/t5_small_finetune.json", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kind"], "FINETUNING");
  EXPECT_EQ(j["batch_size"], 128);
  EXPECT_EQ(j["restore"]["mode"], "SPECIFIC");
}

TEST(ValidateCommandTest, OverridesThenValidation) {
  Result r = RunCommand(RunValidate, {"examples/tiny_local.textproto", "--set", "num_workers=3"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("error: examples/tiny_local.textproto: batch_size: 32 is not "
                               "divisible by num_workers x num_microbatches = 3 x 2 = 6"));
  EXPECT_TRUE(r.out.empty());
}

TEST(ValidateCommandTest, OutputRootRewritesRelativeDir) {
  Result r = RunCommand(RunValidate, {"examples/tiny_local.textproto", "--output-root", "/srv/ty"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("output_dir: \"/srv/ty/runs/tiny-local\""));
  EXPECT_EQ(RunCommand(RunValidate, {"examples/tiny_local.textproto", "--output-root", "srv"}).code, kExitUsage);
}

TEST(ValidateCommandTest, NoSpecIsUsageError) {
  Result r = RunCommand(RunValidate, {});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("no SPEC given"));
}

TEST(ModelInfoCommandTest, JsonHasTheDocumentedKeys) {
  Result r = RunCommand(RunModelInfo, {"--preset", "t5_1_1_small", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["preset"], "t5_1_1_small");
  EXPECT_EQ(j["num_params"], 76961152);
  EXPECT_EQ(j["d_model"], 512);
  EXPECT_EQ(j["num_heads"], 6);
  EXPECT_EQ(j["d_ff"], 1024);
  EXPECT_EQ(j["num_encoder_layers"], 8);
  EXPECT_EQ(j["num_decoder_layers"], 8);
  EXPECT_EQ(j["vocab_size"], 32128);
}

TEST(ModelInfoCommandTest, AllPresetsAsJsonArray) {
  Result r = RunCommand(RunModelInfo, {"--json"});
  ASSERT_EQ(r.code, kExitOk);
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 11u);  // tiny, T5 1.0 small..11B, T5.1.1 small..xxl
}

TEST(ModelInfoCommandTest, UnknownPresetIsUsageError) {
  Result r = RunCommand(RunModelInfo, {"--preset", "t5_xxxl"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("unknown preset \"t5_xxxl\""));
}

TEST(CoordinatorCommandTest, TimingFlagsOutOfRangeAreUsageErrors) {
  const std::string dir = ::testing::TempDir();
  Result r = RunCommand(RunCoordinator, {"--state-dir", dir, "--watchdog-elastic-stall", "4"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--watchdog-elastic-stall: '4'; want seconds in [0.1, --watchdog-stall]"));
  r = RunCommand(RunCoordinator, {"--state-dir", dir, "--watchdog-elastic-stall", "0.05"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--watchdog-elastic-stall: '0.05'"));
  r = RunCommand(RunCoordinator, {"--state-dir", dir, "--watchdog-stall", "0.5"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--watchdog-stall: '0.5'; want seconds in [1, 3600]"));
}

}  // namespace
}  // namespace trainyard
