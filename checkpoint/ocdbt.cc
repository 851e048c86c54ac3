#include "checkpoint/ocdbt.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/zstd.h"
#include "common/durable_file.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

constexpr uint32_t kManifestMagic = 0x0cdb3a2a;
constexpr uint32_t kBtreeNodeMagic = 0x0cdb20de;
// The most an encoded node or manifest may decompress to, and the most
// entries one may hold (TensorStore's own limits are smaller).
constexpr uint64_t kMaxDecodedBytes = uint64_t{1} << 28;
constexpr uint64_t kMaxEntries = uint64_t{1} << 20;
constexpr int kMaxDepth = 32;

// Reads the fields of an encoded structure in turn; a short read is
// kDataLoss naming `what_` and the field.
class Cursor {
 public:
  Cursor(absl::string_view data, std::string what) : data_(data), what_(std::move(what)) {}

  absl::StatusOr<uint64_t> Varint(const char* field) {
    std::optional<uint64_t> v = ReadUleb128(data_, &pos_);
    if (!v.has_value()) return Short(field);
    return *v;
  }
  // A varint that must be at most `max` (a count or a length).
  absl::StatusOr<uint64_t> Count(const char* field, uint64_t max) {
    TY_ASSIGN_OR_RETURN(const uint64_t v, Varint(field));
    if (v > max) return absl::DataLossError(absl::StrCat(what_, ": ", field, " ", v, " is more than ", max));
    return v;
  }
  absl::StatusOr<uint8_t> Byte(const char* field) {
    if (pos_ >= data_.size()) return Short(field);
    return static_cast<uint8_t>(data_[pos_++]);
  }
  absl::StatusOr<absl::string_view> Bytes(uint64_t n, const char* field) {
    if (n > data_.size() - pos_) return Short(field);
    absl::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  absl::StatusOr<uint64_t> Fixed(int bytes, const char* field) {  // little-endian
    TY_ASSIGN_OR_RETURN(absl::string_view raw, Bytes(bytes, field));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(raw[i]);
    return v;
  }
  size_t left() const { return data_.size() - pos_; }
  const std::string& what() const { return what_; }
  absl::Status Error(const std::string& message) const {
    return absl::DataLossError(absl::StrCat(what_, ": ", message));
  }

 private:
  absl::Status Short(const char* field) const {
    return absl::DataLossError(absl::StrCat(what_, ": cut short (reading ", field, " at byte ", pos_, ")"));
  }

  absl::string_view data_;
  size_t pos_ = 0;
  std::string what_;
};

// The body of an encoded manifest or node: header (magic, length, version,
// compression) and CRC-32C footer checked, decompressed.
absl::StatusOr<std::string> Unwrap(absl::string_view bytes, uint32_t magic, const std::string& what) {
  if (bytes.size() < 4 + 8 + 2 + 4) {
    return absl::DataLossError(absl::StrCat(what, ": ", bytes.size(), " bytes, too short for an OCDBT header"));
  }
  uint32_t found = 0;
  for (int i = 0; i < 4; ++i) found = (found << 8) | static_cast<uint8_t>(bytes[i]);
  if (found != magic) {
    return absl::DataLossError(absl::StrCat(what, ": magic 0x", absl::Hex(found, absl::kZeroPad8), ", not 0x",
                                            absl::Hex(magic, absl::kZeroPad8)));
  }
  Cursor c(bytes.substr(4, bytes.size() - 8), what);
  TY_ASSIGN_OR_RETURN(const uint64_t length, c.Fixed(8, "length"));
  if (length != bytes.size()) {
    return absl::DataLossError(absl::StrCat(what, ": the header says ", length, " bytes, there are ", bytes.size()));
  }
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(bytes[bytes.size() - 4 + i]);
  const uint32_t computed = Crc32c(bytes.substr(0, bytes.size() - 4));
  if (stored != computed) {
    return absl::DataLossError(absl::StrCat(what, ": CRC-32C 0x", absl::Hex(computed, absl::kZeroPad8),
                                            ", the footer says 0x", absl::Hex(stored, absl::kZeroPad8)));
  }
  TY_ASSIGN_OR_RETURN(const uint64_t version, c.Varint("version"));
  if (version != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": OCDBT format version ", version, "; only version 0 is read"));
  }
  TY_ASSIGN_OR_RETURN(const uint64_t compression, c.Varint("compression"));
  const size_t header = bytes.size() - 4 - c.left();
  absl::string_view body = bytes.substr(header, bytes.size() - 4 - header);
  if (compression == 0) return std::string(body);
  if (compression == 1) return ZstdDecompress(body, kMaxDecodedBytes, what);
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": OCDBT compression ", compression, "; allowed: 0 (none), 1 (zstd)"));
}

