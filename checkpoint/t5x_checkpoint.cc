#include "checkpoint/t5x_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "checkpoint/msgpack.h"
#include "checkpoint/orbax_checkpoint.h"
#include "common/durable_file.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

// flax's ext codes (serialization._MsgpackExtType).
constexpr int8_t kExtNdarray = 1;
constexpr int8_t kExtNpScalar = 3;

std::string Key(const MsgpackValue& k) {
  if (k.type == MsgpackValue::Type::kString || k.type == MsgpackValue::Type::kBinary) return k.bytes;
  if (k.type == MsgpackValue::Type::kInt) return absl::StrCat(k.integer);
  return std::string("<") + k.TypeName() + ">";
}

class Reader {
 public:
  Reader(std::string dir, std::string file) : dir_(std::move(dir)), file_(std::move(file)) {}

  // Every leaf under `node` into `out`, by path from `prefix`.
  absl::Status Walk(const MsgpackValue& node, const std::string& prefix, std::map<std::string, ZarrArray>* out) {
    using T = MsgpackValue::Type;
    switch (node.type) {
      case T::kNil:
        return absl::OkStatus();  // an empty leaf
      case T::kExt: {
        absl::StatusOr<ZarrArray> array = Inline(node, prefix);
        if (!array.ok()) return array.status();
        (*out)[prefix] = std::move(*array);
        return absl::OkStatus();
      }
      case T::kInt: {
        ZarrArray a;
        a.dtype = "int64";
        a.data.assign(reinterpret_cast<const char*>(&node.integer), 8);
        (*out)[prefix] = std::move(a);
        return absl::OkStatus();
      }
      case T::kFloat: {
        ZarrArray a;
        a.dtype = "float64";
        a.data.assign(reinterpret_cast<const char*>(&node.number), 8);
        (*out)[prefix] = std::move(a);
        return absl::OkStatus();
      }
      case T::kMap: {
        if (node.Find("driver") != nullptr && node.Find("metadata") != nullptr) {
          absl::StatusOr<ZarrArray> array = Stored(node, prefix);
          if (!array.ok()) return array.status();
          (*out)[prefix] = std::move(*array);
          return absl::OkStatus();
        }
        if (const MsgpackValue* chunked = node.Find("__msgpack_chunked_array__");
            chunked != nullptr && chunked->type == T::kBool && chunked->boolean) {
          absl::StatusOr<ZarrArray> array = Chunked(node, prefix);
          if (!array.ok()) return array.status();
          (*out)[prefix] = std::move(*array);
          return absl::OkStatus();
        }
        for (const auto& [k, v] : node.entries) {
          absl::Status s = Walk(v, prefix.empty() ? Key(k) : prefix + "/" + Key(k), out);
          if (!s.ok()) return s;
        }
        return absl::OkStatus();
      }
      default:
        return Error(prefix,
                     absl::StrCat("a ", node.TypeName(), " where an array, a TensorStore spec or a map belongs"));
    }
  }

 private:
  absl::Status Error(const std::string& leaf, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", leaf.empty() ? "the top level" : leaf, ": ", what));
  }

