// The MessagePack reader on every type's encodings and on broken input, zarr
// arrays with edge chunks, missing chunks, both byte orders and compressors,
// T5X checkpoints built here byte by byte as T5X lays them out, and T5X
// checkpoints written (layout, round trip, refusals).
#include "checkpoint/t5x_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/msgpack.h"
#include "checkpoint/zarr.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A minimal MessagePack writer for building inputs.
struct Pack {
  std::string out;
  Pack& Raw(std::initializer_list<int> bytes) {
    for (int b : bytes) out.push_back(static_cast<char>(b));
    return *this;
  }
  Pack& Be(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Pack& Str(const std::string& s) {
    if (s.size() < 32) {
      Raw({0xa0 | static_cast<int>(s.size())});
    } else {
      Raw({0xd9}).Be(s.size(), 1);
    }
    out += s;
    return *this;
  }
  Pack& Bin(const std::string& b) {
    Raw({0xc6}).Be(b.size(), 4);
    out += b;
    return *this;
  }
  Pack& Map(int n) { return Raw({0xde}).Be(n, 2); }
  Pack& Array(int n) { return Raw({0xdc}).Be(n, 2); }
  Pack& Int(int64_t v) { return Raw({0xd3}).Be(static_cast<uint64_t>(v), 8); }
  Pack& Ext(int type, const std::string& payload) {
    Raw({0xc9}).Be(payload.size(), 4).Raw({type});
    out += payload;
    return *this;
  }
  // flax's array: ext 1 of [shape, dtype, bytes].
  Pack& Array(const std::vector<int64_t>& shape, const std::string& dtype, const std::string& data, int ext = 1) {
    Pack p;
    p.Array(3).Array(static_cast<int>(shape.size()));
    for (int64_t d : shape) p.Int(d);
    p.Str(dtype).Bin(data);
    return Ext(ext, p.out);
  }
};

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string Gzip(const std::string& in, bool gzip = true) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  deflateInit2(&z, 1, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, in.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = in.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void Write(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<float> AsFloats(const ZarrArray& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

TEST(MsgpackTest, DecodesEveryType) {
  Pack p;
  p.Raw({0x9f});                                                                                // fixarray of 15
  p.Raw({0x05, 0xff, 0xcc, 0xc8, 0xcd, 0x01, 0x00, 0xd0, 0x80, 0xd2, 0xff, 0xff, 0xff, 0xfe});  // 5 -1 200 256 -128 -2
  p.Raw({0xcf}).Be(uint64_t{1} << 40, 8);
  p.Raw({0xca, 0x3f, 0xc0, 0x00, 0x00});        // 1.5f
  p.Raw({0xcb}).Be(0x4004000000000000ull, 8);   // 2.5
  p.Raw({0xc0, 0xc3});                          // nil, true
  p.Str("name").Raw({0xc4, 0x02, 0x00, 0x01});  // bin8 of 2
  p.Raw({0xd4, 0x03, 0x07});                    // fixext1
  p.Raw({0x81, 0xa1, 'k', 0x90});               // {"k": []}
  absl::StatusOr<MsgpackValue> v = DecodeMsgpack(p.out);
  ASSERT_THAT(v.status(), IsOk());
  ASSERT_EQ(v->items.size(), 15u);
  const std::vector<int64_t> ints = {5, -1, 200, 256, -128, -2, int64_t{1} << 40};
  for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(v->items[i].integer, ints[i]) << i;
  EXPECT_EQ(v->items[7].number, 1.5);
  EXPECT_EQ(v->items[8].number, 2.5);
  EXPECT_EQ(v->items[9].type, MsgpackValue::Type::kNil);
  EXPECT_TRUE(v->items[10].boolean);
  EXPECT_EQ(v->items[11].bytes, "name");
  EXPECT_EQ(v->items[12].bytes, std::string("\0\1", 2));
  EXPECT_EQ(v->items[13].ext_type, 3);
  EXPECT_EQ(v->items[13].bytes, "\x07");
  ASSERT_NE(v->items[14].Find("k"), nullptr);
  EXPECT_EQ(v->items[14].Find("k")->type, MsgpackValue::Type::kArray);
}

TEST(MsgpackTest, RefusesBrokenInput) {
  EXPECT_THAT(DecodeMsgpack(std::string("\xda\x00\x09"
                                        "abc",
                                        6))
                  .status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("at byte 3: needs 9 more bytes, 3 left")));
  EXPECT_THAT(DecodeMsgpack(std::string("\x01\x02", 2)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("1 bytes after the document's end")));
  EXPECT_THAT(DecodeMsgpack("\xc1").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("at byte 0: 0xc1 is not a MessagePack type")));
  // An array header claiming 2^32 - 1 elements in 5 bytes.
  EXPECT_THAT(DecodeMsgpack(std::string("\xdd\xff\xff\xff\xff", 5)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("needs 4294967295 more bytes")));
  EXPECT_THAT(DecodeMsgpack(std::string(100, '\x91') + "\x01").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("nested deeper than 64")));
  EXPECT_THAT(DecodeMsgpack(std::string("\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("above 2^63 - 1")));
}

class ZarrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
  }
  std::string root_;
};

// A 5x3 float32 array in 2x2 chunks: the edge chunks are stored whole.
TEST_F(ZarrTest, ReadsChunksIntoPlace) {
  const std::string dir = root_ + "/a";
  Write(
      dir + "/.zarray",
      R"({"zarr_format": 2, "shape": [5, 3], "chunks": [2, 2], "dtype": "<f4", "compressor": {"id": "gzip", "level": 1},
            "fill_value": null, "order": "C", "filters": null, "dimension_separator": "."})");
  for (int ci = 0; ci < 3; ++ci) {
    for (int cj = 0; cj < 2; ++cj) {
      if (ci == 1 && cj == 1) continue;  // missing: the fill value
      std::vector<float> chunk(4);
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) chunk[i * 2 + j] = 10.0f * (ci * 2 + i) + (cj * 2 + j);
      }
      Write(dir + "/" + std::to_string(ci) + "." + std::to_string(cj), Gzip(Floats(chunk)));
    }
  }
  absl::StatusOr<ZarrArray> a = ReadZarrArray(dir);
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->dtype, "float32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(AsFloats(*a), (std::vector<float>{0, 1, 2, 10, 11, 12, 20, 21, 0, 30, 31, 0, 40, 41, 42}));
}

