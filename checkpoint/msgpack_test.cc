// The MessagePack writer: the exact bytes of every encoding at the edges of
// its forms (as Python's msgpack packs them: flax's checkpoints), round
// trips through the reader, and what it refuses.
#include "checkpoint/msgpack.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using V = MsgpackValue;

// The encoding of `v` in hex.
std::string Hex(const MsgpackValue& v) {
  absl::StatusOr<std::string> bytes = EncodeMsgpack(v);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? absl::BytesToHexString(*bytes) : "";
}

// The first `n` hex digits of the encoding of `v`.
std::string HexPrefix(const MsgpackValue& v, size_t n) { return Hex(v).substr(0, n); }

V Bool(bool b) {
  V v;
  v.type = V::Type::kBool;
  v.boolean = b;
  return v;
}

TEST(EncodeMsgpackTest, NilBoolAndIntegersInTheirShortestForm) {
  EXPECT_EQ(Hex(V()), "c0");
  EXPECT_EQ(Hex(Bool(true)), "c3");
  EXPECT_EQ(Hex(Bool(false)), "c2");
  const std::pair<int64_t, const char*> cases[] = {
      {0, "00"},
      {127, "7f"},
      {128, "cc80"},
      {255, "ccff"},
      {256, "cd0100"},
      {65535, "cdffff"},
      {65536, "ce00010000"},
      {4294967295, "ceffffffff"},
      {4294967296, "cf0000000100000000"},
      {INT64_MAX, "cf7fffffffffffffff"},
      {-1, "ff"},
      {-32, "e0"},
      {-33, "d0df"},
      {-128, "d080"},
      {-129, "d1ff7f"},
      {-32768, "d18000"},
      {-32769, "d2ffff7fff"},
      {INT32_MIN, "d280000000"},
      {int64_t{INT32_MIN} - 1, "d3ffffffff7fffffff"},
      {INT64_MIN, "d38000000000000000"},
  };
  for (const auto& [n, hex] : cases) EXPECT_EQ(Hex(V::Int(n)), hex) << n;
}

TEST(EncodeMsgpackTest, FloatsAsFloat64) {
  EXPECT_EQ(Hex(V::Float(1.5)), "cb3ff8000000000000");
  EXPECT_EQ(Hex(V::Float(-0.0)), "cb8000000000000000");
}

TEST(EncodeMsgpackTest, StrAndBinLengths) {
  EXPECT_EQ(Hex(V::String("")), "a0");
  EXPECT_EQ(HexPrefix(V::String(std::string(31, 'a')), 4), "bf61");
  EXPECT_EQ(HexPrefix(V::String(std::string(32, 'a')), 6), "d92061");
  EXPECT_EQ(HexPrefix(V::String(std::string(255, 'a')), 6), "d9ff61");
  EXPECT_EQ(HexPrefix(V::String(std::string(256, 'a')), 8), "da010061");
  EXPECT_EQ(HexPrefix(V::String(std::string(65536, 'a')), 12), "db0001000061");
  EXPECT_EQ(Hex(V::Binary("")), "c400");
  EXPECT_EQ(Hex(V::Binary("xy")), "c4027879");
  EXPECT_EQ(HexPrefix(V::Binary(std::string(256, 'a')), 8), "c5010061");
  EXPECT_EQ(HexPrefix(V::Binary(std::string(65536, 'a')), 12), "c60001000061");
}

TEST(EncodeMsgpackTest, ExtUsesFixextForItsSizes) {
  const std::pair<size_t, const char*> cases[] = {
      {1, "d40161"},       {2, "d5016161"},      {3, "c70301616161"},  {4, "d60161616161"},
      {8, "d70161616161"}, {16, "d80161616161"}, {17, "c71101616161"}, {256, "c80100016161"},
  };
  for (const auto& [n, hex] : cases) EXPECT_EQ(HexPrefix(V::Ext(1, std::string(n, 'a')), 12), hex) << n;
  EXPECT_EQ(HexPrefix(V::Ext(-3, std::string(65536, 'a')), 14), "c900010000fd61");
}

