// OCDBT's encodings built here byte by byte as TensorStore lays them out:
// varints, CRC-32C, manifests (plain and zstd), leaf and interior B+tree
// nodes, a database on disk read through nested data file paths, and
// broken input refused with the file named.
#include "checkpoint/ocdbt.h"

#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Enc {
  std::string out;
  Enc& V(uint64_t v) {
    do {
      uint8_t b = v & 0x7f;
      v >>= 7;
      if (v != 0) b |= 0x80;
      out.push_back(static_cast<char>(b));
    } while (v != 0);
    return *this;
  }
  Enc& B(uint8_t b) {
    out.push_back(static_cast<char>(b));
    return *this;
  }
  Enc& S(const std::string& s) {
    out += s;
    return *this;
  }
  Enc& Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  // A data file table of whole paths, each with its base path's length.
  Enc& Table(const std::vector<std::pair<std::string, int>>& files) {
    V(files.size());
    for (size_t i = 1; i < files.size(); ++i) V(0);
    for (const auto& f : files) V(f.first.size());
    for (const auto& f : files) V(f.second);
    for (const auto& f : files) S(f.first);
    return *this;
  }
};

// Header (magic, length, version, compression), body, CRC-32C.
std::string Envelope(uint32_t magic, const std::string& body, uint64_t version = 0, uint64_t compression = 0) {
  Enc e;
  for (int i = 3; i >= 0; --i) e.B((magic >> (8 * i)) & 0xff);
  e.Le(0, 8).V(version).V(compression).S(body);
  const uint64_t length = e.out.size() + 4;
  for (int i = 0; i < 8; ++i) e.out[4 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return e.Le(Crc32c(e.out), 4).out;
}

constexpr uint32_t kManifest = 0x0cdb3a2a;
constexpr uint32_t kNode = 0x0cdb20de;

// A manifest's body: one data file holding the root of the one version.
std::string ManifestBody(const std::string& root_file, int base_length, uint64_t offset, uint64_t length,
                         uint64_t kind = 0, uint64_t num_keys = 2) {
  Enc e;
  e.S(std::string(16, '\x11')).V(kind).V(100).V(1 << 20).B(4).V(0);
  e.Table({{root_file, base_length}});
  e.V(1).V(5).B(1).V(0).V(offset).V(length).V(num_keys).V(123).V(11).Le(1700000000000000000, 8);
  e.V(0);  // no version tree nodes
  return e.out;
}

TEST(OcdbtTest, Varints) {
  auto read = [](const std::string& bytes) {
    size_t pos = 0;
    return ReadUleb128(bytes, &pos);
  };
  EXPECT_EQ(read(std::string(1, '\0')), uint64_t{0});
  EXPECT_EQ(read("\x7f"), uint64_t{127});
  EXPECT_EQ(read("\x80\x01"), uint64_t{128});
  EXPECT_EQ(read("\xe5\x8e\x26"), uint64_t{624485});
  EXPECT_EQ(read("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), UINT64_MAX);
  EXPECT_EQ(read("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02"), std::nullopt);  // 65 bits
  EXPECT_EQ(read("\x80"), std::nullopt);                                      // cut short
  EXPECT_EQ(read(""), std::nullopt);
  size_t pos = 0;
  const std::string two = "\x80\x01\x05";
  EXPECT_EQ(ReadUleb128(two, &pos), uint64_t{128});
  EXPECT_EQ(pos, 2u);
  EXPECT_EQ(ReadUleb128(two, &pos), uint64_t{5});
}

TEST(OcdbtTest, Crc32cCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);  // CRC-32C's standard check value
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(OcdbtTest, ManifestNamesTheNewestRoot) {
  const std::string m = Envelope(kManifest, ManifestBody("d/root", 2, 7, 99));
  absl::StatusOr<OcdbtManifest> got = DecodeOcdbtManifest(m, "x/manifest.ocdbt");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->root.has_value());
  EXPECT_EQ(got->root->file, "d/root");
  EXPECT_EQ(got->root->base, "d/");
  EXPECT_EQ(got->root->offset, 7u);
  EXPECT_EQ(got->root->length, 99u);
  EXPECT_EQ(got->root_height, 1);
  EXPECT_EQ(got->generation, 5u);
  EXPECT_EQ(got->max_inline_value_bytes, 100u);
  // No keys: an empty database.
  got = DecodeOcdbtManifest(Envelope(kManifest, ManifestBody("d/root", 2, 0, 0, 0, 0)), "x/manifest.ocdbt");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->root.has_value());
}

TEST(OcdbtTest, ZstdManifest) {
  const std::string body = ManifestBody("d/root", 2, 7, 99);
  std::string z(ZSTD_compressBound(body.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), body.data(), body.size(), 3));
  absl::StatusOr<OcdbtManifest> got = DecodeOcdbtManifest(Envelope(kManifest, z, 0, 1), "m");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->root->length, 99u);
  EXPECT_THAT(DecodeOcdbtManifest(Envelope(kManifest, "not zstd", 0, 1), "z/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("z/manifest.ocdbt: not zstd-compressed data")));
}

TEST(OcdbtTest, BrokenManifestsAreRefusedNamingTheFile) {
  const std::string good = Envelope(kManifest, ManifestBody("d/root", 2, 7, 99));
  std::string corrupt = good;
  corrupt[30] ^= 0x01;
  EXPECT_THAT(DecodeOcdbtManifest(corrupt, "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("db/manifest.ocdbt: CRC-32C 0x")));
  EXPECT_THAT(
      DecodeOcdbtManifest(good.substr(0, good.size() - 3), "db/manifest.ocdbt").status(),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr(absl::StrCat("db/manifest.ocdbt: the header says ", good.size(),
                                                                   " bytes, there are ", good.size() - 3))));
  EXPECT_THAT(DecodeOcdbtManifest(good.substr(0, 10), "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("10 bytes, too short for an OCDBT header")));
  const std::string body = ManifestBody("d/root", 2, 7, 99);
  EXPECT_THAT(DecodeOcdbtManifest(Envelope(kManifest, body.substr(0, 25)), "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("db/manifest.ocdbt: cut short (reading")));
  EXPECT_THAT(DecodeOcdbtManifest(Envelope(kManifest, body + "x"), "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("1 bytes after the version tree")));
  EXPECT_THAT(DecodeOcdbtManifest(Envelope(kNode, body), "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("magic 0x0cdb20de, not 0x0cdb3a2a")));
}

TEST(OcdbtTest, UnsupportedVersionsAndKindsAreRefused) {
  const std::string body = ManifestBody("d/root", 2, 7, 99);
  EXPECT_THAT(DecodeOcdbtManifest(Envelope(kManifest, body, 1), "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("db/manifest.ocdbt: OCDBT format version 1; only version 0 is read")));
  EXPECT_THAT(DecodeOcdbtManifest(Envelope(kManifest, body, 0, 2), "db/manifest.ocdbt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("db/manifest.ocdbt: OCDBT compression 2; allowed: 0 (none), 1 (zstd)")));
  EXPECT_THAT(
      DecodeOcdbtManifest(Envelope(kManifest, ManifestBody("d/root", 2, 7, 99, 1)), "db/manifest.ocdbt").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("db/manifest.ocdbt: OCDBT manifest kind 1")));
}

// A leaf: ".zarray" inline, "0" out of line in `file` at `offset`.
std::string LeafBody(const std::string& file, uint64_t offset, uint64_t length) {
  Enc e;
  e.B(0).Table({{file, 0}}).V(2);
  e.V(0);                           // key_prefix_length[1]
  e.V(7).V(1).S(".zarray").S("0");  // key suffix lengths, suffixes
  e.V(2).V(length).B(0).B(1);       // value lengths, kinds
  e.V(0).V(offset).S("{}");         // the indirect one's file and offset; the inline value
  return e.out;
}

TEST(OcdbtTest, LeafAndInteriorNodes) {
  absl::StatusOr<OcdbtNode> leaf = DecodeOcdbtNode(Envelope(kNode, LeafBody("data", 40, 11)), "n", "d/", "arr/");
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_EQ(leaf->height, 0);
  ASSERT_EQ(leaf->entries.size(), 2u);
  EXPECT_EQ(leaf->entries[0].key, "arr/.zarray");
  EXPECT_EQ(leaf->entries[0].value, std::optional<std::string>("{}"));
  EXPECT_EQ(leaf->entries[1].key, "arr/0");
  EXPECT_FALSE(leaf->entries[1].value.has_value());
  EXPECT_EQ(leaf->entries[1].ref.file, "d/data");
  EXPECT_EQ(leaf->entries[1].ref.offset, 40u);
  EXPECT_EQ(leaf->entries[1].ref.length, 11u);

  Enc e;
  e.B(1).Table({{"x/n1", 2}, {"x/n2", 2}}).V(2);
  e.V(1);                                // "ab" and "ac" share "a"
  e.V(2).V(1).V(2).V(1).S("ab").S("c");  // suffix lengths; subtree common prefixes 2, 1
  e.V(0).V(1).V(10).V(20).V(30).V(40);   // files, offsets, lengths
  e.V(1).V(1).V(9).V(9).V(0).V(0);       // statistics
  absl::StatusOr<OcdbtNode> interior = DecodeOcdbtNode(Envelope(kNode, e.out), "n", "", "p/");
  ASSERT_TRUE(interior.ok()) << interior.status();
  ASSERT_EQ(interior->children.size(), 2u);
  EXPECT_EQ(interior->children[0].key_prefix, "p/ab");
  EXPECT_EQ(interior->children[1].key_prefix, "p/a");
  EXPECT_EQ(interior->children[1].ref.file, "x/n2");
  EXPECT_EQ(interior->children[1].ref.base, "x/");
  EXPECT_EQ(interior->children[1].ref.offset, 20u);
  EXPECT_EQ(interior->children[1].ref.length, 40u);
}

TEST(OcdbtTest, BrokenNodesAreRefused) {
  Enc unordered;
  unordered.B(0).Table({}).V(2).V(0).V(1).V(1).S("b").S("a").V(1).V(1).B(0).B(0).S("xy");
  EXPECT_THAT(DecodeOcdbtNode(Envelope(kNode, unordered.out), "db/d/f (node)", "", "").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("db/d/f (node): key 1: keys out of order")));
  Enc escape;
  escape.B(0).Table({{"../../etc/passwd", 0}}).V(1).V(1).S("k").V(5).B(1).V(0).V(0);
  EXPECT_THAT(DecodeOcdbtNode(Envelope(kNode, escape.out), "n", "", "").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("leaves the database directory")));
  Enc bad_id;
  bad_id.B(0).Table({}).V(1).V(1).S("k").V(5).B(1).V(3).V(0);
  EXPECT_THAT(DecodeOcdbtNode(Envelope(kNode, bad_id.out), "n", "", "").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("data_file_id 3 with 0 data files")));
  Enc empty;
  empty.B(0).Table({}).V(0);
  EXPECT_THAT(DecodeOcdbtNode(Envelope(kNode, empty.out), "n", "", "").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("an empty B+tree node")));
}

class OcdbtStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::string(::testing::TempDir()) + "/ocdbt_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/d");
  }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  // d/root: an interior node whose one child, "arr/...", is the leaf in
  // d/data, which also holds the out-of-line value after it.
  void WriteDatabase(const std::string& value) {
    const std::string leaf = Envelope(kNode, LeafBody("data", 0, value.size()));
    const std::string fixed = Envelope(kNode, LeafBody("data", leaf.size(), value.size()));
    ASSERT_EQ(fixed.size(), leaf.size());
    Write("d/data", fixed + value);
    Enc root;
    root.B(1).Table({{"data", 0}}).V(1).V(4).V(4).S("arr/").V(0).V(0).V(fixed.size()).V(2).V(0).V(0);
    const std::string root_node = Envelope(kNode, root.out);
    Write("d/root", root_node);
    Write("manifest.ocdbt", Envelope(kManifest, ManifestBody("d/root", 2, 0, root_node.size())));
  }
  std::string dir_;
};

TEST_F(OcdbtStoreTest, ReadsEveryKeyThroughNestedPaths) {
  WriteDatabase("hello world");
  absl::StatusOr<OcdbtStore> store = OcdbtStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->Keys(), ElementsAre("arr/.zarray", "arr/0"));
  EXPECT_THAT(store->Get("arr/0"), IsOkAndHolds(std::optional<std::string>("hello world")));
  EXPECT_THAT(store->Get("arr/.zarray"), IsOkAndHolds(std::optional<std::string>("{}")));
  EXPECT_THAT(store->Get("arr/1"), IsOkAndHolds(std::optional<std::string>()));
}

TEST_F(OcdbtStoreTest, DamageIsRefusedNamingTheFile) {
  WriteDatabase("hello world");
  std::string data;
  {
    std::ifstream in(dir_ + "/d/data", std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  Write("d/data", data.substr(0, data.size() - 4));  // the value cut short
  absl::StatusOr<OcdbtStore> store = OcdbtStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->Get("arr/0").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("key \"arr/0\": " + dir_ + "/d/data: bytes ")));
  data[20] ^= 0x40;  // inside the leaf node
  Write("d/data", data);
  EXPECT_THAT(OcdbtStore::Open(dir_).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(dir_ + "/d/data (B+tree node at byte 0): CRC-32C")));
  fs::remove(dir_ + "/manifest.ocdbt");
  EXPECT_THAT(OcdbtStore::Open(dir_).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("manifest.ocdbt: cannot read")));
}

}  // namespace
}  // namespace trainyard
