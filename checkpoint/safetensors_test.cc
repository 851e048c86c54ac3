#include "checkpoint/safetensors.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A file written by hand: header length, JSON, data.
std::string RawFile(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const int64_t b[2] = {-7, 1LL << 40};
  const std::string path = TempPath("rt.safetensors");
  ASSERT_THAT(WriteSafetensors(path,
                               {{"layer.a", SafeDtype::kF32, {2, 3}, a},
                                {"b", SafeDtype::kI64, {2}, b},
                                {"empty", SafeDtype::kBF16, {0, 4}, nullptr}},
                               {{"format", "pt"}}),
              IsOk());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->tensors().size(), 3u);
  EXPECT_EQ((*reader)->tensors()[0].name, "b");  // sorted by name
  const SafeTensorInfo* info = (*reader)->Find("layer.a");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, SafeDtype::kF32);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp((*reader)->Data(*info), a, sizeof(a)), 0);
  const SafeTensorInfo* bi = (*reader)->Find("b");
  EXPECT_EQ(std::memcmp((*reader)->Data(*bi), b, sizeof(b)), 0);
  EXPECT_EQ((*reader)->metadata().at("format"), "pt");
  EXPECT_EQ((*reader)->Find("missing"), nullptr);
  // The data section starts 8-byte aligned.
  const std::string bytes = ReadFile(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
}

TEST(SafetensorsTest, TruncatedFileNamesTheTensor) {
  const float a[4] = {1, 2, 3, 4};
  const std::string path = TempPath("trunc.safetensors");
  ASSERT_THAT(WriteSafetensors(path, {{"weights", SafeDtype::kF32, {4}, a}}), IsOk());
  std::string bytes = ReadFile(path);
  WriteFile(path, bytes.substr(0, bytes.size() - 3));
  EXPECT_THAT(SafetensorsReader::Open(path).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor \"weights\": data_offsets [0, 16) outside the 13 data bytes")));
  WriteFile(path, bytes.substr(0, 20));  // cut inside the header
  EXPECT_THAT(SafetensorsReader::Open(path).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("exceeds the file")));
  WriteFile(path, "abc");
  EXPECT_THAT(SafetensorsReader::Open(path).status(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("only 3 bytes")));
}

TEST(SafetensorsTest, InconsistentHeadersAreRejected) {
  const std::string path = TempPath("bad.safetensors");
  const std::string data(16, '\0');
  struct Case {
    std::string json;
    std::string message;
  } cases[] = {
      {R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "16 bytes for 3 elements of F32"},
      {R"({"x":{"dtype":"Q8","shape":[4],"data_offsets":[0,16]}})", "unknown dtype \"Q8\""},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       "inside another tensor"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "8 bytes after the last tensor"},
      {R"({"x":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "bad dimension -4"},
      {R"({"x":{"dtype":"F32","shape":[4]}})", "needs dtype, shape and data_offsets"},
      {R"([1,2])", "not a JSON object"},
      {R"({"x":)", "header is not JSON"},
  };
  for (const Case& c : cases) {
    WriteFile(path, RawFile(c.json, data));
    EXPECT_THAT(SafetensorsReader::Open(path).status(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(c.message)))
        << c.json;
  }
}

TEST(SafetensorsTest, WriterRejectsDuplicateNamesAndLeavesNoFile) {
  const float a[1] = {1};
  const std::string path = TempPath("dup.safetensors");
  EXPECT_THAT(WriteSafetensors(path, {{"x", SafeDtype::kF32, {1}, a}, {"x", SafeDtype::kF32, {1}, a}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"x\" given twice")));
  EXPECT_THAT(SafetensorsReader::Open(path).status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST(SafetensorsTest, UnwritableDirectoryIsInternalAndNamesThePath) {
  const float a[1] = {1};
  EXPECT_THAT(WriteSafetensors("/nonexistent-dir/x.safetensors", {{"x", SafeDtype::kF32, {1}, a}}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("/nonexistent-dir/x.safetensors")));
}

}  // namespace
}  // namespace trainyard
