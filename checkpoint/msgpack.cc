#include "checkpoint/msgpack.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

class Decoder {
 public:
  Decoder(absl::string_view data, int max_depth) : data_(data), max_depth_(max_depth) {}

  absl::StatusOr<MsgpackValue> Document() {
    MsgpackValue v;
    absl::Status s = Value(0, &v);
    if (!s.ok()) return s;
    if (pos_ != data_.size()) return Error(absl::StrCat(data_.size() - pos_, " bytes after the document's end"));
    return v;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::DataLossError(absl::StrCat("msgpack: at byte ", pos_, ": ", what));
  }
  absl::Status Need(uint64_t n) const {
    if (n > data_.size() - pos_) {
      return Error(absl::StrCat("needs ", n, " more bytes, ", data_.size() - pos_, " left"));
    }
    return absl::OkStatus();
  }
  // A big-endian unsigned integer of `n` bytes.
  absl::StatusOr<uint64_t> Uint(int n) {
    absl::Status s = Need(n);
    if (!s.ok()) return s;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_ + i]);
    pos_ += n;
    return v;
  }
  absl::Status Bytes(uint64_t n, std::string* out) {
    absl::Status s = Need(n);
    if (!s.ok()) return s;
    out->assign(data_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status Ext(uint64_t n, MsgpackValue* v) {
    absl::StatusOr<uint64_t> type = Uint(1);
    if (!type.ok()) return type.status();
    v->type = MsgpackValue::Type::kExt;
    v->ext_type = static_cast<int8_t>(static_cast<uint8_t>(*type));
    return Bytes(n, &v->bytes);
  }
  absl::Status Array(uint64_t n, int depth, MsgpackValue* v) {
    // Every element takes at least a byte.
    absl::Status s = Need(n);
    if (!s.ok()) return s;
    v->type = MsgpackValue::Type::kArray;
    v->items.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      s = Value(depth + 1, &v->items[i]);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status Map(uint64_t n, int depth, MsgpackValue* v) {
    absl::Status s = Need(2 * n);
    if (!s.ok()) return s;
    v->type = MsgpackValue::Type::kMap;
    v->entries.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      s = Value(depth + 1, &v->entries[i].first);
      if (s.ok()) s = Value(depth + 1, &v->entries[i].second);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A float32 (width 4, widened) or float64 (width 8).
  absl::Status Float(int width, MsgpackValue* v) {
    absl::StatusOr<uint64_t> bits = Uint(width);
    if (!bits.ok()) return bits.status();
    if (width == 4) {
      const uint32_t b = static_cast<uint32_t>(*bits);
      float f;
      std::memcpy(&f, &b, 4);
      v->number = f;
    } else {
      const uint64_t b = *bits;
      std::memcpy(&v->number, &b, 8);
    }
    v->type = MsgpackValue::Type::kFloat;
    return absl::OkStatus();
  }
  // An unsigned integer of `width` bytes; above INT64_MAX it is refused.
  absl::Status Unsigned(int width, MsgpackValue* v) {
    absl::StatusOr<uint64_t> n = Uint(width);
    if (!n.ok()) return n.status();
    if (*n > static_cast<uint64_t>(INT64_MAX)) return Error("an unsigned integer above 2^63 - 1");
    v->type = MsgpackValue::Type::kInt;
    v->integer = static_cast<int64_t>(*n);
    return absl::OkStatus();
  }
  // A signed integer of `width` bytes.
  absl::Status Signed(int width, MsgpackValue* v) {
    absl::StatusOr<uint64_t> n = Uint(width);
    if (!n.ok()) return n.status();
    v->type = MsgpackValue::Type::kInt;
    // Sign-extend from `width` bytes.
    const int shift = 64 - 8 * width;
    v->integer = static_cast<int64_t>(*n << shift) >> shift;
    return absl::OkStatus();
  }
  // A str or bin whose length takes `length_width` bytes.
  absl::Status SizedBytes(int length_width, MsgpackValue::Type type, MsgpackValue* v) {
    absl::StatusOr<uint64_t> n = Uint(length_width);
    if (!n.ok()) return n.status();
    v->type = type;
    return Bytes(*n, &v->bytes);
  }
  // An ext whose length takes `length_width` bytes.
  absl::Status SizedExt(int length_width, MsgpackValue* v) {
    absl::StatusOr<uint64_t> n = Uint(length_width);
    if (!n.ok()) return n.status();
    return Ext(*n, v);
  }

  absl::Status Value(int depth, MsgpackValue* v) {
    if (depth > max_depth_) return Error(absl::StrCat("nested deeper than ", max_depth_));
    absl::StatusOr<uint64_t> tag_or = Uint(1);
    if (!tag_or.ok()) return tag_or.status();
    const uint8_t tag = static_cast<uint8_t>(*tag_or);
    using T = MsgpackValue::Type;
    if (tag <= 0x7f || tag >= 0xe0) {
      // A positive or negative fixint: the tag is the value as an int8.
      v->type = T::kInt;
      v->integer = static_cast<int8_t>(tag);
      return absl::OkStatus();
    }
    if ((tag & 0xf0) == 0x80) return Map(tag & 0x0f, depth, v);
    if ((tag & 0xf0) == 0x90) return Array(tag & 0x0f, depth, v);
    if ((tag & 0xe0) == 0xa0) {
      v->type = T::kString;
      return Bytes(tag & 0x1f, &v->bytes);
    }
    switch (tag) {
      case 0xc0:
        v->type = T::kNil;
        return absl::OkStatus();
      case 0xc2:
      case 0xc3:
        v->type = T::kBool;
        v->boolean = tag == 0xc3;
        return absl::OkStatus();
      case 0xc4:
      case 0xc5:
      case 0xc6:
        return SizedBytes(1 << (tag - 0xc4), T::kBinary, v);
      case 0xc7:
      case 0xc8:
      case 0xc9:
        return SizedExt(1 << (tag - 0xc7), v);
      case 0xca:
        return Float(4, v);
      case 0xcb:
        return Float(8, v);
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf:
        return Unsigned(1 << (tag - 0xcc), v);
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3:
        return Signed(1 << (tag - 0xd0), v);
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        return Ext(1u << (tag - 0xd4), v);
      case 0xd9:
      case 0xda:
      case 0xdb:
        return SizedBytes(1 << (tag - 0xd9), T::kString, v);
      case 0xdc:
      case 0xdd: {
        absl::StatusOr<uint64_t> n = Uint(tag == 0xdc ? 2 : 4);
        if (!n.ok()) return n.status();
        return Array(*n, depth, v);
      }
      case 0xde:
      case 0xdf: {
        absl::StatusOr<uint64_t> n = Uint(tag == 0xde ? 2 : 4);
        if (!n.ok()) return n.status();
        return Map(*n, depth, v);
      }
      default:
        --pos_;
        return Error(absl::StrCat("0x", absl::Hex(tag), " is not a MessagePack type"));
    }
  }

  absl::string_view data_;
  const int max_depth_;
  size_t pos_ = 0;
};

class Encoder {
 public:
  explicit Encoder(int max_depth) : max_depth_(max_depth) {}

  absl::Status Value(const MsgpackValue& v, int depth) {
    if (depth > max_depth_) return absl::InvalidArgumentError(absl::StrCat("msgpack: nested deeper than ", max_depth_));
    using T = MsgpackValue::Type;
    switch (v.type) {
      case T::kNil:
        out_.push_back(static_cast<char>(0xc0));
        return absl::OkStatus();
      case T::kBool:
        out_.push_back(static_cast<char>(v.boolean ? 0xc3 : 0xc2));
        return absl::OkStatus();
      case T::kInt:
        Int(v.integer);
        return absl::OkStatus();
      case T::kFloat: {
        uint64_t bits;
        std::memcpy(&bits, &v.number, 8);
        Tag(0xcb, bits, 8);
        return absl::OkStatus();
      }
      case T::kString:
        return Sized(v.bytes.size(), 0xa0, 32, 0xd9, true) ? Append(v.bytes) : TooLong("a str");
      case T::kBinary:
        return Sized(v.bytes.size(), 0, 0, 0xc4, true) ? Append(v.bytes) : TooLong("a bin");
      case T::kExt:
        return Ext(v);
      case T::kArray:
        if (!Sized(v.items.size(), 0x90, 16, 0xdc, false)) return TooLong("an array");
        for (const MsgpackValue& item : v.items) TY_RETURN_IF_ERROR(Value(item, depth + 1));
        return absl::OkStatus();
      case T::kMap:
        if (!Sized(v.entries.size(), 0x80, 16, 0xde, false)) return TooLong("a map");
        for (const auto& [key, value] : v.entries) {
          TY_RETURN_IF_ERROR(Value(key, depth + 1));
          TY_RETURN_IF_ERROR(Value(value, depth + 1));
        }
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError("msgpack: a value of no known type");
  }

  std::string Take() { return std::move(out_); }

 private:
  static absl::Status TooLong(const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("msgpack: ", what, " of 2^32 or more bytes or elements"));
  }
  absl::Status Append(const std::string& bytes) {
    out_ += bytes;
    return absl::OkStatus();
  }
  // `tag`, then `v` big-endian in `width` bytes.
  void Tag(int tag, uint64_t v, int width) {
    out_.push_back(static_cast<char>(tag));
    for (int i = width - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void Int(int64_t v) {
    if (v >= 0) {
      const uint64_t u = static_cast<uint64_t>(v);
      if (u <= 0x7f) {
        out_.push_back(static_cast<char>(u));
      } else {
        const int width = u <= 0xff ? 1 : u <= 0xffff ? 2 : u <= 0xffffffffu ? 4 : 8;
        Tag(width == 1 ? 0xcc : width == 2 ? 0xcd : width == 4 ? 0xce : 0xcf, u, width);
      }
    } else if (v >= -32) {
      out_.push_back(static_cast<char>(static_cast<int8_t>(v)));
    } else {
      const int width = v >= INT8_MIN ? 1 : v >= INT16_MIN ? 2 : v >= INT32_MIN ? 4 : 8;
      Tag(width == 1 ? 0xd0 : width == 2 ? 0xd1 : width == 4 ? 0xd2 : 0xd3, static_cast<uint64_t>(v), width);
    }
  }
  // The header of a str, bin, array or map of `n`: the fix form (`fix` | n)
  // when n < `fix_limit`, else `tag8` (str, bin: a 1-byte length; `has8`),
  // then the 2- and 4-byte forms that follow it. False when n >= 2^32.
  bool Sized(uint64_t n, int fix, uint64_t fix_limit, int tag8, bool has8) {
    if (n < fix_limit) {
      out_.push_back(static_cast<char>(fix | static_cast<int>(n)));
    } else if (has8 && n <= 0xff) {
      Tag(tag8, n, 1);
    } else if (n <= 0xffff) {
      Tag(tag8 + (has8 ? 1 : 0), n, 2);
    } else if (n <= 0xffffffffu) {
      Tag(tag8 + (has8 ? 2 : 1), n, 4);
    } else {
      return false;
    }
    return true;
  }
  absl::Status Ext(const MsgpackValue& v) {
    const uint64_t n = v.bytes.size();
    int fixext = -1;
    for (int i = 0; i < 5; ++i) {
      if (n == (uint64_t{1} << i)) fixext = 0xd4 + i;
    }
    if (fixext >= 0) {
      out_.push_back(static_cast<char>(fixext));
    } else if (!Sized(n, 0, 0, 0xc7, true)) {
      return TooLong("an ext");
    }
    out_.push_back(static_cast<char>(v.ext_type));
    return Append(v.bytes);
  }

  const int max_depth_;
  std::string out_;
};

}  // namespace

const MsgpackValue* MsgpackValue::Find(absl::string_view key) const {
  for (const auto& [k, v] : entries) {
    if ((k.type == Type::kString || k.type == Type::kBinary) && k.bytes == key) return &v;
  }
  return nullptr;
}

const char* MsgpackValue::TypeName() const {
  switch (type) {
    case Type::kNil:
      return "nil";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kBinary:
      return "bin";
    case Type::kArray:
      return "array";
    case Type::kMap:
      return "map";
    case Type::kExt:
      return "ext";
  }
  return "?";
}

absl::StatusOr<MsgpackValue> DecodeMsgpack(absl::string_view data, int max_depth) {
  return Decoder(data, max_depth).Document();
}

MsgpackValue MsgpackValue::Int(int64_t v) {
  MsgpackValue out;
  out.type = Type::kInt;
  out.integer = v;
  return out;
}

MsgpackValue MsgpackValue::Float(double v) {
  MsgpackValue out;
  out.type = Type::kFloat;
  out.number = v;
  return out;
}

MsgpackValue MsgpackValue::String(std::string s) {
  MsgpackValue out;
  out.type = Type::kString;
  out.bytes = std::move(s);
  return out;
}

MsgpackValue MsgpackValue::Binary(std::string b) {
  MsgpackValue out;
  out.type = Type::kBinary;
  out.bytes = std::move(b);
  return out;
}

MsgpackValue MsgpackValue::Ext(int8_t type, std::string payload) {
  MsgpackValue out;
  out.type = Type::kExt;
  out.ext_type = type;
  out.bytes = std::move(payload);
  return out;
}

MsgpackValue MsgpackValue::Array(std::vector<MsgpackValue> items) {
  MsgpackValue out;
  out.type = Type::kArray;
  out.items = std::move(items);
  return out;
}

MsgpackValue MsgpackValue::Map(std::vector<std::pair<MsgpackValue, MsgpackValue>> entries) {
  MsgpackValue out;
  out.type = Type::kMap;
  out.entries = std::move(entries);
  return out;
}

absl::StatusOr<std::string> EncodeMsgpack(const MsgpackValue& value, int max_depth) {
  Encoder encoder(max_depth);
  TY_RETURN_IF_ERROR(encoder.Value(value, 0));
  return encoder.Take();
}

}  // namespace trainyard