// A data file path: relative, without "..", at most 65535 bytes.
absl::Status CheckPath(const std::string& path, const std::string& what) {
  if (path.empty() || path.size() > 65535 || path[0] == '/') {
    return absl::DataLossError(absl::StrCat(what, ": data file path \"", path, "\" is not a relative path"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::DataLossError(absl::StrCat(what, ": data file path \"", path, "\" leaves the database directory"));
    }
  }
  return absl::OkStatus();
}

// A data file table: each file's {path, base path}, below `base`.
absl::StatusOr<std::vector<OcdbtRef>> ReadFileTable(Cursor& c, const std::string& base) {
  TY_ASSIGN_OR_RETURN(const uint64_t n, c.Count("num_files", std::min<uint64_t>(kMaxEntries, c.left())));
  std::vector<uint64_t> prefix(n, 0), suffix(n), base_length(n);
  for (uint64_t i = 1; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(prefix[i], c.Count("path_prefix_length", 65535));
  }
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(suffix[i], c.Count("path_suffix_length", 65535));
  }
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(base_length[i], c.Count("base_path_length", 65535));
  }
  std::vector<OcdbtRef> files(n);
  std::string path, previous;
  for (uint64_t i = 0; i < n; ++i) {
    if (prefix[i] > previous.size()) return c.Error(absl::StrCat("data file ", i, ": prefix past the previous path"));
    TY_ASSIGN_OR_RETURN(absl::string_view s, c.Bytes(suffix[i], "path_suffix"));
    path = absl::StrCat(previous.substr(0, prefix[i]), s);
    if (base_length[i] > path.size()) return c.Error(absl::StrCat("data file ", i, ": base path past its path"));
    files[i].file = base + path;
    files[i].base = base + path.substr(0, base_length[i]);
    TY_RETURN_IF_ERROR(CheckPath(files[i].file, c.what()));
    previous = path;
  }
  return files;
}

// `n` references' data file ids, offsets and, if `lengths`, lengths
// (column by column), into `refs`.
absl::Status ReadRefs(Cursor& c, const std::vector<OcdbtRef>& table, uint64_t n, bool lengths,
                      std::vector<OcdbtRef>* refs) {
  refs->resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(const uint64_t id, c.Varint("data_file_id"));
    if (id >= table.size()) {
      return c.Error(absl::StrCat("data_file_id ", id, " with ", table.size(), " data files"));
    }
    (*refs)[i].file = table[id].file;
    (*refs)[i].base = table[id].base;
  }
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN((*refs)[i].offset, c.Varint("data_file_offset"));
  }
  for (uint64_t i = 0; lengths && i < n; ++i) {
    TY_ASSIGN_OR_RETURN((*refs)[i].length, c.Varint("data_file_length"));
  }
  for (const OcdbtRef& r : *refs) {
    if (r.offset > (uint64_t{1} << 62) || r.length > (uint64_t{1} << 62)) return c.Error("an absurd offset or length");
  }
  return absl::OkStatus();
}