TEST_F(ZarrTest, ReadsBigEndianZlibAndBfloat16) {
  Write(root_ + "/be/.zarray", R"({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": ">f4",
                                    "compressor": {"id": "zlib"}, "fill_value": 0, "order": "C"})");
  std::string be = Floats({1.5f, -2.0f});
  for (int e = 0; e < 2; ++e) std::reverse(&be[e * 4], &be[e * 4] + 4);
  Write(root_ + "/be/0", Gzip(be, /*gzip=*/false));
  absl::StatusOr<ZarrArray> a = ReadZarrArray(root_ + "/be");
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(AsFloats(*a), (std::vector<float>{1.5f, -2.0f}));

  Write(root_ + "/bf/.zarray", R"({"zarr_format": 2, "shape": [], "chunks": [], "dtype": "bfloat16",
                                    "compressor": null, "fill_value": null, "order": "C"})");
  Write(root_ + "/bf/0", std::string("\xc0\x3f", 2));  // 1.5 in bfloat16
  a = ReadZarrArray(root_ + "/bf");
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->dtype, "bfloat16");
  EXPECT_TRUE(a->shape.empty());
  EXPECT_EQ(a->data, std::string("\xc0\x3f", 2));
}

TEST_F(ZarrTest, RefusesWhatItCannotRead) {
  const std::string base = R"("zarr_format": 2, "shape": [4], "chunks": [4], "order": "C")";
  Write(root_ + "/blosc/.zarray", "{" + base + R"(, "dtype": "<f4", "compressor": {"id": "blosc"}})");
  EXPECT_THAT(
      ReadZarrArray(root_ + "/blosc").status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("blosc/.zarray: compressor {\"id\":\"blosc\"} is not supported; allowed: gzip, zlib")));
  Write(root_ + "/u2/.zarray", "{" + base + R"(, "dtype": "<u2", "compressor": null})");
  EXPECT_THAT(ReadZarrArray(root_ + "/u2").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype \"<u2\" is not supported")));
  Write(root_ + "/short/.zarray", "{" + base + R"(, "dtype": "<f4", "compressor": {"id": "gzip"}})");
  Write(root_ + "/short/0", Gzip(Floats({1, 2, 3})));
  EXPECT_THAT(ReadZarrArray(root_ + "/short").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("short/0: does not gunzip to the chunk's 16 bytes")));
  Write(root_ + "/huge/.zarray", R"({"zarr_format": 2, "shape": [1000000, 1000000], "chunks": [1000, 1000],
                                      "dtype": "<f4", "order": "C"})");
  EXPECT_THAT(ReadZarrArray(root_ + "/huge", uint64_t{1} << 30).status(),
              StatusCodeIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(ReadZarrArray(root_ + "/none").status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

// A T5X checkpoint: one parameter inline, one in TensorStore, the step as a
// numpy scalar, an empty leaf.
void WriteT5x(const std::string& dir, int64_t step, const std::string& ts_path = "target.dense.kernel") {
  Pack p;
  p.Map(2).Str("version").Int(3).Str("optimizer").Map(2);
  p.Str("state").Map(2).Str("step").Array({}, "int32", std::string("\x07\x00\x00\x00", 4), /*ext=*/3);
  p.Str("param_states").Map(1).Str("scale").Map(2).Str("v").Array({2}, "float32", Floats({0.5f, 0.25f}));
  p.Str("m").Raw({0xc0});
  p.Str("target").Map(2).Str("scale").Array({2}, "float32", Floats({1.0f, 2.0f}));
  p.Str("dense").Map(1).Str("kernel").Map(4).Str("driver").Str("zarr").Str("dtype").Str("float32");
  p.Str("kvstore").Map(2).Str("driver").Str("file").Str("path").Str(ts_path + "/");
  p.Str("metadata").Map(3).Str("chunks").Array(2).Int(2).Int(3).Str("compressor").Map(1).Str("id").Str("gzip");
  p.Str("shape").Array(2).Int(2).Int(3);
  Write(dir + "/checkpoint", p.out);
  Write(dir + "/target.dense.kernel/.zarray",
        R"({"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": "<f4", "compressor": {"id": "gzip"},
            "fill_value": null, "order": "C", "filters": null})");
  Write(dir + "/target.dense.kernel/0.0", Gzip(Floats({1, 2, 3, 4, 5, 6})));
  (void)step;
}

TEST_F(ZarrTest, ReadsAT5xCheckpoint) {
  WriteT5x(root_ + "/model/checkpoint_7", 7);
  fs::create_directories(root_ + "/model/checkpoint_9.tmp-1700000000");  // unfinished: not a checkpoint
  absl::StatusOr<T5xCheckpoint> ckpt = ReadT5xCheckpoint(root_ + "/model");
  ASSERT_THAT(ckpt.status(), IsOk());
  EXPECT_EQ(ckpt->dir, root_ + "/model/checkpoint_7");
  EXPECT_EQ(ckpt->version, 3);
  EXPECT_EQ(ckpt->step, 7);
  ASSERT_EQ(ckpt->target.size(), 2u);
  EXPECT_EQ(AsFloats(ckpt->target.at("scale")), (std::vector<float>{1, 2}));
  EXPECT_EQ(ckpt->target.at("dense/kernel").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(AsFloats(ckpt->target.at("dense/kernel")), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(ckpt->state.size(), 1u);  // the step is taken out; m is empty
  EXPECT_EQ(AsFloats(ckpt->state.at("param_states/scale/v")), (std::vector<float>{0.5f, 0.25f}));
  // The same through the step directory and through the file.
  EXPECT_EQ(ReadT5xCheckpoint(root_ + "/model/checkpoint_7")->step, 7);
  EXPECT_EQ(ReadT5xCheckpoint(root_ + "/model/checkpoint_7/checkpoint")->step, 7);
}

TEST_F(ZarrTest, RefusesT5xCheckpointsItCannotTrust) {
  WriteT5x(root_ + "/escape", 1, "../../etc");
  EXPECT_THAT(
      ReadT5xCheckpoint(root_ + "/escape").status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("escape/checkpoint: dense/kernel: TensorStore path \"../../etc\" leaves the checkpoint")));
  WriteT5x(root_ + "/absolute", 1, "/etc");
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/absolute").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not relative to the checkpoint directory")));
  // Orbax's format without its PyTree metadata in state/_METADATA.
  Write(root_ + "/orbax/_METADATA", "{}");
  Write(root_ + "/orbax/checkpoint", "x");
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/orbax").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("orbax: an Orbax-format checkpoint without a state/_METADATA")));
  Pack old;
  old.Map(1).Str("target").Map(0);
  Write(root_ + "/old/checkpoint", old.out);
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/old").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint version missing")));
  Write(root_ + "/cut/checkpoint", Pack().Map(2).Str("version").Int(3).out);
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/cut").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut/checkpoint: msgpack: at byte")));
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/nothing").status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

