// Zarr v3 arrays built here byte by byte, read through an in-memory key
// reader: plain chunks (big-endian, a missing one filled), Orbax's sharded
// chunks with a CRC-32C index, and what is refused.
#include "checkpoint/zarr3.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/ocdbt.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

ZarrKeyReader MapReader(const std::map<std::string, std::string>& kv) {
  return [kv](const std::string& key) -> absl::StatusOr<std::optional<std::string>> {
    auto it = kv.find(key);
    if (it == kv.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  };
}

std::string Floats(const std::vector<float>& v, bool big_endian = false) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.data(), out.size());
  if (big_endian) {
    for (size_t i = 0; i < v.size(); ++i) std::reverse(&out[i * 4], &out[i * 4] + 4);
  }
  return out;
}

std::vector<float> AsFloats(const ZarrArray& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

std::string Le64(uint64_t v) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &v, 8);
  return out;
}

TEST(Zarr3Test, PlainChunksBigEndianAndFilled) {
  std::map<std::string, std::string> kv;
  kv["a/zarr.json"] = R"({"zarr_format": 3, "node_type": "array", "data_type": "float32", "shape": [3],
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": 7.5,
      "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]})";
  kv["a/c/0"] = Floats({1, 2}, /*big_endian=*/true);  // c/1 is missing: the fill value
  absl::StatusOr<ZarrArray> a = ReadZarr3Array("a", MapReader(kv));
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->dtype, "float32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(AsFloats(*a), (std::vector<float>{1, 2, 7.5f}));
}

// Orbax's layout: one sharding_indexed codec, inner chunks of 2x2 in a 2x4
// shard, the index (offset, length per inner chunk) at the end with its
// CRC-32C; the second inner chunk is missing.
std::map<std::string, std::string> Sharded() {
  std::map<std::string, std::string> kv;
  kv["s/zarr.json"] = R"({"zarr_format": 3, "node_type": "array", "data_type": "float32", "shape": [2, 3],
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
      "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}]})";
  const std::string inner = Floats({1, 2, 4, 5});
  const std::string index = Le64(0) + Le64(inner.size()) + Le64(UINT64_MAX) + Le64(UINT64_MAX);
  const uint32_t crc = Crc32c(index);
  std::string crc_bytes(4, '\0');
  std::memcpy(crc_bytes.data(), &crc, 4);
  kv["s/c/0/0"] = inner + index + crc_bytes;
  return kv;
}

TEST(Zarr3Test, ShardedChunksAsOrbaxWritesThem) {
  absl::StatusOr<ZarrArray> a = ReadZarr3Array("s", MapReader(Sharded()));
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(AsFloats(*a), (std::vector<float>{1, 2, 0, 4, 5, 0}));
}

TEST(Zarr3Test, RefusesWhatItCannotRead) {
  std::map<std::string, std::string> kv = Sharded();
  kv["s/c/0/0"][40] ^= 0x01;  // inside the index
  EXPECT_THAT(ReadZarr3Array("s", MapReader(kv)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("s/c/0/0: the shard index's CRC-32C does not match")));
  kv = Sharded();
  kv["s/c/0/0"] = kv["s/c/0/0"].substr(0, 20);
  EXPECT_THAT(ReadZarr3Array("s", MapReader(kv)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("s/c/0/0: 20 bytes, shorter than its index")));
  kv["t/zarr.json"] = R"({"zarr_format": 3, "node_type": "array", "data_type": "float32", "shape": [2],
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}, "fill_value": 0,
      "codecs": [{"name": "transpose", "configuration": {"order": [0]}}, {"name": "bytes"}]})";
  EXPECT_THAT(ReadZarr3Array("t", MapReader(kv)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t/zarr.json: codecs [")));
  kv["u/zarr.json"] = R"({"zarr_format": 3, "node_type": "array", "data_type": "uint8", "shape": [2]})";
  EXPECT_THAT(ReadZarr3Array("u", MapReader(kv)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_type \"uint8\" is not supported")));
  kv["w/zarr.json"] = R"({"zarr_format": 3, "node_type": "array", "data_type": "float32", "shape": [2],
      "chunk_grid": {"name": "regular", "configuration": 5}})";
  EXPECT_THAT(ReadZarr3Array("w", MapReader(kv)).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  kv["v2/zarr.json"] = R"({"zarr_format": 2})";
  EXPECT_THAT(ReadZarr3Array("v2", MapReader(kv)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a zarr v3 array")));
  EXPECT_THAT(ReadZarr3Array("none", MapReader(kv)).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none/zarr.json: cannot read")));
}

}  // namespace
}  // namespace trainyard