// The manifest's newest version (the last of its inline versions).
absl::Status ReadVersions(Cursor& c, OcdbtManifest* out) {
  TY_ASSIGN_OR_RETURN(const std::vector<OcdbtRef> table, ReadFileTable(c, ""));
  TY_ASSIGN_OR_RETURN(const uint64_t n, c.Count("num_versions", std::min<uint64_t>(kMaxEntries, c.left())));
  std::vector<uint64_t> generation(n), num_keys(n);
  std::vector<uint8_t> height(n);
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(generation[i], c.Varint("generation_number"));
  }
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(height[i], c.Byte("root_height"));
  }
  std::vector<OcdbtRef> roots;
  TY_RETURN_IF_ERROR(ReadRefs(c, table, n, /*lengths=*/true, &roots));
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(num_keys[i], c.Varint("num_keys"));
  }
  for (uint64_t i = 0; i < 2 * n; ++i) TY_RETURN_IF_ERROR(c.Varint("num_tree_bytes").status());
  for (uint64_t i = 0; i < n; ++i) TY_RETURN_IF_ERROR(c.Fixed(8, "commit_time").status());
  for (uint64_t i = 1; i < n; ++i) {
    if (generation[i] <= generation[i - 1]) return c.Error("generation numbers not increasing");
  }
  if (n == 0) return absl::OkStatus();
  out->generation = generation[n - 1];
  out->root_height = height[n - 1];
  if (num_keys[n - 1] > 0) out->root = roots[n - 1];
  return absl::OkStatus();
}

// The version tree nodes of older versions, checked for form and skipped.
absl::Status SkipVersionNodes(Cursor& c) {
  TY_ASSIGN_OR_RETURN(const uint64_t n, c.Count("num_children", std::min<uint64_t>(kMaxEntries, c.left())));
  for (uint64_t i = 0; i < 5 * n; ++i) TY_RETURN_IF_ERROR(c.Varint("version node").status());
  for (uint64_t i = 0; i < n; ++i) TY_RETURN_IF_ERROR(c.Fixed(8, "commit_time").status());
  for (uint64_t i = 0; i < n; ++i) TY_RETURN_IF_ERROR(c.Byte("entry_height").status());
  return absl::OkStatus();
}

}  // namespace

std::optional<uint64_t> ReadUleb128(absl::string_view data, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= data.size()) return std::nullopt;
    const uint8_t b = static_cast<uint8_t>(data[(*pos)++]);
    if (shift == 63 && (b & 0x7e) != 0) return std::nullopt;  // past 64 bits
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return std::nullopt;
}

absl::StatusOr<OcdbtManifest> DecodeOcdbtManifest(absl::string_view bytes, const std::string& file) {
  TY_ASSIGN_OR_RETURN(const std::string body, Unwrap(bytes, kManifestMagic, file));
  Cursor c(body, file);
  OcdbtManifest out;
  TY_RETURN_IF_ERROR(c.Bytes(16, "uuid").status());
  TY_ASSIGN_OR_RETURN(const uint64_t kind, c.Varint("manifest_kind"));
  if (kind != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": OCDBT manifest kind ", kind,
                                                   "; only 0 (single: the versions in manifest.ocdbt) is read"));
  }
  TY_ASSIGN_OR_RETURN(out.max_inline_value_bytes, c.Varint("max_inline_value_bytes"));
  TY_RETURN_IF_ERROR(c.Varint("max_decoded_node_bytes").status());
  TY_ASSIGN_OR_RETURN(const uint8_t arity_log2, c.Byte("version_tree_arity_log2"));
  if (arity_log2 == 0 || arity_log2 > 16) return c.Error(absl::StrCat("version_tree_arity_log2 ", arity_log2));
  TY_ASSIGN_OR_RETURN(const uint64_t compression, c.Varint("compression_method"));
  if (compression > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": OCDBT compression method ", compression, "; allowed: 0 (none), 1 (zstd)"));
  }
  out.compression = static_cast<int>(compression);
  if (compression == 1) TY_RETURN_IF_ERROR(c.Fixed(4, "zstd level").status());
  TY_RETURN_IF_ERROR(ReadVersions(c, &out));
  TY_RETURN_IF_ERROR(SkipVersionNodes(c));
  if (c.left() != 0) return c.Error(absl::StrCat(c.left(), " bytes after the version tree"));
  return out;
}