  // flax: ExtType(1 or 3, packb([shape, dtype name, bytes])).
  absl::StatusOr<ZarrArray> Inline(const MsgpackValue& ext, const std::string& leaf) {
    if (ext.ext_type != kExtNdarray && ext.ext_type != kExtNpScalar) {
      return Error(leaf, absl::StrCat("msgpack ext type ", ext.ext_type, " is not an array (flax writes 1 and 3)"));
    }
    absl::StatusOr<MsgpackValue> payload = DecodeMsgpack(ext.bytes);
    if (!payload.ok()) return Error(leaf, std::string(payload.status().message()));
    using T = MsgpackValue::Type;
    if (payload->type != T::kArray || payload->items.size() != 3 || payload->items[0].type != T::kArray ||
        (payload->items[1].type != T::kString && payload->items[1].type != T::kBinary) ||
        payload->items[2].type != T::kBinary) {
      return Error(leaf, "an array's payload is not [shape, dtype, bytes]");
    }
    ZarrArray a;
    for (const MsgpackValue& d : payload->items[0].items) {
      if (d.type != T::kInt || d.integer < 0) return Error(leaf, "an array's shape is not a list of sizes");
      a.shape.push_back(d.integer);
    }
    a.dtype = payload->items[1].bytes;
    const int item = ZarrDtypeSize(a.dtype);
    if (item == 0) {
      return Error(leaf,
                   absl::StrCat("dtype \"", a.dtype,
                                "\" is not supported; allowed: float16, float32, float64, bfloat16, int32, int64"));
    }
    uint64_t elements = 1;
    for (int64_t d : a.shape) {
      if (d != 0 && elements > (uint64_t{1} << 60) / static_cast<uint64_t>(d)) return Error(leaf, "an absurd shape");
      elements *= static_cast<uint64_t>(d);
    }
    a.data = std::move(payload->items[2].bytes);
    if (a.data.size() != elements * static_cast<uint64_t>(item)) {
      return absl::DataLossError(absl::StrCat(file_, ": ", leaf, ": ", a.data.size(), " bytes for shape [",
                                              absl::StrJoin(a.shape, ", "), "] of ", a.dtype));
    }
    return a;
  }

  // flax's arrays over 1 GiB: {"__msgpack_chunked_array__": true,
  // "shape": {"0": d0, ...}, "chunks": {"0": ext, ...}}, flat chunks in order.
  absl::StatusOr<ZarrArray> Chunked(const MsgpackValue& node, const std::string& leaf) {
    const MsgpackValue* shape = node.Find("shape");
    const MsgpackValue* chunks = node.Find("chunks");
    using T = MsgpackValue::Type;
    if (shape == nullptr || chunks == nullptr || shape->type != T::kMap || chunks->type != T::kMap) {
      return Error(leaf, "a chunked array without its shape and chunks");
    }
    ZarrArray a;
    for (size_t i = 0; i < shape->entries.size(); ++i) {
      const MsgpackValue* d = shape->Find(absl::StrCat(i));
      if (d == nullptr || d->type != T::kInt || d->integer < 0) return Error(leaf, "a chunked array's shape is bad");
      a.shape.push_back(d->integer);
    }
    for (size_t i = 0; i < chunks->entries.size(); ++i) {
      const MsgpackValue* c = chunks->Find(absl::StrCat(i));
      if (c == nullptr || c->type != T::kExt) return Error(leaf, absl::StrCat("chunk ", i, " is missing"));
      absl::StatusOr<ZarrArray> part = Inline(*c, absl::StrCat(leaf, " (chunk ", i, ")"));
      if (!part.ok()) return part.status();
      if (i == 0) a.dtype = part->dtype;
      if (part->dtype != a.dtype) return Error(leaf, "chunks of different dtypes");
      a.data += part->data;
    }
    uint64_t elements = 1;
    for (int64_t d : a.shape) elements *= static_cast<uint64_t>(d);
    if (a.dtype.empty() || a.data.size() != elements * static_cast<uint64_t>(ZarrDtypeSize(a.dtype))) {
      return absl::DataLossError(
          absl::StrCat(file_, ": ", leaf, ": the chunks do not fill shape [", absl::StrJoin(a.shape, ", "), "]"));
    }
    return a;
  }