// One entry of an Orbax _METADATA's tree_metadata: the leaf's keys and
// value type.
std::string OrbaxLeaf(const std::vector<std::string>& keys, const std::string& type, bool skip = false) {
  std::string tuple, key_metadata;
  for (const std::string& k : keys) {
    tuple += (tuple.empty() ? "'" : ", '") + k + "'";
    key_metadata += std::string(key_metadata.empty() ? "" : ", ") + R"({"key": ")" + k + R"(", "key_type": 2})";
  }
  return "\"(" + tuple + ")\": {\"key_metadata\": [" + key_metadata + R"(], "value_metadata": {"value_type": ")" +
         type + R"(", "skip_deserialize": )" + (skip ? "true" : "false") + "}}";
}

// An Orbax checkpoint_<step> without OCDBT: state/_METADATA and a zarr v2
// directory per leaf (uncompressed, and gzip for the kernel).
void WriteOrbax(const std::string& dir, const std::string& extra_leaf = "") {
  const std::string item = dir + "/state";
  std::string leaves = OrbaxLeaf({"target", "dense", "kernel"}, "jax.Array") + ", " +
                       OrbaxLeaf({"state", "param_states", "dense", "kernel", "v_row"}, "np.ndarray") + ", " +
                       OrbaxLeaf({"state", "step"}, "scalar") + ", " +
                       OrbaxLeaf({"state", "param_states", "dense", "kernel", "m"}, "None");
  if (!extra_leaf.empty()) leaves += ", " + extra_leaf;
  Write(item + "/_METADATA",
        R"({"tree_metadata": {)" + leaves + R"(}, "use_ocdbt": false, "use_zarr3": false, "custom_metadata": null})");
  Write(item + "/target.dense.kernel/.zarray", R"({"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3],
      "dtype": "<f4", "compressor": {"id": "gzip", "level": 1}, "order": "C", "fill_value": null, "filters": null})");
  Write(item + "/target.dense.kernel/0.0", Gzip(Floats({1, 2, 3, 4, 5, 6})));
  Write(item + "/state.param_states.dense.kernel.v_row/.zarray", R"({"zarr_format": 2, "shape": [2], "chunks": [2],
      "dtype": "<f4", "compressor": null, "order": "C", "fill_value": null, "filters": null})");
  Write(item + "/state.param_states.dense.kernel.v_row/0", Floats({0.5f, 0.25f}));
  Write(item + "/state.step/.zarray", R"({"zarr_format": 2, "shape": [], "chunks": [], "dtype": "<i4",
      "compressor": null, "order": "C", "fill_value": null, "filters": null})");
  Write(item + "/state.step/0", std::string("\x09\x00\x00\x00", 4));
}

