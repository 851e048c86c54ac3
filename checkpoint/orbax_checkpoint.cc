#include "checkpoint/orbax_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/ocdbt.h"
#include "checkpoint/zarr3.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

struct Leaf {
  std::vector<std::string> keys;
  std::string value_type;
};

absl::StatusOr<nlohmann::json> ReadJson(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(file, ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  try {
    nlohmann::json j = nlohmann::json::parse(s.str());
    if (!j.is_object()) return absl::DataLossError(absl::StrCat(file, ": not a JSON object"));
    return j;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(file, ": not JSON: ", e.what()));
  }
}

// One entry of tree_metadata: its keys and value type, checked.
absl::StatusOr<Leaf> ParseLeaf(const std::string& file, const std::string& name, const nlohmann::json& entry) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", name, ": ", what));
  };
  if (!entry.is_object() || !entry.contains("key_metadata") || !entry["key_metadata"].is_array() ||
      entry["key_metadata"].empty() || !entry.contains("value_metadata") || !entry["value_metadata"].is_object()) {
    return bad("not {key_metadata: [...], value_metadata: {...}}");
  }
  Leaf leaf;
  for (const nlohmann::json& k : entry["key_metadata"]) {
    if (!k.is_object() || !k.contains("key")) return bad("a key without its \"key\"");
    const nlohmann::json& key = k["key"];
    std::string part = key.is_string() ? key.get<std::string>() : key.dump();
    if (part.empty() || part == "." || part == ".." || part.find('/') != std::string::npos) {
      return bad(absl::StrCat("key \"", part, "\" is not a plain name"));
    }
    leaf.keys.push_back(std::move(part));
  }
  const nlohmann::json& value = entry["value_metadata"];
  if (!value.contains("value_type") || !value["value_type"].is_string()) return bad("no value_type");
  leaf.value_type = value["value_type"].get<std::string>();
  if (value.value("skip_deserialize", false)) {
    return bad("kept in the checkpoint's msgpack aggregate file (skip_deserialize), which is not read");
  }
  return leaf;
}

// Keys as files below `dir`.
ZarrKeyReader FileReader(const std::string& dir) {
  return [dir](const std::string& key) -> absl::StatusOr<std::optional<std::string>> {
    const std::string path = dir + "/" + key;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::error_code ec;
      if (std::filesystem::exists(path, ec)) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot read"));
      return std::optional<std::string>();
    }
    std::stringstream s;
    s << in.rdbuf();
    if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
    return std::optional<std::string>(s.str());
  };
}

bool IsArray(const std::string& type) { return type == "jax.Array" || type == "np.ndarray" || type == "scalar"; }

bool IsEmpty(const std::string& type) {
  return type == "None" || type == "Dict" || type == "List" || type == "Tuple" || type == "NamedTuple";
}

}  // namespace

absl::StatusOr<std::map<std::string, ZarrArray>> ReadOrbaxPyTree(const std::string& item_dir) {
  const std::string file = item_dir + "/_METADATA";
  TY_ASSIGN_OR_RETURN(const nlohmann::json meta, ReadJson(file));
  if (!meta.contains("tree_metadata") || !meta["tree_metadata"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no tree_metadata object (Orbax's PyTree metadata)"));
  }
  const bool zarr3 = meta.contains("use_zarr3") && meta["use_zarr3"].is_boolean() && meta["use_zarr3"].get<bool>();
  std::error_code ec;
  std::shared_ptr<OcdbtStore> store;
  if (std::filesystem::exists(item_dir + "/manifest.ocdbt", ec)) {
    TY_ASSIGN_OR_RETURN(OcdbtStore opened, OcdbtStore::Open(item_dir));
    store = std::make_shared<OcdbtStore>(std::move(opened));
  } else if (meta.value("use_ocdbt", false)) {
    return absl::NotFoundError(absl::StrCat(item_dir, "/manifest.ocdbt: missing, and ", file, " says use_ocdbt"));
  }
  std::map<std::string, ZarrArray> out;
  for (const auto& [name, entry] : meta["tree_metadata"].items()) {
    TY_ASSIGN_OR_RETURN(const Leaf leaf, ParseLeaf(file, name, entry));
    const std::string path = absl::StrJoin(leaf.keys, "/");
    if (IsEmpty(leaf.value_type)) continue;
    if (!IsArray(leaf.value_type)) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", path, ": value_type \"", leaf.value_type,
                                                     "\"; allowed: jax.Array, np.ndarray, scalar (or empty)"));
    }
    const std::string stored = absl::StrJoin(leaf.keys, ".");
    ZarrKeyReader read = FileReader(item_dir);
    if (store != nullptr) read = [&store](const std::string& key) { return store->Get(key); };
    absl::StatusOr<ZarrArray> array = zarr3 ? ReadZarr3Array(stored, read) : ReadZarrArrayFrom(stored, read);
    if (!array.ok()) {
      const std::string where = absl::StrCat(item_dir, store != nullptr ? " (OCDBT)" : "", ": ");
      return absl::Status(array.status().code(), absl::StrCat(path, ": ", where, array.status().message()));
    }
    if (!out.emplace(path, std::move(*array)).second) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", path, ": twice"));
    }
  }
  return out;
}

}  // namespace trainyard