  // A TensorStore spec: the zarr array at the spec's path, relative to the
  // checkpoint directory (kvstore.path; older T5X: a top-level path).
  absl::StatusOr<ZarrArray> Stored(const MsgpackValue& spec, const std::string& leaf) {
    using T = MsgpackValue::Type;
    const MsgpackValue* driver = spec.Find("driver");
    if (driver->type != T::kString || driver->bytes != "zarr") {
      return Error(leaf, absl::StrCat("TensorStore driver \"", driver->bytes, "\"; only zarr is supported"));
    }
    std::string path;
    if (const MsgpackValue* kv = spec.Find("kvstore"); kv != nullptr && kv->type == T::kMap) {
      if (const MsgpackValue* p = kv->Find("path"); p != nullptr && p->type == T::kString) path = p->bytes;
    }
    if (path.empty()) {
      if (const MsgpackValue* p = spec.Find("path"); p != nullptr && p->type == T::kString) path = p->bytes;
    }
    while (!path.empty() && path.back() == '/') path.pop_back();
    if (path.empty()) return Error(leaf, "a TensorStore spec without a path");
    if (path[0] == '/' || absl::StrContains(path, "://")) {
      // T5X writes paths relative to the checkpoint; an absolute one would
      // read whatever it names.
      return Error(leaf, absl::StrCat("TensorStore path \"", path, "\" is not relative to the checkpoint directory"));
    }
    for (absl::string_view part : absl::StrSplit(path, '/')) {
      if (part == "..")
        return Error(leaf, absl::StrCat("TensorStore path \"", path, "\" leaves the checkpoint directory"));
    }
    absl::StatusOr<ZarrArray> array = ReadZarrArray(dir_ + "/" + path);
    if (!array.ok()) {
      return absl::Status(array.status().code(), absl::StrCat(leaf, ": ", array.status().message()));
    }
    // The spec's shape, when it has one, must be the array's.
    if (const MsgpackValue* meta = spec.Find("metadata"); meta != nullptr && meta->type == T::kMap) {
      if (const MsgpackValue* shape = meta->Find("shape"); shape != nullptr && shape->type == T::kArray) {
        std::vector<int64_t> want;
        for (const MsgpackValue& d : shape->items) want.push_back(d.integer);
        if (want != array->shape) {
          return absl::DataLossError(absl::StrCat(file_, ": ", leaf, ": the spec says shape [",
                                                  absl::StrJoin(want, ", "), "], ", path, "/.zarray [",
                                                  absl::StrJoin(array->shape, ", "), "]"));
        }
      }
    }
    return array;
  }

  const std::string dir_;
  const std::string file_;
};

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether `dir` is a checkpoint_<step> of Orbax's format: its `state` item
// has Orbax's PyTree metadata.
bool IsOrbax(const std::string& dir) {
  std::error_code ec;
  return fs::exists(dir + "/state/_METADATA", ec);
}

// The checkpoint_<step> directory `path` names.
absl::StatusOr<std::string> StepDir(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::path(path).parent_path().string();
  if (!fs::is_directory(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint directory"));
  if (IsOrbax(path)) return path;
  if (fs::exists(path + "/_METADATA", ec) && fs::path(path).filename() == "state") {
    return fs::path(path).parent_path().string();  // the state item itself
  }
  if (fs::exists(path + "/state/checkpoint", ec) || fs::exists(path + "/_METADATA", ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": an Orbax-format checkpoint without a state/_METADATA (Orbax's PyTree metadata); T5X's "
                     "msgpack + TensorStore checkpoints and Orbax ones with state/_METADATA are read"));
  }
  if (fs::exists(path + "/checkpoint", ec)) return path;
  int64_t best = -1;
  std::string found;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (absl::StartsWith(name, "checkpoint_") && absl::SimpleAtoi(name.substr(11), &step) &&
        (fs::exists(entry.path() / "checkpoint", ec) || IsOrbax(entry.path().string())) && step > best) {
      best = step;
      found = entry.path().string();
    }
  }
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path,
                     ": neither a T5X checkpoint (no `checkpoint` file, no `state/_METADATA`) nor a directory of "
                     "checkpoint_<step>"));
  }
  return found;
}

// The step, out of `state` ("step"): an integer scalar, not negative.
absl::Status TakeStep(const std::string& file, T5xCheckpoint* out) {
  auto it = out->state.find("step");
  if (it == out->state.end()) return absl::OkStatus();
  const ZarrArray& step = it->second;
  if (step.dtype == "int32" && step.data.size() == 4) {
    int32_t v;
    std::memcpy(&v, step.data.data(), 4);
    out->step = v;
  } else if (step.dtype == "int64" && step.data.size() == 8) {
    std::memcpy(&out->step, step.data.data(), 8);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(file, ": state/step is not an integer scalar"));
  }
  if (out->step < 0) return absl::InvalidArgumentError(absl::StrCat(file, ": state/step is ", out->step));
  out->state.erase(it);
  return absl::OkStatus();
}

