// TFRecord sources under the task pipeline: an iterator's position over
// TFRecord files survives a restart bit for bit, and seqio caches' token ids
// go through a pretokenized task untokenised. Loads the SentencePiece shim
// in a process with libprotobuf (tf.Example), so not under the sanitizers
// (data/internal/sentencepiece_wrapper.h).
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "data/digits_to_words.h"
#include "data/iterator.h"
#include "data/prepared_data.h"
#include "data/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tf_example.pb.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr char kVocab[] = "data/vocab/digits_to_words.model";

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string Write(const std::string& name, const std::string& content) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

// A serialized tf.train.Example with text features.
std::string TextExample(const Example& features) {
  tfexample::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  for (const auto& [name, text] : features) map[name].mutable_bytes_list()->add_value(text);
  return ex.SerializeAsString();
}

Example Numbers(int i) { return {{"inputs", std::to_string(i)}, {"targets", NumberToWords(i)}}; }

// Records of examples `first`..`first + n - 1`, framed.
std::string NumberRecords(int first, int n) {
  std::string out;
  for (int i = first; i < first + n; ++i) out += FrameTfRecord(TextExample(Numbers(i)));
  return out;
}

std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

bool SameBatch(const ConvertedBatch& a, const ConvertedBatch& b) {
  return a.encoder_input_tokens == b.encoder_input_tokens && a.decoder_target_tokens == b.decoder_target_tokens &&
         a.decoder_input_tokens == b.decoder_input_tokens && a.encoder_segment_ids == b.encoder_segment_ids &&
         a.decoder_segment_ids == b.decoder_segment_ids && a.encoder_positions == b.encoder_positions &&
         a.decoder_positions == b.decoder_positions && a.decoder_loss_weights == b.decoder_loss_weights;
}

// The iterator over TFRecord files: the same batches as over the same
// examples in memory, and a restored iterator (over the files opened anew)
// goes on bit for bit, across epochs.
TEST(TfRecordSourceTest, IteratorPositionSurvivesARestart) {
  const std::string plain = Write("resume-0.tfrecord", NumberRecords(0, 20));
  const std::string gz = Write("resume-1.tfrecord.gz", Gzip(NumberRecords(20, 37)));
  std::shared_ptr<const Vocabulary> vocab(std::move(Vocabulary::Load(kVocab)).value());
  Task files;
  files.name = "numbers_tfrecord";
  files.vocabulary = vocab;
  files.source = [=](const std::string&) { return OpenTfRecordSource({plain, gz}); };
  Task memory = files;
  memory.name = "numbers";
  memory.source = [](const std::string&) -> absl::StatusOr<std::unique_ptr<ExampleSource>> {
    std::vector<Example> examples;
    for (int i = 0; i < 57; ++i) examples.push_back(Numbers(i));
    return InMemorySource(std::move(examples));
  };
  IteratorOptions options;
  options.rows = 3;
  options.inputs_length = 10;
  options.targets_length = 24;
  options.seed = 9;
  options.rank = 1;
  options.world_size = 2;
  auto a = std::move(TaskIterator::Create(files, options)).value();
  auto in_memory = std::move(TaskIterator::Create(memory, options)).value();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(SameBatch(*a->Next(), *in_memory->Next())) << i;
  const std::string state = a->State();
  std::vector<ConvertedBatch> expected;
  for (int i = 0; i < 30; ++i) expected.push_back(*a->Next());
  EXPECT_GE(a->epoch(), 2);  // the 30 batches cross epoch boundaries
  auto b = std::move(TaskIterator::Create(files, options)).value();
  ASSERT_THAT(b->Restore(state), IsOk());
  for (int i = 0; i < 30; ++i) {
    const ConvertedBatch batch = *b->Next();
    EXPECT_TRUE(SameBatch(batch, expected[i])) << "batch " << i;
    EXPECT_TRUE(SameBatch(batch, *in_memory->Next())) << "batch " << i;
  }
  EXPECT_EQ(b->State(), a->State());
}

