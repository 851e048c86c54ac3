// MessagePack (the format of T5X's and flax's checkpoint files).
//
// The reader decodes a whole document into a tree of values. Every length is
// checked against the bytes that remain before anything is allocated,
// nesting is bounded, and a document must end where its top-level value
// ends; errors are kDataLoss naming the byte offset and what was expected
// there.
//
// The writer encodes a tree deterministically, each value in its shortest
// form, as Python's msgpack packs it (flax's `to_bytes`, with
// use_bin_type): non-negative integers as positive fixint or uint 8/16/32/64,
// negative ones as negative fixint or int 8/16/32/64, floats as float 64,
// str and bin with the smallest length field, ext as fixext 1/2/4/8/16 when
// the payload has that size, else ext 8/16/32; map entries in the tree's
// order.
//
// Tensor-library free. Thread-safety: values are immutable once decoded.
#ifndef TRAINYARD_CHECKPOINT_MSGPACK_H_
#define TRAINYARD_CHECKPOINT_MSGPACK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

struct MsgpackValue {
  enum class Type { kNil, kBool, kInt, kFloat, kString, kBinary, kArray, kMap, kExt };
  Type type = Type::kNil;
  bool boolean = false;
  int64_t integer = 0;                                         // kInt (uint64 values above INT64_MAX are refused)
  double number = 0;                                           // kFloat (float32 widened)
  std::string bytes;                                           // kString, kBinary, kExt (the payload)
  int8_t ext_type = 0;                                         // kExt
  std::vector<MsgpackValue> items;                             // kArray
  std::vector<std::pair<MsgpackValue, MsgpackValue>> entries;  // kMap, in file order

  // For a kMap: the value under the string key `key`, or nullptr.
  const MsgpackValue* Find(absl::string_view key) const;
  // "nil", "map", ... for messages.
  const char* TypeName() const;

  // Values to build documents with.
  static MsgpackValue Int(int64_t v);
  static MsgpackValue Float(double v);
  static MsgpackValue String(std::string s);
  static MsgpackValue Binary(std::string b);
  static MsgpackValue Ext(int8_t type, std::string payload);
  static MsgpackValue Array(std::vector<MsgpackValue> items = {});
  static MsgpackValue Map(std::vector<std::pair<MsgpackValue, MsgpackValue>> entries = {});
};

// Decodes one document. `max_depth` bounds nesting (arrays, maps, and
// nothing deeper for an attacker to exhaust the stack with).
absl::StatusOr<MsgpackValue> DecodeMsgpack(absl::string_view data, int max_depth = 64);

// Encodes `value` (above). A str, bin, ext, array or map with 2^32 or more
// bytes or elements has no encoding (kInvalidArgument naming it); nesting
// deeper than `max_depth` is refused likewise.
absl::StatusOr<std::string> EncodeMsgpack(const MsgpackValue& value, int max_depth = 64);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_MSGPACK_H_
