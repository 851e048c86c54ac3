#include "data/tfrecord.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "data/digits_to_words.h"
#include "data/prepared_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tf_example.pb.h"

namespace trainyard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

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

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 B.4 and the check value of CRC-32C.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i), descending += static_cast<char>(31 - i);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(""), 0u);
  // Continuing a CRC over a split buffer gives the whole buffer's, at every
  // split (the 8-byte and byte-wise paths meet).
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t k = 0; k <= text.size(); ++k) {
    EXPECT_EQ(Crc32c(text.substr(k), Crc32c(text.substr(0, k))), Crc32c(text)) << k;
  }
  EXPECT_EQ(MaskCrc32c(0xE3069283u), 0xC78AB0E5u);
}

TEST(TfRecordTest, FramingIsLengthCrcDataCrc) {
  const std::string framed = FrameTfRecord("abc");
  ASSERT_EQ(framed.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = v << 8 | static_cast<unsigned char>(framed[at + k]);
    return v;
  };
  EXPECT_EQ(le32(8), MaskCrc32c(Crc32c(framed.substr(0, 8))));
  EXPECT_EQ(framed.substr(12, 3), "abc");
  EXPECT_EQ(le32(15), MaskCrc32c(Crc32c("abc")));
}

TEST(TfRecordTest, IndexesAndReadsRecordsPlainAndGzip) {
  const std::vector<std::string> records = {"first", "", std::string(100000, 'x'), "last"};
  std::string bytes;
  for (const std::string& r : records) bytes += FrameTfRecord(r);
  for (const auto& [name, content] : std::vector<std::pair<std::string, std::string>>{
           {"plain.tfrecord", bytes},
           {"gzipped.tfrecord.gz", Gzip(bytes)},
           {"gzipped_by_magic.tfrecord", Gzip(bytes)},
           {"two_members.tfrecord.gz", Gzip(bytes.substr(0, 21)) + Gzip(bytes.substr(21))}}) {
    std::vector<int64_t> offsets;
    auto file = TfRecordFile::Open(Write(name, content), [&](int64_t i, int64_t offset, std::string_view data) {
      EXPECT_EQ(data, records[static_cast<size_t>(i)]);
      offsets.push_back(offset);
      return absl::OkStatus();
    });
    ASSERT_THAT(file.status(), IsOk()) << name;
    EXPECT_EQ((*file)->gzip(), name != "plain.tfrecord") << name;
    ASSERT_EQ((*file)->size(), 4) << name;
    EXPECT_EQ(offsets, (std::vector<int64_t>{0, 21, 37, 100053})) << name;
    for (int i = 3; i >= 0; --i) {
      EXPECT_EQ(*(*file)->Read(i), records[static_cast<size_t>(i)]) << name << " " << i;
      EXPECT_EQ((*file)->offset(i), offsets[static_cast<size_t>(i)]);
    }
    EXPECT_THAT((*file)->Read(4).status(), StatusCodeIs(absl::StatusCode::kOutOfRange));
  }
  auto empty = TfRecordFile::Open(Write("empty.tfrecord", ""));
  ASSERT_THAT(empty.status(), IsOk());
  EXPECT_EQ((*empty)->size(), 0);
  EXPECT_THAT(TfRecordFile::Open(TempPath("missing.tfrecord")).status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST(TfRecordTest, DamageIsDataLossNamingFileAndOffset) {
  const std::string bytes = FrameTfRecord("first") + FrameTfRecord("second") + FrameTfRecord("third");
  // Record 1 starts at 21; its length at 21..28, its CRC 29..32, data 33..38.
  auto damaged = [&](size_t at) {
    std::string copy = bytes;
    copy[at] ^= 0x01;
    return TfRecordFile::Open(Write("damaged.tfrecord", copy)).status();
  };
  EXPECT_THAT(damaged(35), StatusIs(absl::StatusCode::kDataLoss,
                                    AllOf(HasSubstr("damaged.tfrecord: damaged record at byte offset 21"),
                                          HasSubstr("the data's CRC does not match"))));
  EXPECT_THAT(damaged(21),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("byte offset 21"), HasSubstr("the length's CRC"))));
  EXPECT_THAT(damaged(30), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("byte offset 21")));
  EXPECT_THAT(damaged(bytes.size() - 1), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("byte offset 43")));
  EXPECT_THAT(TfRecordFile::Open(Write("truncated.tfrecord", bytes.substr(0, bytes.size() - 2))).status(),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("byte offset 43"), HasSubstr("truncated"))));
  EXPECT_THAT(TfRecordFile::Open(Write("short_header.tfrecord", bytes + "\x05\0\0")).status(),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("byte offset 64"), HasSubstr("truncated"))));
  // In the decompressed stream of a GZIP file, and a damaged GZIP stream.
  std::string copy = bytes;
  copy[35] ^= 0x01;
  EXPECT_THAT(TfRecordFile::Open(Write("damaged.tfrecord.gz", Gzip(copy))).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("byte offset 21 of the decompressed stream")));
  const std::string gz = Gzip(bytes);
  EXPECT_THAT(TfRecordFile::Open(Write("cut.tfrecord.gz", gz.substr(0, gz.size() - 6))).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.tfrecord.gz: damaged GZIP data")));
  // A file damaged after it was indexed: the read checks the CRCs again.
  const std::string path = Write("later.tfrecord", bytes);
  auto file = TfRecordFile::Open(path);
  ASSERT_THAT(file.status(), IsOk());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << copy;
  EXPECT_EQ(*(*file)->Read(0), "first");
  EXPECT_THAT((*file)->Read(1).status(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("byte offset 21")));
}

