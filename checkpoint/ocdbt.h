// TensorStore's OCDBT key-value store (kvstore/ocdbt), read-only, from a
// directory on local disk: what Orbax writes with use_ocdbt=True.
//
//   manifest.ocdbt   the manifest: magic 0x0cdb3a2a, its length (uint64le),
//                    format version 0 and compression (uleb128: 0 none,
//                    1 zstd), the configuration, the data file table and
//                    the newest versions (B+tree roots), CRC-32C (uint32le)
//   <path>/<id>      data files (`d/...`, `ocdbt.process_<i>/d/...`)
//                    holding B+tree nodes (magic 0x0cdb20de) and values
//                    stored out of line
//
// The newest version's B+tree is read: interior and leaf nodes, keys
// prefix-compressed, values inline or by (data file, offset, length). Each
// data file path (the table's base path + relative path, nested below a
// node's base path) must stay inside the directory.
//
// Refused, naming the file: another magic, format version other than 0,
// compression other than none and zstd (kInvalidArgument; also the
// "numbered" manifest kind, whose versions live in other files); a
// CRC-32C that does not match, a length that is not the file's or the
// reference's, a truncated or inconsistent encoding (kDataLoss).
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_OCDBT_H_
#define TRAINYARD_CHECKPOINT_OCDBT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/crc32c.h"  // Crc32c: OCDBT's footers, zarr v3's crc32c codec

namespace trainyard {

// A uleb128 at `*pos` of `data`, `*pos` moved past it; nullopt when cut
// short or over 64 bits.
std::optional<uint64_t> ReadUleb128(absl::string_view data, size_t* pos);

// Where an encoded node or a value lies: a data file's path relative to the
// database's directory, an offset and a length.
struct OcdbtRef {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  // The path that the node's own data file table's paths are below (the
  // transitive base path).
  std::string base;
};

struct OcdbtManifest {
  int manifest_kind = 0;  // 0 single, 1 numbered
  uint64_t max_inline_value_bytes = 0;
  int compression = 0;  // of the configuration: 0 none, 1 zstd
  // The newest version's root B+tree node and height; nullopt for an empty
  // database.
  std::optional<OcdbtRef> root;
  int root_height = 0;
  uint64_t generation = 0;
};

// `bytes`, the whole of `file` (named in errors).
absl::StatusOr<OcdbtManifest> DecodeOcdbtManifest(absl::string_view bytes, const std::string& file);

struct OcdbtNode {
  int height = 0;
  // Leaf (height 0): each key (below `key_prefix`) and its value, inline or
  // by reference.
  struct Entry {
    std::string key;
    std::optional<std::string> value;  // inline
    OcdbtRef ref;                      // else
  };
  std::vector<Entry> entries;
  // Interior: each child's node and the prefix of every key below it.
  struct Child {
    std::string key_prefix;
    OcdbtRef ref;
  };
  std::vector<Child> children;
};

// An encoded B+tree node, `what` naming it in errors; `base` the transitive
// base path of its data file table, `key_prefix` the prefix its keys are
// below.
absl::StatusOr<OcdbtNode> DecodeOcdbtNode(absl::string_view bytes, const std::string& what, const std::string& base,
                                          const std::string& key_prefix);

// An OCDBT database in a directory: every key of its newest version.
class OcdbtStore {
 public:
  // Reads `dir`/manifest.ocdbt and the whole B+tree it names.
  static absl::StatusOr<OcdbtStore> Open(const std::string& dir);

  // The value of `key`; nullopt when the key is absent.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) const;

  const std::string& dir() const { return dir_; }
  std::vector<std::string> Keys() const;

 private:
  absl::Status Load(const OcdbtRef& ref, int height, const std::string& key_prefix, int depth);

  std::string dir_;
  std::map<std::string, OcdbtNode::Entry> entries_;
};

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_OCDBT_H_