std::string TokenExample(const std::vector<int64_t>& inputs, const std::vector<int64_t>& targets) {
  tfexample::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  for (int64_t id : inputs) map["inputs"].mutable_int64_list()->add_value(id);
  for (int64_t id : targets) map["targets"].mutable_int64_list()->add_value(id);
  map["targets_pretokenized"].mutable_bytes_list()->add_value("text");
  return ex.SerializeAsString();
}

// A seqio cache of split "train": 5 examples in 2 shards, example i
// inputs {i + 3}, targets {i + 3, 4, 5}.
std::string WriteSeqioCache(const std::string& name, int64_t stats_examples) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/info.train.json") << R"({"num_shards": 2, "seqio_version": "0.0.19", "features": {)"
                                          << R"("inputs": {"shape": [null], "dtype": "int32"},)"
                                          << R"("targets": {"shape": [null], "dtype": "int32"},)"
                                          << R"("targets_pretokenized": {"shape": [], "dtype": "string"}}})";
  std::ofstream(dir + "/stats.train.json") << R"({"examples": )" << stats_examples << R"(, "targets_tokens": 15})";
  std::string shards[2];
  for (int i = 0; i < 5; ++i) shards[i < 3 ? 0 : 1] += FrameTfRecord(TokenExample({i + 3}, {i + 3, 4, 5}));
  std::ofstream(dir + "/train.tfrecord-00000-of-00002", std::ios::binary) << shards[0];
  std::ofstream(dir + "/train.tfrecord-00001-of-00002", std::ios::binary) << shards[1];
  return dir;
}

TEST(SeqioCacheTest, TokenFeaturesAreUsedAsTheyAre) {
  const std::string dir = WriteSeqioCache("cache", 5);
  auto source = OpenSeqioCacheSource(dir, "train", {"inputs", "targets"});
  ASSERT_THAT(source.status(), IsOk());
  ASSERT_EQ((*source)->size(), 5);
  const Example ex = *(*source)->Get(4);
  EXPECT_EQ(UnpackTokenIds(ex.at("inputs")), (std::vector<int32_t>{7}));
  EXPECT_EQ(UnpackTokenIds(ex.at("targets")), (std::vector<int32_t>{7, 4, 5}));
  // A pretokenized task: no tokenising; EOS appended; ids checked.
  Task task;
  task.name = "cached";
  task.vocabulary = std::shared_ptr<const Vocabulary>(std::move(Vocabulary::Load(kVocab)).value());
  task.pretokenized = true;
  auto tokens = Tokenize(task, ex);
  ASSERT_THAT(tokens.status(), IsOk());
  EXPECT_EQ(tokens->inputs, (std::vector<int32_t>{7, Vocabulary::kEosId}));
  EXPECT_EQ(tokens->targets, (std::vector<int32_t>{7, 4, 5, Vocabulary::kEosId}));
  EXPECT_THAT(Tokenize(task, {{"inputs", PackTokenIds({3})}, {"targets", PackTokenIds({128})}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("targets has the token id 128, outside its vocabulary's 128 ids")));
  // What does not match the cache's metadata.
  EXPECT_THAT(OpenSeqioCacheSource(WriteSeqioCache("cache_stats", 6), "train", {"inputs", "targets"}).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("holds 5 examples; stats.train.json says 6")));
  EXPECT_THAT(OpenSeqioCacheSource(dir, "validation", {"targets"}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no info.validation.json")));
  EXPECT_THAT(OpenSeqioCacheSource(dir, "train", {"targets_pretokenized"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is string, not token ids")));
  EXPECT_THAT(OpenSeqioCacheSource(dir, "train", {"text"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no feature \"text\"; the cache has: inputs, targets, targets_pretokenized")));
  std::filesystem::remove(dir + "/train.tfrecord-00001-of-00002");
  EXPECT_THAT(OpenSeqioCacheSource(dir, "train", {"inputs", "targets"}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("train.tfrecord-00001-of-00002: missing")));
}

}  // namespace
}  // namespace trainyard