namespace {

// A node's keys (prefix-compressed, relative to the node), and for an
// interior node each key's subtree_common_prefix_length.
absl::Status ReadKeys(Cursor& c, uint64_t n, bool interior, std::vector<std::string>* keys,
                      std::vector<uint64_t>* common) {
  std::vector<uint64_t> prefix(n, 0), suffix(n);
  for (uint64_t i = 1; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(prefix[i], c.Count("key_prefix_length", 65535));
  }
  for (uint64_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(suffix[i], c.Count("key_suffix_length", 65535));
  }
  common->assign(n, 0);
  for (uint64_t i = 0; interior && i < n; ++i) {
    TY_ASSIGN_OR_RETURN((*common)[i], c.Count("subtree_common_prefix_length", 65535));
  }
  keys->resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const std::string& previous = i == 0 ? std::string() : (*keys)[i - 1];
    if (prefix[i] > previous.size()) return c.Error(absl::StrCat("key ", i, ": prefix past the previous key"));
    TY_ASSIGN_OR_RETURN(absl::string_view s, c.Bytes(suffix[i], "key_suffix"));
    (*keys)[i] = absl::StrCat(previous.substr(0, prefix[i]), s);
    if (i > 0 && (*keys)[i] <= previous) return c.Error(absl::StrCat("key ", i, ": keys out of order"));
    if ((*common)[i] > (*keys)[i].size()) return c.Error(absl::StrCat("key ", i, ": common prefix past the key"));
  }
  return absl::OkStatus();
}

// A leaf's values: lengths, kinds (0 inline, 1 out of line), the out of
// line ones' references, the inline ones' bytes.
absl::Status ReadLeafValues(Cursor& c, const std::vector<OcdbtRef>& table, std::vector<OcdbtNode::Entry>* entries) {
  const size_t n = entries->size();
  std::vector<uint64_t> length(n);
  std::vector<uint8_t> kind(n);
  for (size_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(length[i], c.Varint("value_length"));
  }
  uint64_t indirect = 0;
  for (size_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(kind[i], c.Byte("value_kind"));
    if (kind[i] > 1) return c.Error(absl::StrCat("value_kind ", kind[i], " (0 inline, 1 out of line)"));
    indirect += kind[i];
  }
  std::vector<OcdbtRef> refs;
  TY_RETURN_IF_ERROR(ReadRefs(c, table, indirect, /*lengths=*/false, &refs));
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    OcdbtNode::Entry& e = (*entries)[i];
    if (kind[i] == 1) {
      e.ref = refs[next++];
      e.ref.length = length[i];
    } else {
      TY_ASSIGN_OR_RETURN(absl::string_view v, c.Bytes(length[i], "value"));
      e.value = std::string(v);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OcdbtNode> DecodeOcdbtNode(absl::string_view bytes, const std::string& what, const std::string& base,
                                          const std::string& key_prefix) {
  TY_ASSIGN_OR_RETURN(const std::string body, Unwrap(bytes, kBtreeNodeMagic, what));
  Cursor c(body, what);
  OcdbtNode node;
  TY_ASSIGN_OR_RETURN(node.height, c.Byte("height"));
  TY_ASSIGN_OR_RETURN(const std::vector<OcdbtRef> table, ReadFileTable(c, base));
  TY_ASSIGN_OR_RETURN(const uint64_t n, c.Count("num_entries", std::min<uint64_t>(kMaxEntries, c.left())));
  if (n == 0) return c.Error("an empty B+tree node");
  std::vector<std::string> keys;
  std::vector<uint64_t> common;
  TY_RETURN_IF_ERROR(ReadKeys(c, n, node.height > 0, &keys, &common));
  if (node.height == 0) {
    node.entries.resize(n);
    for (uint64_t i = 0; i < n; ++i) node.entries[i].key = key_prefix + keys[i];
    TY_RETURN_IF_ERROR(ReadLeafValues(c, table, &node.entries));
  } else {
    std::vector<OcdbtRef> refs;
    TY_RETURN_IF_ERROR(ReadRefs(c, table, n, /*lengths=*/true, &refs));
    for (uint64_t i = 0; i < 3 * n; ++i) TY_RETURN_IF_ERROR(c.Varint("statistics").status());
    for (uint64_t i = 0; i < n; ++i) {
      node.children.push_back({key_prefix + keys[i].substr(0, common[i]), refs[i]});
    }
  }
  if (c.left() != 0) return c.Error(absl::StrCat(c.left(), " bytes after the node's entries"));
  return node;
}

namespace {

absl::StatusOr<std::string> ReadRange(const std::string& dir, const OcdbtRef& ref) {
  const std::string path = dir + "/" + ref.file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return FileError("stat", path, error);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (ref.offset > size || ref.length > size - ref.offset) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": bytes ", ref.offset, " to ", ref.offset + ref.length,
                                            " referenced; the file has ", size));
  }
  std::string out(ref.length, '\0');
  uint64_t done = 0;
  while (done < ref.length) {
    const ssize_t got = ::pread(fd, out.data() + done, ref.length - done, static_cast<off_t>(ref.offset + done));
    if (got <= 0) {
      const int error = got < 0 ? errno : EIO;
      ::close(fd);
      return FileError("read", path, error);
    }
    done += static_cast<uint64_t>(got);
  }
  ::close(fd);
  return out;
}

}  // namespace