TEST_F(ZarrTest, ReadsOrbaxCheckpoints) {
  WriteOrbax(root_ + "/model/checkpoint_9");
  Write(root_ + "/model/checkpoint_9/_CHECKPOINT_METADATA", "{}");
  WriteT5x(root_ + "/model/checkpoint_3", 3);
  // The model directory's newest checkpoint is the Orbax one.
  absl::StatusOr<T5xCheckpoint> ckpt = ReadT5xCheckpoint(root_ + "/model");
  ASSERT_THAT(ckpt.status(), IsOk());
  EXPECT_EQ(ckpt->dir, root_ + "/model/checkpoint_9");
  EXPECT_EQ(ckpt->file, root_ + "/model/checkpoint_9/state/_METADATA");
  EXPECT_EQ(ckpt->step, 9);
  ASSERT_EQ(ckpt->target.size(), 1u);
  EXPECT_EQ(ckpt->target.at("dense/kernel").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(AsFloats(ckpt->target.at("dense/kernel")), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(ckpt->state.size(), 1u);  // the step taken out; m is empty (None)
  EXPECT_EQ(AsFloats(ckpt->state.at("param_states/dense/kernel/v_row")), (std::vector<float>{0.5f, 0.25f}));
  // The same through the step directory and through the state item.
  EXPECT_EQ(ReadT5xCheckpoint(root_ + "/model/checkpoint_9")->step, 9);
  EXPECT_EQ(ReadT5xCheckpoint(root_ + "/model/checkpoint_9/state")->step, 9);
}

TEST_F(ZarrTest, RefusesOrbaxLeavesItCannotRead) {
  WriteOrbax(root_ + "/text", OrbaxLeaf({"state", "note"}, "string"));
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/text").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("text/state/_METADATA: state/note: value_type \"string\"; allowed: jax.Array")));
  WriteOrbax(root_ + "/aggregate", OrbaxLeaf({"state", "extra"}, "np.ndarray", /*skip=*/true));
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/aggregate").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("('state', 'extra'): kept in the checkpoint's msgpack aggregate file")));
  WriteOrbax(root_ + "/escape", OrbaxLeaf({"state", ".."}, "np.ndarray"));
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/escape").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key \"..\" is not a plain name")));
  WriteOrbax(root_ + "/missing");
  fs::remove_all(root_ + "/missing/state/target.dense.kernel");
  EXPECT_THAT(
      ReadT5xCheckpoint(root_ + "/missing").status(),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("target/dense/kernel: " + root_ +
                                                      "/missing/state: target.dense.kernel/.zarray: cannot read")));
  WriteOrbax(root_ + "/ocdbt");
  std::string meta;
  {
    std::ifstream in(root_ + "/ocdbt/state/_METADATA");
    meta.assign(std::istreambuf_iterator<char>(in), {});
  }
  meta.replace(meta.find(R"("use_ocdbt": false)"), 18, R"("use_ocdbt": true)");
  Write(root_ + "/ocdbt/state/_METADATA", meta);
  EXPECT_THAT(ReadT5xCheckpoint(root_ + "/ocdbt").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ocdbt/state/manifest.ocdbt: missing")));
}

