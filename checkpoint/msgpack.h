// A MessagePack reader (the format of T5X's and flax's checkpoint files):
// the whole document decoded into a tree of values. Every length is checked
// against the bytes that remain before anything is allocated, nesting is
// bounded, and a document must end where its top-level value ends; errors
// are kDataLoss naming the byte offset and what was expected there.
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
};

// Decodes one document. `max_depth` bounds nesting (arrays, maps, and
// nothing deeper for an attacker to exhaust the stack with).
absl::StatusOr<MsgpackValue> DecodeMsgpack(absl::string_view data, int max_depth = 64);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_MSGPACK_H_