// An Orbax-format checkpoint_<step>: its `state` item's target and state.
absl::StatusOr<T5xCheckpoint> ReadOrbax(const std::string& dir) {
  T5xCheckpoint out;
  out.dir = dir;
  out.file = dir + "/state/_METADATA";
  TY_ASSIGN_OR_RETURN(auto leaves, ReadOrbaxPyTree(dir + "/state"));
  for (auto& [path, array] : leaves) {
    if (absl::StartsWith(path, "target/")) out.target[path.substr(7)] = std::move(array);
    if (absl::StartsWith(path, "state/")) out.state[path.substr(6)] = std::move(array);
  }
  if (out.target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(out.file, ": no target/... leaves (the parameters)"));
  }
  TY_RETURN_IF_ERROR(TakeStep(out.file, &out));
  return out;
}

}  // namespace

absl::StatusOr<T5xCheckpoint> ReadT5xCheckpoint(const std::string& given) {
  std::string path = given;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  absl::StatusOr<std::string> dir = StepDir(path);
  if (!dir.ok()) return dir.status();
  if (IsOrbax(*dir)) return ReadOrbax(*dir);
  const std::string file = *dir + "/checkpoint";
  absl::StatusOr<std::string> bytes = ReadWhole(file);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<MsgpackValue> root = DecodeMsgpack(*bytes);
  if (!root.ok()) return absl::DataLossError(absl::StrCat(file, ": ", root.status().message()));
  if (root->type != MsgpackValue::Type::kMap) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": not a T5X checkpoint (the top level is a ", root->TypeName(), ", not a map)"));
  }
  T5xCheckpoint out;
  out.dir = *dir;
  out.file = file;
  const MsgpackValue* version = root->Find("version");
  if (version == nullptr || version->type != MsgpackValue::Type::kInt || version->integer < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": checkpoint version ", version == nullptr ? std::string("missing") : absl::StrCat(version->integer),
        "; T5X checkpoints of version 2 or later are read (T5X itself refuses older ones)"));
  }
  out.version = static_cast<int>(version->integer);
  const MsgpackValue* optimizer = root->Find("optimizer");
  if (optimizer == nullptr || optimizer->type != MsgpackValue::Type::kMap) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no \"optimizer\" map (T5X's train state)"));
  }
  const MsgpackValue* target = optimizer->Find("target");
  if (target == nullptr || target->type != MsgpackValue::Type::kMap) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no optimizer.target map (the parameters)"));
  }
  Reader reader(*dir, file);
  absl::Status s = reader.Walk(*target, "", &out.target);
  if (!s.ok()) return s;
  if (const MsgpackValue* state = optimizer->Find("state");
      state != nullptr && state->type == MsgpackValue::Type::kMap) {
    s = reader.Walk(*state, "", &out.state);
    if (!s.ok()) return s;
  }
  TY_RETURN_IF_ERROR(TakeStep(file, &out));
  return out;
}

namespace {

// The document being written: a map's entries by key (sorted), or a leaf.
struct Node {
  std::map<std::string, Node> children;
  bool is_leaf = false;
  MsgpackValue leaf;
};

absl::Status Insert(Node* root, const std::string& path, MsgpackValue leaf) {
  Node* node = root;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (node->is_leaf) return absl::InvalidArgumentError(absl::StrCat(path, ": below another leaf"));
    node = &node->children[std::string(part)];
  }
  if (node->is_leaf || !node->children.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": both a leaf and a map"));
  }
  node->is_leaf = true;
  node->leaf = std::move(leaf);
  return absl::OkStatus();
}