absl::StatusOr<OcdbtStore> OcdbtStore::Open(const std::string& dir) {
  const std::string file = dir + "/manifest.ocdbt";
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(file, ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  TY_ASSIGN_OR_RETURN(const OcdbtManifest manifest, DecodeOcdbtManifest(s.str(), file));
  OcdbtStore store;
  store.dir_ = dir;
  if (manifest.root.has_value()) TY_RETURN_IF_ERROR(store.Load(*manifest.root, manifest.root_height, "", 0));
  return store;
}

absl::Status OcdbtStore::Load(const OcdbtRef& ref, int height, const std::string& key_prefix, int depth) {
  if (depth > kMaxDepth) return absl::DataLossError(absl::StrCat(dir_, "/", ref.file, ": B+tree deeper than 32"));
  TY_RETURN_IF_ERROR(CheckPath(ref.file, dir_));
  TY_ASSIGN_OR_RETURN(const std::string bytes, ReadRange(dir_, ref));
  const std::string what = absl::StrCat(dir_, "/", ref.file, " (B+tree node at byte ", ref.offset, ")");
  TY_ASSIGN_OR_RETURN(OcdbtNode node, DecodeOcdbtNode(bytes, what, ref.base, key_prefix));
  if (node.height != height) {
    return absl::DataLossError(absl::StrCat(what, ": height ", node.height, "; its parent says ", height));
  }
  for (OcdbtNode::Entry& e : node.entries) {
    const std::string key = e.key;
    if (!entries_.emplace(key, std::move(e)).second) {
      return absl::DataLossError(absl::StrCat(what, ": key \"", key, "\" twice"));
    }
  }
  for (const OcdbtNode::Child& child : node.children) {
    TY_RETURN_IF_ERROR(Load(child.ref, height - 1, child.key_prefix, depth + 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> OcdbtStore::Get(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::optional<std::string>();
  if (it->second.value.has_value()) return it->second.value;
  TY_RETURN_IF_ERROR(CheckPath(it->second.ref.file, dir_));
  absl::StatusOr<std::string> value = ReadRange(dir_, it->second.ref);
  if (!value.ok()) {
    return absl::Status(value.status().code(), absl::StrCat("key \"", key, "\": ", value.status().message()));
  }
  return std::optional<std::string>(std::move(*value));
}

std::vector<std::string> OcdbtStore::Keys() const {
  std::vector<std::string> out;
  for (const auto& [key, entry] : entries_) out.push_back(key);
  return out;
}

}  // namespace trainyard