ZarrArray Array(const std::string& dtype, std::vector<int64_t> shape, int seed) {
  ZarrArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  size_t n = static_cast<size_t>(ZarrDtypeSize(dtype));
  for (int64_t d : a.shape) n *= static_cast<size_t>(d);
  for (size_t i = 0; i < n; ++i) a.data.push_back(static_cast<char>((i * 13 + seed) % 256));
  return a;
}

// A checkpoint as T5X's Adafactor leaves one: a factored kernel, an
// unfactored scale, the unused slots of shape [1].
T5xCheckpoint Adafactor(int64_t step) {
  T5xCheckpoint c;
  c.step = step;
  c.target["dense/kernel"] = Array("float32", {4, 6}, 1);
  c.target["layer_norm/scale"] = Array("bfloat16", {3}, 2);
  c.state["param_states/dense/kernel/v_row"] = Array("float32", {4}, 3);
  c.state["param_states/dense/kernel/v_col"] = Array("float32", {6}, 4);
  c.state["param_states/dense/kernel/v"] = Array("float32", {1}, 5);
  c.state["param_states/dense/kernel/m"] = Array("float32", {4, 6}, 6);
  c.state["param_states/layer_norm/scale/v_row"] = Array("float32", {1}, 7);
  c.state["param_states/layer_norm/scale/v_col"] = Array("float32", {1}, 8);
  c.state["param_states/layer_norm/scale/v"] = Array("float32", {3}, 9);
  c.state["param_states/layer_norm/scale/m"] = Array("float32", {1}, 10);
  return c;
}