MsgpackValue ToMsgpack(const Node& node) {
  if (node.is_leaf) return node.leaf;
  MsgpackValue map = MsgpackValue::Map();
  for (const auto& [key, child] : node.children) map.entries.emplace_back(MsgpackValue::String(key), ToMsgpack(child));
  return map;
}

MsgpackValue Ints(const std::vector<int64_t>& v) {
  MsgpackValue out = MsgpackValue::Array();
  for (int64_t i : v) out.items.push_back(MsgpackValue::Int(i));
  return out;
}

// flax's inline array: ext 1 of [shape, dtype name, bytes].
absl::StatusOr<MsgpackValue> FlaxArray(const ZarrArray& a, const std::string& leaf) {
  uint64_t elements = 1;
  for (int64_t d : a.shape) elements *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  const int item = ZarrDtypeSize(a.dtype);
  if (item == 0 || a.data.size() != elements * static_cast<uint64_t>(item)) {
    return absl::InvalidArgumentError(
        absl::StrCat(leaf, ": ", a.data.size(), " bytes for shape [", absl::StrJoin(a.shape, ", "), "] of ", a.dtype));
  }
  TY_ASSIGN_OR_RETURN(
      std::string payload,
      EncodeMsgpack(MsgpackValue::Array({Ints(a.shape), MsgpackValue::String(a.dtype), MsgpackValue::Binary(a.data)})));
  return MsgpackValue::Ext(kExtNdarray, std::move(payload));
}

// The spec T5X keeps for an array stored in `name`/ (TensorStore's to_json
// of the spec it wrote with).
MsgpackValue Spec(const std::string& name, const ZarrArray& a, const std::vector<int64_t>& chunks) {
  using V = MsgpackValue;
  return V::Map({
      {V::String("driver"), V::String("zarr")},
      {V::String("dtype"), V::String(a.dtype)},
      {V::String("kvstore"),
       V::Map({{V::String("driver"), V::String("file")}, {V::String("path"), V::String(name + "/")}})},
      {V::String("metadata"), V::Map({{V::String("chunks"), Ints(chunks)},
                                      {V::String("compressor"),
                                       V::Map({{V::String("id"), V::String("gzip")}, {V::String("level"), V::Int(1)}})},
                                      {V::String("shape"), Ints(a.shape)}})},
  });
}

// Whether T5X keeps the state leaf `path` inline: Adafactor's factored
// statistics and unused slots have no partitioning axes.
bool InlineState(const std::string& path, const ZarrArray& a) {
  return absl::EndsWith(path, "/v_row") || absl::EndsWith(path, "/v_col") || path == "v_row" || path == "v_col" ||
         a.shape == std::vector<int64_t>{1};
}

// Every leaf of `leaves` (under "target" or "state") into `root`, stored in
// `dir` or inline.
absl::Status AddLeaves(const std::string& dir, const std::string& prefix,
                       const std::map<std::string, ZarrArray>& leaves, const T5xWriteOptions& options, Node* root) {
  for (const auto& [path, array] : leaves) {
    const std::string leaf = prefix + "/" + path;
    MsgpackValue value;
    if (prefix == "state" && InlineState(path, array)) {
      TY_ASSIGN_OR_RETURN(value, FlaxArray(array, leaf));
    } else {
      const int item = ZarrDtypeSize(array.dtype);
      const std::vector<int64_t> chunks =
          ChooseZarrChunks(array.shape, options.chunk_bytes / static_cast<uint64_t>(std::max(item, 1)));
      const std::string name = absl::StrReplaceAll(leaf, {{"/", "."}});
      ZarrWriteOptions zarr;
      zarr.sync = false;  // all synced at once
      absl::Status written = WriteZarrArray(dir + "/" + name, array, chunks, zarr);
      if (!written.ok()) return absl::Status(written.code(), absl::StrCat(leaf, ": ", written.message()));
      value = Spec(name, array, chunks);
    }
    absl::Status s = Insert(root, path, std::move(value));
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(prefix, "/", s.message()));
  }
  return absl::OkStatus();
}

