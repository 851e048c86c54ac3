// The gin language as gin-config parses it: statements with their lines,
// Python literals, references, macros, blocks and imports; syntax errors
// name the file and line.
#include "gin/parser.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(GinParserTest, ReadsEveryStatementKindWithItsLine) {
  constexpr char kText[] = R"gin(# a comment
from __gin__ import dynamic_registration
import __main__ as train_script
from t5x import utils
include 't5x/configs/runs/pretrain.gin'

BATCH_SIZE = 128
train/utils.DatasetConfig.batch_size = %BATCH_SIZE  # trailing comment
train_script.train:
  total_steps = 1_000
  partitioner = @partitioning.PjitPartitioner()

  trainer_cls = @trainer.Trainer
utils.SaveCheckpointConfig.period = 2000
)gin";
  absl::StatusOr<std::vector<GinStatement>> st = ParseGin(kText, "run.gin");
  ASSERT_THAT(st.status(), IsOk());
  ASSERT_EQ(st->size(), 10u);
  const std::vector<GinStatement>& s = *st;
  EXPECT_EQ(s[0].kind, GinStatement::Kind::kImport);
  EXPECT_EQ(s[0].module, "__gin__.dynamic_registration");
  EXPECT_TRUE(s[0].is_from);
  EXPECT_EQ(s[1].module, "__main__");
  EXPECT_EQ(s[1].alias, "train_script");
  EXPECT_EQ(s[2].module, "t5x.utils");
  EXPECT_EQ(s[3].kind, GinStatement::Kind::kInclude);
  EXPECT_EQ(s[3].include, "t5x/configs/runs/pretrain.gin");
  EXPECT_EQ(s[3].location.line, 5);
  EXPECT_TRUE(s[4].is_macro());
  EXPECT_EQ(s[4].selector, "BATCH_SIZE");
  EXPECT_EQ(s[4].value, GinValue::Int(128));
  EXPECT_EQ(s[5].scope, "train");
  EXPECT_EQ(s[5].selector, "utils.DatasetConfig");
  EXPECT_EQ(s[5].arg, "batch_size");
  EXPECT_EQ(s[5].value, GinValue::Macro("BATCH_SIZE"));
  EXPECT_EQ(s[5].location.line, 8);
  EXPECT_EQ(s[6].selector, "train_script.train");
  EXPECT_EQ(s[6].arg, "total_steps");
  EXPECT_EQ(s[6].value, GinValue::Int(1000));
  EXPECT_EQ(s[6].location.line, 10);
  EXPECT_EQ(s[7].value, GinValue::Reference("partitioning.PjitPartitioner", true));
  EXPECT_EQ(s[8].arg, "trainer_cls");
  EXPECT_EQ(s[8].value, GinValue::Reference("trainer.Trainer", false));
  EXPECT_EQ(s[8].location.line, 13);
  EXPECT_EQ(s[9].selector, "utils.SaveCheckpointConfig");
  EXPECT_EQ(s[9].location.line, 14);
}

TEST(GinParserTest, ValuesArePythonLiterals) {
  constexpr char kText[] = R"gin(
a.x = -3
a.y = 1e-3
a.z = .5
a.s = "it's" ' joined'
a.t = ('gelu', 'linear')
a.one = (7)
a.single = (7,)
a.d = {'inputs': 512,
       'targets': 114}
a.l = [None, True, False, 0x10, 2.]
a.r = @train/utils.DatasetConfig()
a.m = %gin.REQUIRED
a.raw = r'\d+'
)gin";
  absl::StatusOr<std::vector<GinStatement>> st = ParseGin(kText, "v.gin");
  ASSERT_THAT(st.status(), IsOk());
  std::vector<std::string> repr;
  for (const GinStatement& s : *st) repr.push_back(s.value.ToString());
  EXPECT_EQ(repr, (std::vector<std::string>{"-3", "0.001", "0.5", "\"it's joined\"", "('gelu', 'linear')", "7", "(7,)",
                                            "{'inputs': 512, 'targets': 114}", "[None, True, False, 16, 2.0]",
                                            "@train/utils.DatasetConfig()", "%gin.REQUIRED", "'\\\\d+'"}));
  EXPECT_TRUE((*st)[10].value.is_required());
  EXPECT_EQ((*st)[7].location.line, 9);
  EXPECT_EQ((*st)[8].location.line, 11);
}

TEST(GinParserTest, FloatsPrintAsPythonDoes) {
  EXPECT_EQ(GinValue::Float(1e-30).ToString(), "1e-30");
  EXPECT_EQ(GinValue::Float(1.5e-5).ToString(), "1.5e-05");
  EXPECT_EQ(GinValue::Float(0.0001).ToString(), "0.0001");
  EXPECT_EQ(GinValue::Float(1e16).ToString(), "1e+16");
  EXPECT_EQ(GinValue::Float(123456.0).ToString(), "123456.0");
  EXPECT_EQ(GinValue::Float(-0.8).ToString(), "-0.8");
  EXPECT_EQ(GinValue::Float(0.1).ToString(), "0.1");
}

TEST(GinParserTest, SyntaxErrorsNameTheFileAndLine) {
  struct Bad {
    const char* text;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"a.b = 1\nx.y 2\n", "bad.gin:2: expected '=' or ':' after 'x.y'"},
           {"a.b = [1, 2\n", "bad.gin:1: a bracket is not closed by the end of the file"},
           {"a.b = 'open\n", "bad.gin:1: a string is not closed on its line"},
           {"a.b = relu\n", "bad.gin:1: 'relu' is not a value"},
           {"a.b = 1 2\n", "bad.gin:1: expected the end of the statement, found '2'"},
           {"a.b:\nc = 1\n", "bad.gin:2: expected an indented binding after ':'"},
           {"a.b = $\n", "bad.gin:1: unexpected character '$'"},
           {"a.b = @x(1)\n", "bad.gin:1: expected ')': a reference is called without arguments"},
           {"a.b = 1_0x\n", "bad.gin:1: '1_0x' is not a number gin reads"},
       }) {
    EXPECT_THAT(ParseGin(bad.text, "bad.gin").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad.message)))
        << bad.text;
  }
}

}  // namespace
}  // namespace trainyard