TEST(EncodeMsgpackTest, ArraysAndMaps) {
  EXPECT_EQ(Hex(V::Array()), "90");
  std::vector<V> fifteen, sixteen;
  for (int i = 0; i < 15; ++i) fifteen.push_back(V::Int(i));
  sixteen = fifteen;
  sixteen.push_back(V::Int(15));
  EXPECT_EQ(HexPrefix(V::Array(fifteen), 6), "9f0001");
  EXPECT_EQ(HexPrefix(V::Array(sixteen), 10), "dc00100001");
  std::vector<V> many(65536, V());
  EXPECT_EQ(HexPrefix(V::Array(many), 12), "dd00010000c0");
  EXPECT_EQ(Hex(V::Map({{V::String("version"), V::Int(3)}})), "81a776657273696f6e03");
  std::vector<std::pair<V, V>> entries;
  for (int i = 0; i < 16; ++i) entries.emplace_back(V::String(std::to_string(i)), V::Int(i));
  EXPECT_EQ(HexPrefix(V::Map(entries), 10), "de0010a130");
  EXPECT_EQ(Hex(V::Map()), "80");
}

TEST(EncodeMsgpackTest, RoundTripsThroughTheReaderInOrder) {
  V array_leaf = V::Array({V::Array({V::Int(2), V::Int(3)}), V::String("float32"), V::Binary(std::string(24, '\1'))});
  V doc = V::Map({
      {V::String("version"), V::Int(3)},
      {V::String("optimizer"),
       V::Map({{V::String("target"), V::Map({{V::String("z"), V::Ext(1, "payload")}, {V::String("a"), V()}})},
               {V::String("state"), V::Map({{V::String("step"), V::Int(-70000)}, {V::String("f"), V::Float(0.25)}})},
               {V::String("list"), array_leaf},
               {V::String("flag"), Bool(true)}})},
  });
  absl::StatusOr<std::string> bytes = EncodeMsgpack(doc);
  ASSERT_THAT(bytes, IsOk());
  absl::StatusOr<V> decoded = DecodeMsgpack(*bytes);
  ASSERT_THAT(decoded, IsOk());
  const V& back = *decoded;
  // Encoding what was read gives the same bytes: nothing lost or reordered.
  EXPECT_THAT(EncodeMsgpack(back), IsOkAndHolds(*bytes));
  const V* optimizer = back.Find("optimizer");
  ASSERT_NE(optimizer, nullptr);
  ASSERT_EQ(optimizer->entries.size(), 4u);
  EXPECT_EQ(optimizer->entries[0].first.bytes, "target");
  const V* target = optimizer->Find("target");
  ASSERT_EQ(target->entries.size(), 2u);
  EXPECT_EQ(target->entries[0].first.bytes, "z");  // the order given, not sorted
  EXPECT_EQ(target->entries[0].second.type, V::Type::kExt);
  EXPECT_EQ(target->entries[0].second.ext_type, 1);
  EXPECT_EQ(target->entries[0].second.bytes, "payload");
  EXPECT_EQ(target->entries[1].second.type, V::Type::kNil);
  EXPECT_EQ(optimizer->Find("state")->Find("step")->integer, -70000);
  EXPECT_EQ(optimizer->Find("state")->Find("f")->number, 0.25);
  EXPECT_EQ(optimizer->Find("list")->items[2].bytes, std::string(24, '\1'));
  EXPECT_TRUE(optimizer->Find("flag")->boolean);
}

TEST(EncodeMsgpackTest, EveryIntegerRoundTrips) {
  for (int64_t base : {int64_t{0}, int64_t{1} << 7, int64_t{1} << 8, int64_t{1} << 15, int64_t{1} << 16,
                       int64_t{1} << 31, int64_t{1} << 32, int64_t{1} << 62}) {
    for (int64_t n : {base - 1, base, base + 1, -base - 1, -base, -base + 1}) {
      absl::StatusOr<std::string> bytes = EncodeMsgpack(V::Int(n));
      ASSERT_THAT(bytes, IsOk());
      absl::StatusOr<V> back = DecodeMsgpack(*bytes);
      ASSERT_THAT(back, IsOk());
      EXPECT_EQ(back->type, V::Type::kInt);
      EXPECT_EQ(back->integer, n);
    }
  }
}

TEST(EncodeMsgpackTest, RefusesNestingDeeperThanItsLimit) {
  V v = V::Int(1);
  for (int i = 0; i < 5; ++i) v = V::Array({v});
  EXPECT_THAT(EncodeMsgpack(v, 5), IsOk());
  EXPECT_THAT(EncodeMsgpack(v, 4).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deeper than 4")));
}

}  // namespace
}  // namespace trainyard