std::vector<std::string> Keys(const MsgpackValue& map) {
  std::vector<std::string> out;
  for (const auto& [k, v] : map.entries) out.push_back(k.bytes);
  return out;
}

// The msgpack path `path` ('/'-separated) below `root`, or nullptr.
const MsgpackValue* At(const MsgpackValue& root, const std::string& path) {
  const MsgpackValue* node = &root;
  size_t begin = 0;
  while (node != nullptr && begin <= path.size()) {
    const size_t end = std::min(path.find('/', begin), path.size());
    node = node->Find(path.substr(begin, end - begin));
    begin = end + 1;
  }
  return node;
}

TEST_F(ZarrTest, WritesAT5xCheckpointThatReadsBack) {
  T5xWriteOptions options;
  options.chunk_bytes = 32;  // 8 float32s
  absl::StatusOr<std::string> dir = WriteT5xCheckpoint(Adafactor(1234), root_ + "/model", options);
  ASSERT_THAT(dir, IsOk());
  EXPECT_EQ(*dir, root_ + "/model/checkpoint_1234");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root_ + "/model")) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"checkpoint_1234"});  // no temporary directory left
  absl::StatusOr<T5xCheckpoint> back = ReadT5xCheckpoint(root_ + "/model");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->version, 3);
  EXPECT_EQ(back->step, 1234);
  const T5xCheckpoint want = Adafactor(1234);
  ASSERT_EQ(back->target.size(), want.target.size());
  ASSERT_EQ(back->state.size(), want.state.size());
  for (const auto* maps : {&want.target, &want.state}) {
    const auto& got = maps == &want.target ? back->target : back->state;
    for (const auto& [path, array] : *maps) {
      ASSERT_EQ(got.count(path), 1u) << path;
      EXPECT_EQ(got.at(path).dtype, array.dtype) << path;
      EXPECT_EQ(got.at(path).shape, array.shape) << path;
      EXPECT_TRUE(got.at(path).data == array.data) << path;
    }
  }
  // Chunked as T5X chooses: [4, 6] in at most 8 elements is [2, 3].
  for (const char* array : {"/target.dense.kernel", "/state.param_states.dense.kernel.m"}) {
    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(*dir + array)) files.insert(e.path().filename().string());
    EXPECT_EQ(files, (std::set<std::string>{".zarray", "0.0", "0.1", "1.0", "1.1"})) << array;
  }
}