// The arrays and the `checkpoint` file into `dir`.
absl::Status WriteContents(const T5xCheckpoint& checkpoint, const std::string& dir, const T5xWriteOptions& options) {
  Node target, state;
  TY_RETURN_IF_ERROR(AddLeaves(dir, "target", checkpoint.target, options, &target));
  TY_RETURN_IF_ERROR(AddLeaves(dir, "state", checkpoint.state, options, &state));
  ZarrArray step;
  step.dtype = "int32";
  const int32_t step32 = static_cast<int32_t>(checkpoint.step);
  step.data.assign(reinterpret_cast<const char*>(&step32), 4);
  TY_ASSIGN_OR_RETURN(MsgpackValue step_value, FlaxArray(step, "state/step"));
  TY_RETURN_IF_ERROR(Insert(&state, "step", std::move(step_value)));
  using V = MsgpackValue;
  const V document = V::Map({
      {V::String("version"), V::Int(3)},
      {V::String("optimizer"),
       V::Map({{V::String("state"), ToMsgpack(state)}, {V::String("target"), ToMsgpack(target)}})},
  });
  TY_ASSIGN_OR_RETURN(const std::string bytes, EncodeMsgpack(document));
  return WriteFileAtomically(dir + "/checkpoint", bytes);
}

// Everything written under `dir` (files and directories) made durable at
// once: syncfs(2) of its file system, one call instead of an fsync per
// chunk file.
absl::Status SyncAll(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("open", dir, errno);
  const int rc = ::syncfs(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) return FileError("syncfs", dir, error);
  return absl::OkStatus();
}

// Renames `from` to `to` unless `to` exists (kAlreadyExists). Where the
// file system has no RENAME_NOREPLACE, a plain rename after a check.
absl::Status RenameNoReplace(const std::string& from, const std::string& to) {
  int rc = renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && errno == EINVAL) {
    std::error_code ec;
    if (fs::exists(to, ec)) {
      errno = EEXIST;
    } else {
      rc = std::rename(from.c_str(), to.c_str());
    }
  }
  if (rc == 0) return absl::OkStatus();
  if (errno == EEXIST || errno == ENOTEMPTY) return absl::AlreadyExistsError(absl::StrCat(to, ": already exists"));
  return FileError("rename to", to, errno);
}

// Creates `final_dir`.tmp-<unix seconds> (the next free second).
absl::StatusOr<std::string> MakeTempDir(const std::string& final_dir) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (int64_t t = now; t < now + 1000; ++t) {
    const std::string tmp = absl::StrCat(final_dir, ".tmp-", t);
    if (::mkdir(tmp.c_str(), 0755) == 0) return tmp;
    if (errno != EEXIST) return FileError("create directory", tmp, errno);
  }
  return absl::AlreadyExistsError(absl::StrCat(final_dir, ".tmp-", now, " and the next 999 seconds' names exist"));
}

}  // namespace

absl::StatusOr<std::string> WriteT5xCheckpoint(const T5xCheckpoint& checkpoint, const std::string& model_dir,
                                               const T5xWriteOptions& options) {
  if (checkpoint.step < 0 || checkpoint.step > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", checkpoint.step, " is outside T5X's step (an int32 from 0 to 2^31 - 1)"));
  }
  std::error_code ec;
  fs::create_directories(model_dir, ec);
  if (ec) return FileError("create directory", model_dir, ec.value());
  const std::string final_dir = absl::StrCat(model_dir, "/checkpoint_", checkpoint.step);
  if (fs::exists(final_dir, ec)) return absl::AlreadyExistsError(absl::StrCat(final_dir, ": already exists"));
  TY_ASSIGN_OR_RETURN(const std::string tmp, MakeTempDir(final_dir));
  absl::Status s = WriteContents(checkpoint, tmp, options);
  if (s.ok()) s = SyncAll(tmp);
  if (s.ok()) s = RenameNoReplace(tmp, final_dir);
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  TY_RETURN_IF_ERROR(FsyncPath(model_dir, /*directory=*/true));
  return final_dir;
}

}  // namespace trainyard
