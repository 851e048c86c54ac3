// gin's lookups over a loaded configuration: includes along the search
// path, the last binding winning, scopes, import aliases, macros and
// %gin.REQUIRED, and the command line's bindings after the files.
#include "gin/gin_config.h"

#include <filesystem>
#include <fstream>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

class GinConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/lib/models");
  }
  void Write(const std::string& path, const std::string& text) { std::ofstream(root_ + "/" + path) << text; }
  std::string root_;
};

TEST_F(GinConfigTest, IncludesScopesAliasesAndMacrosResolveAsGinDoes) {
  Write("lib/models/base.gin", R"gin(from t5x import utils
BATCH_SIZE = 128
FEATURES = {'inputs': 512, 'targets': 114}
utils.DatasetConfig.batch_size = %BATCH_SIZE
utils.DatasetConfig.task_feature_lengths = %FEATURES
)gin");
  Write("run.gin", R"gin(import __main__ as train_script
include 'models/base.gin'
BATCH_SIZE = 64
train_eval/utils.DatasetConfig.batch_size = 32
train_script.train.total_steps = 100
)gin");
  GinLoadOptions options;
  options.search_path = {root_ + "/lib"};
  options.bindings = {"train.total_steps = 200"};
  absl::StatusOr<GinConfig> config = GinConfig::Load({root_ + "/run.gin"}, options);
  ASSERT_THAT(config.status(), IsOk());

  // The command line wins over the file; `train.` matches `train_script.train`.
  const GinConfig::Binding* steps = config->Find("", "__main__.train", "total_steps");
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(steps->statement.value, GinValue::Int(200));
  EXPECT_EQ(steps->statement.location.file, "--gin-binding #1");

  // train: the unscoped binding through the macro the run file rebound.
  const GinConfig::Binding* train = config->Find("train", "utils.DatasetConfig", "batch_size");
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->statement.location.line, 4);
  absl::StatusOr<GinValue> batch = config->Resolve(train->statement.value, train->statement.location);
  ASSERT_THAT(batch.status(), IsOk());
  EXPECT_EQ(*batch, GinValue::Int(64));
  // train_eval: its scoped binding first.
  const GinConfig::Binding* eval = config->Find("train_eval", "utils.DatasetConfig", "batch_size");
  ASSERT_NE(eval, nullptr);
  EXPECT_EQ(eval->statement.value, GinValue::Int(32));

  const GinConfig::Binding* lengths = config->Find("train", "t5x.utils.DatasetConfig", "task_feature_lengths");
  ASSERT_NE(lengths, nullptr);
  EXPECT_EQ(config->Resolve(lengths->statement.value, lengths->statement.location)->ToString(),
            "{'inputs': 512, 'targets': 114}");
  EXPECT_EQ(config->Find("", "utils.DatasetConfig", "split"), nullptr);
  EXPECT_EQ(config->ExpandAliases("utils.DatasetConfig"), "t5x.utils.DatasetConfig");

  // What no lookup read stays unused; the overridden macro is marked so.
  std::vector<std::string> unused;
  for (const GinConfig::Binding& b : config->bindings()) {
    if (!b.used && !b.overridden) unused.push_back(b.statement.location.ToString());
  }
  EXPECT_EQ(unused, std::vector<std::string>{});
}

TEST_F(GinConfigTest, RequiredValuesAndMissingFilesAreErrorsNamingWhere) {
  Write("run.gin", "MODEL_DIR = %gin.REQUIRED\ntrain.model_dir = %MODEL_DIR\ntrain.x = %NOWHERE\n");
  absl::StatusOr<GinConfig> config = GinConfig::Load({root_ + "/run.gin"}, {});
  ASSERT_THAT(config.status(), IsOk());
  const GinConfig::Binding* dir = config->Find("", "train", "model_dir");
  ASSERT_NE(dir, nullptr);
  EXPECT_THAT(
      config->Resolve(dir->statement.value, dir->statement.location).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, root_ + "/run.gin:2: MODEL_DIR is %gin.REQUIRED (" + root_ +
                                                       "/run.gin:1); bind it: --gin-binding \"MODEL_DIR = ...\""));
  const GinConfig::Binding* x = config->Find("", "train", "x");
  EXPECT_THAT(config->Resolve(x->statement.value, x->statement.location).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, root_ + "/run.gin:3: macro %NOWHERE is not bound"));

  GinLoadOptions bound;
  bound.bindings = {"MODEL_DIR = '/tmp/run'"};
  config = GinConfig::Load({root_ + "/run.gin"}, bound);
  ASSERT_THAT(config.status(), IsOk());
  dir = config->Find("", "train", "model_dir");
  EXPECT_EQ(config->Resolve(dir->statement.value, dir->statement.location)->s, "/tmp/run");

  Write("inc.gin", "include 'nowhere/base.gin'\n");
  EXPECT_THAT(GinConfig::Load({root_ + "/inc.gin"}, {}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(root_ +
                                                              "/inc.gin:1: include 'nowhere/base.gin' is "
                                                              "not found; looked for " +
                                                              root_ + "/nowhere/base.gin")));
  Write("a.gin", "include 'b.gin'\n");
  Write("b.gin", "include 'a.gin'\n");
  EXPECT_THAT(GinConfig::Load({root_ + "/a.gin"}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("include cycle")));
  bound.bindings = {"include 'a.gin'"};
  EXPECT_THAT(
      GinConfig::Load({root_ + "/run.gin"}, bound).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--gin-binding #1: 'include 'a.gin'' is not a binding")));
}

}  // namespace
}  // namespace trainyard