TEST(TfExampleTest, TextFeaturesByName) {
  const std::string serialized = TextExample({{"question", "why?"}, {"answer", "because"}, {"id", "7"}});
  auto ex = ParseTfExample(serialized, {"question", "answer"});
  ASSERT_THAT(ex.status(), IsOk());
  EXPECT_EQ(*ex, (Example{{"question", "why?"}, {"answer", "because"}}));
  EXPECT_THAT(ParseTfExample(serialized, {"inputs"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no feature \"inputs\"; the example has: answer, id, question")));
  tfexample::Example other;
  auto& map = *other.mutable_features()->mutable_feature();
  map["ids"].mutable_int64_list()->add_value(5);
  map["score"].mutable_float_list()->add_value(0.5f);
  map["two"].mutable_bytes_list()->add_value("a");
  map["two"].mutable_bytes_list()->add_value("b");
  map["bad"].mutable_bytes_list()->add_value("\xff\xfe");
  const std::string s = other.SerializeAsString();
  EXPECT_THAT(ParseTfExample(s, {"ids"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"ids\" is int64_list, not text")));
  EXPECT_THAT(ParseTfExample(s, {"score"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"score\" is float_list")));
  EXPECT_THAT(ParseTfExample(s, {"two"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has 2 values; a text feature has one")));
  EXPECT_THAT(ParseTfExample(s, {"bad"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid UTF-8")));
  EXPECT_THAT(ParseTfExample("\xff\xff\xff", {"x"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a tf.train.Example")));
  // The wire format TensorFlow writes, by hand: Example{features{feature
  // {key: "t" value {bytes_list {value: "hi"}}}}}.
  const std::string wire("\x0a\x0d\x0a\x0b\x0a\x01t\x12\x06\x0a\x04\x0a\x02hi", 15);
  EXPECT_EQ(*ParseTfExample(wire, {"t"}), (Example{{"t", "hi"}}));
}

TEST(TfRecordSourceTest, ShardsInOrderAndBadExamples) {
  const std::string dir = ::testing::TempDir() + "/shards";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/train.tfrecord-00001-of-00002", std::ios::binary) << NumberRecords(3, 4);
  std::ofstream(dir + "/train.tfrecord-00000-of-00002", std::ios::binary) << Gzip(NumberRecords(0, 3));
  auto source = OpenTfRecordSource({dir + "/train.tfrecord-*-of-*"});
  ASSERT_THAT(source.status(), IsOk());
  ASSERT_EQ((*source)->size(), 7);
  for (int i = 6; i >= 0; --i) EXPECT_EQ(*(*source)->Get(i), Numbers(i)) << i;
  EXPECT_THAT((*source)->Get(7).status(), StatusCodeIs(absl::StatusCode::kOutOfRange));
  // Features by name, for a rekey to rename.
  FileSourceOptions targets_only;
  targets_only.fields = {"targets"};
  EXPECT_EQ(*(*OpenTfRecordSource({dir + "/train.tfrecord-*"}, targets_only))->Get(4),
            (Example{{"targets", NumberToWords(4)}}));
  // A record that is not an example with the features: strict names the
  // file, record and offset; lenient skips and counts it.
  const std::string mixed =
      Write("mixed.tfrecord", NumberRecords(0, 2) + FrameTfRecord(TextExample({{"x", "y"}})) + NumberRecords(2, 1));
  EXPECT_THAT(OpenTfRecordSource({mixed}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("mixed.tfrecord: record 2 at byte offset "),
                                                                 HasSubstr("no feature \"inputs\""))));
  FileSourceOptions lenient;
  lenient.strict = false;
  auto skipping = OpenTfRecordSource({mixed}, lenient);
  ASSERT_THAT(skipping.status(), IsOk());
  EXPECT_EQ((*skipping)->size(), 3);
  EXPECT_EQ((*skipping)->skipped(), 1);
  EXPECT_EQ(*(*skipping)->Get(2), Numbers(2));
  EXPECT_THAT(OpenTfRecordSource({dir + "/none-*.tfrecord"}).status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST(TfdsTest, SliceBoundsAreTfdss) {
  using Bounds = std::pair<int64_t, int64_t>;
  EXPECT_EQ(TfdsSliceBounds(false, 0, true, 95, true, 10), Bounds(0, 10));  // 9.5 rounds to even
  EXPECT_EQ(TfdsSliceBounds(false, 0, true, 25, true, 10), Bounds(0, 2));   // 2.5 too
  EXPECT_EQ(TfdsSliceBounds(true, 35, false, 0, true, 10), Bounds(4, 10));  // 3.5
  EXPECT_EQ(TfdsSliceBounds(true, 2, true, 5, false, 10), Bounds(2, 5));
  EXPECT_EQ(TfdsSliceBounds(true, -3, false, 0, false, 10), Bounds(7, 10));
  EXPECT_EQ(TfdsSliceBounds(false, 0, true, -10, true, 10), Bounds(0, 9));
  EXPECT_EQ(TfdsSliceBounds(true, 5, true, 500, false, 10), Bounds(5, 10));
  EXPECT_EQ(TfdsSliceBounds(true, 8, true, 3, false, 10), Bounds(8, 8));
}

TEST(TfdsTest, PreparedDirectoriesBySplitVersionAndSlice) {
  const std::string root = ::testing::TempDir() + "/tfds";
  for (const std::string version : {"1.0.0", "1.10.0", "1.9.0"}) {
    const std::string dir = root + "/toy/small/" + version;
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/dataset_info.json") << R"({"name": "toy", "version": ")" << version << R"(", "splits": [)"
                                              << R"({"name": "train", "shardLengths": ["3", "4"], "numBytes": "1"},)"
                                              << R"({"name": "test", "shardLengths": ["2"]}]})";
    std::ofstream(dir + "/features.json") << "{}";
    const int first = version == "1.10.0" ? 100 : 0;
    std::ofstream(dir + "/toy-train.tfrecord-00000-of-00002", std::ios::binary) << NumberRecords(first, 3);
    std::ofstream(dir + "/toy-train.tfrecord-00001-of-00002", std::ios::binary) << NumberRecords(first + 3, 4);
    std::ofstream(dir + "/toy-test.tfrecord-00000-of-00001", std::ios::binary) << NumberRecords(50, 2);
  }
  FileSourceOptions options;
  auto all = OpenTfdsSource("tfds:toy/small:1.0.0:train", root, options);
  ASSERT_THAT(all.status(), IsOk());
  ASSERT_EQ((*all)->size(), 7);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(*(*all)->Get(i), Numbers(i));
  auto newest = OpenTfdsSource("tfds:toy/small:train[2:4]", root, options);  // 1.10.0
  ASSERT_THAT(newest.status(), IsOk());
  ASSERT_EQ((*newest)->size(), 2);
  EXPECT_EQ(*(*newest)->Get(0), Numbers(102));
  EXPECT_THAT((*newest)->Get(2).status(), StatusCodeIs(absl::StatusCode::kOutOfRange));
  auto percent = OpenTfdsSource("tfds:toy/small:1.0.0:train[-50%:]", root, options);  // round(3.5) = 4
  ASSERT_THAT(percent.status(), IsOk());
  ASSERT_EQ((*percent)->size(), 4);
  EXPECT_EQ(*(*percent)->Get(0), Numbers(3));
  EXPECT_THAT(OpenTfdsSource("tfds:toy/small:1.0.0:validation", root, options).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no split \"validation\"; it has: train, test")));
  EXPECT_THAT(OpenTfdsSource("tfds:toy/big:train", root, options).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  std::ofstream(root + "/toy/small/1.0.0/toy-test.tfrecord-00000-of-00001", std::ios::binary) << NumberRecords(50, 3);
  EXPECT_THAT(OpenTfdsSource("tfds:toy/small:1.0.0:test", root, options).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("holds 3 examples; dataset_info.json says 2")));
}

}  // namespace
}  // namespace trainyard
