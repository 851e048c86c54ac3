// The zarr writer: arrays written and read back (edge chunks in every
// dimension, every dtype, scalars, empty arrays), the files TensorStore
// writes for the same array (the same `.zarray` text, chunk names, gzip
// header, a zero-padded edge chunk), T5X's chunk shapes, and refusals.
#include "checkpoint/zarr.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/zarr_test_" + name;
  fs::remove_all(dir);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Gunzip(const std::string& in, size_t size) {
  std::string out(size, '\0');
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  inflateInit2(&z, 15 + 16);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(size);
  const int rc = inflate(&z, Z_FINISH);
  EXPECT_EQ(rc, Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

std::set<std::string> Files(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// An array of `dtype` and `shape` whose bytes are all different-ish.
ZarrArray Numbered(const std::string& dtype, std::vector<int64_t> shape) {
  ZarrArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  size_t n = static_cast<size_t>(ZarrDtypeSize(dtype));
  for (int64_t d : a.shape) n *= static_cast<size_t>(d);
  a.data.resize(n);
  for (size_t i = 0; i < n; ++i) a.data[i] = static_cast<char>((i * 7 + 3) % 251);
  return a;
}

void ExpectRoundTrip(const std::string& name, const ZarrArray& a, const std::vector<int64_t>& chunks,
                     const ZarrWriteOptions& options = {}) {
  const std::string dir = TempDir(name);
  ASSERT_THAT(WriteZarrArray(dir, a, chunks, options), IsOk());
  absl::StatusOr<ZarrArray> back = ReadZarrArray(dir);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->dtype, a.dtype);
  EXPECT_EQ(back->shape, a.shape);
  EXPECT_TRUE(back->data == a.data) << name;
}

TEST(WriteZarrArrayTest, WritesWhatTensorStoreWritesForTheSameArray) {
  // TensorStore 0.1.85, zarr driver, compressor {"id": "gzip"}, shape
  // [5, 7], chunks [2, 4], np.arange(35, dtype=float32).
  ZarrArray a;
  a.dtype = "float32";
  a.shape = {5, 7};
  std::vector<float> values(35);
  for (int i = 0; i < 35; ++i) values[i] = static_cast<float>(i);
  a.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  const std::string dir = TempDir("tensorstore");
  ASSERT_THAT(WriteZarrArray(dir, a, {2, 4}), IsOk());
  EXPECT_EQ(ReadFile(dir + "/.zarray"),
            "{\"chunks\":[2,4],\"compressor\":{\"id\":\"gzip\",\"level\":1},\"dimension_separator\":\".\","
            "\"dtype\":\"<f4\",\"fill_value\":null,\"filters\":null,\"order\":\"C\",\"shape\":[5,7],"
            "\"zarr_format\":2}");
  EXPECT_EQ(Files(dir), (std::set<std::string>{".zarray", "0.0", "0.1", "1.0", "1.1", "2.0", "2.1"}));
  const std::string edge = ReadFile(dir + "/2.1");
  // gzip, deflate, no flags, mtime 0, "fastest", Unix: TensorStore's header.
  EXPECT_EQ(edge.substr(0, 10), std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\x03", 10));
  // The edge chunk is whole: rows 4..5, columns 4..7 of which only [4, 4..6]
  // are in the array; the rest is zero.
  const std::string raw = Gunzip(edge, 32);
  ASSERT_EQ(raw.size(), 32u);
  std::vector<float> got(8);
  std::memcpy(got.data(), raw.data(), 32);
  EXPECT_THAT(got, ElementsAre(32, 33, 34, 0, 0, 0, 0, 0));
}

TEST(WriteZarrArrayTest, RoundTripsWithEdgeChunksInEveryDimension) {
  ExpectRoundTrip("f32_3d", Numbered("float32", {5, 3, 7}), {2, 2, 3});
  ExpectRoundTrip("bf16_2d", Numbered("bfloat16", {9, 10}), {4, 3});
  ExpectRoundTrip("f16_1d", Numbered("float16", {11}), {4});
  ExpectRoundTrip("f64_2d", Numbered("float64", {3, 3}), {2, 2});
  ExpectRoundTrip("i32_2d", Numbered("int32", {2, 5}), {1, 5});
  ExpectRoundTrip("i64_1d", Numbered("int64", {3}), {8});             // one chunk larger than the array
  ExpectRoundTrip("one_chunk", Numbered("float32", {6, 4}), {6, 4});  // exact
  ZarrWriteOptions unsynced;
  unsynced.sync = false;
  unsynced.gzip_level = 9;
  ExpectRoundTrip("unsynced", Numbered("float32", {7, 5}), {3, 2}, unsynced);
  const std::string level9 = TempDir("level9");
  ASSERT_THAT(WriteZarrArray(level9, Numbered("float32", {2}), {2}, unsynced), IsOk());
  EXPECT_THAT(ReadFile(level9 + "/.zarray"), HasSubstr("\"compressor\":{\"id\":\"gzip\",\"level\":9}"));
}

TEST(WriteZarrArrayTest, ChunkFilesFollowTheGridInCOrder) {
  const std::string dir = TempDir("grid");
  ASSERT_THAT(WriteZarrArray(dir, Numbered("float32", {3, 2, 5}), {2, 2, 2}), IsOk());
  EXPECT_EQ(Files(dir), (std::set<std::string>{".zarray", "0.0.0", "0.0.1", "0.0.2", "1.0.0", "1.0.1", "1.0.2"}));
}

TEST(WriteZarrArrayTest, ScalarsAndEmptyArrays) {
  const std::string scalar = TempDir("scalar");
  ASSERT_THAT(WriteZarrArray(scalar, Numbered("int32", {}), {}), IsOk());
  EXPECT_EQ(Files(scalar), (std::set<std::string>{".zarray", "0"}));
  ExpectRoundTrip("scalar_again", Numbered("float64", {}), {});
  const std::string empty = TempDir("empty");
  ASSERT_THAT(WriteZarrArray(empty, Numbered("float32", {0, 4}), {1, 4}), IsOk());
  EXPECT_EQ(Files(empty), (std::set<std::string>{".zarray"}));
  absl::StatusOr<ZarrArray> back = ReadZarrArray(empty);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->shape, (std::vector<int64_t>{0, 4}));
}

TEST(WriteZarrArrayTest, Refusals) {
  const std::string dir = TempDir("refused");
  fs::create_directories(dir);
  EXPECT_THAT(WriteZarrArray(dir, Numbered("float32", {2}), {2}),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("already exists")));
  EXPECT_TRUE(Files(dir).empty());
  ZarrArray short_data = Numbered("float32", {4});
  short_data.data.pop_back();
  const std::string short_dir = TempDir("short");
  EXPECT_THAT(WriteZarrArray(short_dir, short_data, {2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("15 bytes for shape [4] of float32")));
  EXPECT_FALSE(fs::exists(short_dir));  // refused before anything is written
  EXPECT_THAT(WriteZarrArray(TempDir("rank"), Numbered("float32", {4}), {2, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunks [2, 2] for shape [4]")));
  EXPECT_THAT(WriteZarrArray(TempDir("zero"), Numbered("float32", {4}), {0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunks [0]")));
  ZarrArray odd = Numbered("float32", {4});
  odd.dtype = "complex64";
  EXPECT_THAT(WriteZarrArray(TempDir("dtype"), odd, {4}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("complex64")));
}

// Orbax's zarr v2 arrays: zstd chunks, read through a key reader (as from
// an OCDBT database); a chunk that is not zstd, or too long, is refused by
// key.
TEST(ReadZarrArrayFromTest, ZstdChunksThroughAKeyReader) {
  std::map<std::string, std::string> kv;
  kv["a/.zarray"] = R"({"chunks": [2], "compressor": {"id": "zstd", "level": 1}, "dimension_separator": ".",
      "dtype": "<i4", "fill_value": null, "filters": null, "order": "C", "shape": [3], "zarr_format": 2})";
  auto zstd = [](const std::vector<int32_t>& v) {
    std::string out(ZSTD_compressBound(v.size() * 4), '\0');
    out.resize(ZSTD_compress(out.data(), out.size(), v.data(), v.size() * 4, 1));
    return out;
  };
  kv["a/0"] = zstd({7, -8});
  kv["a/1"] = zstd({9, 0});  // the edge chunk, stored whole
  const ZarrKeyReader read = [&kv](const std::string& key) -> absl::StatusOr<std::optional<std::string>> {
    auto it = kv.find(key);
    if (it == kv.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  };
  absl::StatusOr<ZarrArray> a = ReadZarrArrayFrom("a", read);
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->dtype, "int32");
  std::vector<int32_t> got(3);
  std::memcpy(got.data(), a->data.data(), 12);
  EXPECT_EQ(got, (std::vector<int32_t>{7, -8, 9}));
  kv["a/1"] = "plain bytes";
  EXPECT_THAT(ReadZarrArrayFrom("a", read).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("a/1: not zstd-compressed data")));
  kv["a/1"] = zstd({9, 0, 1});
  EXPECT_THAT(ReadZarrArrayFrom("a", read).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("a/1: decompresses to more than 8 bytes")));
  EXPECT_THAT(ReadZarrArrayFrom("b", read).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("b/.zarray: cannot read")));
}

TEST(ChooseZarrChunksTest, AsT5xChoosesThem) {
  // Values of T5X's _choose_chunk_shape for the same arguments.
  EXPECT_EQ(ChooseZarrChunks({512, 128}, 2048), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(ChooseZarrChunks({32128, 512}, 64 * 1024 * 1024 / 4), (std::vector<int64_t>{32128, 512}));
  EXPECT_EQ(ChooseZarrChunks({4, 32}, 2048), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(ChooseZarrChunks({3, 5, 7}, 10), (std::vector<int64_t>{3, 1, 1}));
  EXPECT_EQ(ChooseZarrChunks({6, 6}, 4), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ChooseZarrChunks({1000003}, 1000), (std::vector<int64_t>{1}));
  EXPECT_EQ(ChooseZarrChunks({}, 5), (std::vector<int64_t>{}));
  EXPECT_EQ(ChooseZarrChunks({128, 128}, 1024), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(ChooseZarrChunks({7, 1}, 3), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(ChooseZarrChunks({0, 4}, 2), (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace trainyard