TEST_F(ZarrTest, WritesT5xsLayout) {
  absl::StatusOr<std::string> dir = WriteT5xCheckpoint(Adafactor(7), root_ + "/model");
  ASSERT_THAT(dir, IsOk());
  std::ifstream in(*dir + "/checkpoint", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<MsgpackValue> doc = DecodeMsgpack(bytes);
  ASSERT_THAT(doc, IsOk());
  EXPECT_EQ(Keys(*doc), (std::vector<std::string>{"version", "optimizer"}));
  EXPECT_EQ(doc->Find("version")->integer, 3);
  EXPECT_EQ(Keys(*At(*doc, "optimizer")), (std::vector<std::string>{"state", "target"}));
  EXPECT_EQ(Keys(*At(*doc, "optimizer/state")), (std::vector<std::string>{"param_states", "step"}));
  EXPECT_EQ(Keys(*At(*doc, "optimizer/state/param_states/dense/kernel")),
            (std::vector<std::string>{"m", "v", "v_col", "v_row"}));
  // A parameter: TensorStore's spec of the zarr array it is in.
  const MsgpackValue* kernel = At(*doc, "optimizer/target/dense/kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(Keys(*kernel), (std::vector<std::string>{"driver", "dtype", "kvstore", "metadata"}));
  EXPECT_EQ(kernel->Find("driver")->bytes, "zarr");
  EXPECT_EQ(kernel->Find("dtype")->bytes, "float32");
  EXPECT_EQ(At(*kernel, "kvstore/driver")->bytes, "file");
  EXPECT_EQ(At(*kernel, "kvstore/path")->bytes, "target.dense.kernel/");
  EXPECT_EQ(Keys(*kernel->Find("metadata")), (std::vector<std::string>{"chunks", "compressor", "shape"}));
  EXPECT_EQ(At(*kernel, "metadata/compressor/id")->bytes, "gzip");
  EXPECT_EQ(At(*kernel, "metadata/compressor/level")->integer, 1);
  EXPECT_EQ(At(*kernel, "metadata/shape")->items.size(), 2u);
  EXPECT_EQ(At(*doc, "optimizer/target/layer_norm/scale/dtype")->bytes, "bfloat16");
  // Stored: full-size v and m. Inline (flax's ext 1): v_row, v_col, the
  // [1] slots and the step.
  const std::string slots = "optimizer/state/param_states/";
  EXPECT_EQ(At(*doc, slots + "dense/kernel/m/kvstore/path")->bytes, "state.param_states.dense.kernel.m/");
  EXPECT_EQ(At(*doc, slots + "layer_norm/scale/v/kvstore/path")->bytes, "state.param_states.layer_norm.scale.v/");
  for (const char* inline_leaf :
       {"dense/kernel/v_row", "dense/kernel/v_col", "dense/kernel/v", "layer_norm/scale/v_row", "layer_norm/scale/m"}) {
    const MsgpackValue* v = At(*doc, slots + inline_leaf);
    ASSERT_NE(v, nullptr) << inline_leaf;
    EXPECT_EQ(v->type, MsgpackValue::Type::kExt) << inline_leaf;
    EXPECT_EQ(v->ext_type, 1) << inline_leaf;
  }
  const MsgpackValue* step = At(*doc, "optimizer/state/step");
  ASSERT_EQ(step->type, MsgpackValue::Type::kExt);
  absl::StatusOr<MsgpackValue> payload = DecodeMsgpack(step->bytes);
  ASSERT_THAT(payload, IsOk());
  ASSERT_EQ(payload->items.size(), 3u);
  EXPECT_TRUE(payload->items[0].items.empty());  // a scalar
  EXPECT_EQ(payload->items[1].bytes, "int32");
  EXPECT_EQ(payload->items[2].bytes, std::string("\x07\x00\x00\x00", 4));
  // Nothing in the directory but the file and the stored arrays.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(*dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names,
            (std::set<std::string>{"checkpoint", "target.dense.kernel", "target.layer_norm.scale",
                                   "state.param_states.dense.kernel.m", "state.param_states.layer_norm.scale.v"}));
}

TEST_F(ZarrTest, RefusesWhatItMustNotWrite) {
  const std::string model = root_ + "/model";
  fs::create_directories(model + "/checkpoint_5");
  EXPECT_THAT(WriteT5xCheckpoint(Adafactor(5), model).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("checkpoint_5: already exists")));
  EXPECT_THAT(WriteT5xCheckpoint(Adafactor(int64_t{1} << 31), model).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside T5X's step")));
  T5xCheckpoint broken = Adafactor(6);
  broken.state["param_states/dense/kernel/v_row"].data.pop_back();
  EXPECT_THAT(WriteT5xCheckpoint(broken, model).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("state/param_states/dense/kernel/v_row: 15 bytes for shape [4] of float32")));
  T5xCheckpoint clash = Adafactor(6);
  clash.target["dense"] = Array("float32", {2}, 0);
  EXPECT_THAT(WriteT5xCheckpoint(clash, model).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target/dense")));
  // Only what was there before: the refused writes left nothing behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(model)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"checkpoint_5"});
}

}  // namespace
}  // namespace trainyard
