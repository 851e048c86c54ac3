#include "checkpoint/zarr3.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/ocdbt.h"
#include "checkpoint/zstd.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

using Json = nlohmann::json;

// A chain of array -> bytes -> bytes codecs: `bytes`, then zstd or nothing.
struct Chain {
  bool big_endian = false;
  bool zstd = false;
  bool crc32c = false;  // only in a shard's index chain
};

struct Metadata {
  std::string dtype;
  int item = 0;
  std::vector<int64_t> shape, chunks;
  std::string separator = "/";
  bool default_keys = true;  // "c/0/1"; else v2's "0.1"
  std::string fill;          // one element, little-endian
  Chain chain;
  bool sharded = false;
  std::vector<int64_t> inner;  // a shard's inner chunk shape
  Chain inner_chain, index_chain;
  bool index_at_end = true;
};

absl::Status Bad(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

absl::StatusOr<std::vector<int64_t>> Sizes(const std::string& file, const Json& j, const char* field) {
  if (!j.is_array()) return Bad(file, absl::StrCat(field, ": not a list"));
  std::vector<int64_t> out;
  for (const Json& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return Bad(file, absl::StrCat(field, ": ", j.dump()));
    out.push_back(d.get<int64_t>());
  }
  return out;
}

// `codecs`: bytes [zstd] (or, for an index, bytes [crc32c]).
absl::StatusOr<Chain> ParseChain(const std::string& file, const Json& codecs, bool index) {
  Chain chain;
  if (!codecs.is_array() || codecs.empty()) return Bad(file, "codecs: not a list of codecs");
  for (size_t i = 0; i < codecs.size(); ++i) {
    const Json& c = codecs[i];
    const std::string name =
        c.is_object() && c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "";
    const Json config = c.is_object() && c.contains("configuration") ? c["configuration"] : Json::object();
    if (i == 0 && name == "bytes") {
      const std::string endian = config.is_object() ? config.value("endian", std::string("little")) : "little";
      if (endian != "little" && endian != "big") return Bad(file, absl::StrCat("codec bytes: endian \"", endian, "\""));
      chain.big_endian = endian == "big";
    } else if (i == 1 && codecs.size() == 2 && !index && name == "zstd") {
      chain.zstd = true;
    } else if (i == 1 && codecs.size() == 2 && index && name == "crc32c") {
      chain.crc32c = true;
    } else {
      return Bad(file, absl::StrCat("codecs ", codecs.dump(), " are not supported; allowed: bytes then zstd, or ",
                                    "sharding_indexed of those"));
    }
  }
  return chain;
}

absl::Status ParseCodecs(const std::string& file, const Json& codecs, Metadata* m) {
  if (codecs.is_array() && codecs.size() == 1 && codecs[0].is_object() &&
      codecs[0].value("name", std::string()) == "sharding_indexed") {
    const Json& config = codecs[0].value("configuration", Json::object());
    m->sharded = true;
    TY_ASSIGN_OR_RETURN(m->inner, Sizes(file, config.value("chunk_shape", Json()), "sharding chunk_shape"));
    TY_ASSIGN_OR_RETURN(m->inner_chain, ParseChain(file, config.value("codecs", Json()), false));
    TY_ASSIGN_OR_RETURN(m->index_chain, ParseChain(file, config.value("index_codecs", Json()), true));
    if (m->index_chain.big_endian) return Bad(file, "a big-endian shard index is not supported");
    const std::string where = config.value("index_location", std::string("end"));
    if (where != "end" && where != "start") return Bad(file, absl::StrCat("index_location \"", where, "\""));
    m->index_at_end = where == "end";
    if (m->inner.size() != m->chunks.size()) return Bad(file, "sharding chunk_shape of another rank");
    for (size_t d = 0; d < m->inner.size(); ++d) {
      if (m->inner[d] == 0 || m->chunks[d] % m->inner[d] != 0) {
        return Bad(file, "sharding chunk_shape does not divide the chunk shape");
      }
    }
    return absl::OkStatus();
  }
  TY_ASSIGN_OR_RETURN(m->chain, ParseChain(file, codecs, false));
  return absl::OkStatus();
}

absl::Status ParseFill(const std::string& file, const Json& fill, Metadata* m) {
  m->fill.assign(m->item, '\0');
  double v = 0;
  if (fill.is_number()) {
    v = fill.get<double>();
  } else if (fill == "NaN" || fill == "Infinity" || fill == "-Infinity") {
    v = fill == "NaN" ? NAN : (fill == "Infinity" ? INFINITY : -INFINITY);
  } else {
    return Bad(file, absl::StrCat("fill_value ", fill.dump(), " is not a number"));
  }
  if (m->dtype == "float32") {
    const float f = static_cast<float>(v);
    std::memcpy(m->fill.data(), &f, 4);
  } else if (m->dtype == "float64") {
    std::memcpy(m->fill.data(), &v, 8);
  } else if (m->dtype == "int32" || m->dtype == "int64") {
    const int64_t i = static_cast<int64_t>(v);
    std::memcpy(m->fill.data(), &i, m->item);
  } else if (v != 0) {
    return Bad(file, absl::StrCat("fill_value ", fill.dump(), " for ", m->dtype, "; only 0 is supported"));
  }
  return absl::OkStatus();
}

absl::Status ParseKeys(const std::string& file, const Json& encoding, Metadata* m) {
  const std::string name = encoding.is_object() ? encoding.value("name", std::string()) : "";
  if (name != "default" && name != "v2") return Bad(file, absl::StrCat("chunk_key_encoding ", encoding.dump()));
  m->default_keys = name == "default";
  const Json config = encoding.value("configuration", Json::object());
  const std::string fallback = m->default_keys ? "/" : ".";
  m->separator = config.is_object() ? config.value("separator", fallback) : fallback;
  if (m->separator != "/" && m->separator != ".") return Bad(file, absl::StrCat("separator \"", m->separator, "\""));
  return absl::OkStatus();
}

absl::StatusOr<Metadata> ParseFields(const std::string& file, const Json& j) {
  if (!j.is_object() || j.value("zarr_format", 0) != 3 || j.value("node_type", std::string()) != "array") {
    return Bad(file, "not a zarr v3 array (zarr_format 3, node_type \"array\")");
  }
  Metadata m;
  m.dtype = j.value("data_type", Json()).is_string() ? j["data_type"].get<std::string>() : "";
  m.item = ZarrDtypeSize(m.dtype);
  if (m.item == 0) {
    return Bad(file, absl::StrCat("data_type ", j.value("data_type", Json()).dump(),
                                  " is not supported; allowed: float16, float32, float64, bfloat16, int32, int64"));
  }
  TY_ASSIGN_OR_RETURN(m.shape, Sizes(file, j.value("shape", Json()), "shape"));
  const Json grid = j.value("chunk_grid", Json::object());
  if (!grid.is_object() || grid.value("name", std::string()) != "regular") {
    return Bad(file, "chunk_grid: only \"regular\" is supported");
  }
  TY_ASSIGN_OR_RETURN(m.chunks,
                      Sizes(file, grid.value("configuration", Json::object()).value("chunk_shape", Json()), "chunks"));
  if (m.chunks.size() != m.shape.size()) return Bad(file, "chunk_shape and shape differ in rank");
  for (int64_t c : m.chunks) {
    if (c == 0) return Bad(file, "a chunk size of 0");
  }
  TY_RETURN_IF_ERROR(ParseKeys(file, j.value("chunk_key_encoding", Json{{"name", "default"}}), &m));
  TY_RETURN_IF_ERROR(ParseFill(file, j.value("fill_value", Json()), &m));
  TY_RETURN_IF_ERROR(ParseCodecs(file, j.value("codecs", Json()), &m));
  return m;
}

absl::StatusOr<Metadata> ParseMetadata(const std::string& file, const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::DataLossError(absl::StrCat(file, ": not JSON: ", e.what()));
  }
  try {
    return ParseFields(file, j);
  } catch (const Json::exception& e) {  // a field of the wrong type
    return Bad(file, e.what());
  }
}

// `raw` (an encoded chunk of `elements`) decoded by `chain`.
absl::StatusOr<std::string> Decode(std::string raw, const Chain& chain, int item, uint64_t elements,
                                   const std::string& what) {
  const uint64_t size = elements * static_cast<uint64_t>(item);
  if (chain.zstd) {
    TY_ASSIGN_OR_RETURN(raw, ZstdDecompress(raw, size, what));
  }
  if (raw.size() != size) {
    return absl::DataLossError(absl::StrCat(what, ": ", raw.size(), " bytes; the chunk has ", size));
  }
  if (chain.big_endian) {
    for (uint64_t e = 0; e < elements; ++e) std::reverse(&raw[e * item], &raw[e * item] + item);
  }
  return raw;
}

// Copies `chunk` (C order, shape `chunk_shape`) to `origin` of `array`
// (shape `shape`), leaving out what lies outside the array.
void Place(const std::string& chunk, const std::vector<int64_t>& chunk_shape, const std::vector<int64_t>& origin,
           const std::vector<int64_t>& shape, int item, std::string* array) {
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(array->data(), chunk.data(), item);
    return;
  }
  std::vector<int64_t> at(rank, 0);  // the row's position in the chunk (the last dimension 0)
  const int64_t run = std::min(chunk_shape[rank - 1], shape[rank - 1] - origin[rank - 1]);
  while (true) {
    bool inside = run > 0;
    uint64_t src = 0, dst = 0;
    for (size_t d = 0; d < rank; ++d) {
      inside = inside && origin[d] + at[d] < shape[d];
      src = src * static_cast<uint64_t>(chunk_shape[d]) + static_cast<uint64_t>(at[d]);
      dst = dst * static_cast<uint64_t>(shape[d]) + static_cast<uint64_t>(origin[d] + at[d]);
    }
    if (inside) std::memcpy(&(*array)[dst * item], &chunk[src * item], static_cast<size_t>(run) * item);
    int d = static_cast<int>(rank) - 2;
    for (; d >= 0; --d) {
      if (++at[d] < chunk_shape[d]) break;
      at[d] = 0;
    }
    if (d < 0) return;
  }
}

// Elements of `shape`, saturating at UINT64_MAX.
uint64_t Count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    const uint64_t u = static_cast<uint64_t>(d);
    n = u != 0 && n > UINT64_MAX / u ? UINT64_MAX : n * u;
  }
  return n;
}

// Steps `index` through a grid of `grid` in C order; false after the last.
bool Next(const std::vector<int64_t>& grid, std::vector<int64_t>* index) {
  for (int d = static_cast<int>(grid.size()) - 1; d >= 0; --d) {
    if (++(*index)[d] < grid[d]) return true;
    (*index)[d] = 0;
  }
  return false;
}

std::string Filled(const Metadata& m, uint64_t elements) {
  std::string out;
  out.reserve(elements * m.item);
  for (uint64_t e = 0; e < elements; ++e) out += m.fill;
  return out;
}

// A shard (the chunk at `origin`): its index checked, each inner chunk
// decoded and placed.
absl::Status ReadShard(const std::string& shard, const std::string& key, const Metadata& m,
                       const std::vector<int64_t>& origin, std::string* array) {
  std::vector<int64_t> grid(m.chunks.size()), at(m.chunks.size(), 0);
  for (size_t d = 0; d < grid.size(); ++d) grid[d] = m.chunks[d] / m.inner[d];
  const uint64_t n = Count(grid);
  const uint64_t index_size = n * 16 + (m.index_chain.crc32c ? 4 : 0);
  if (shard.size() < index_size) {
    return absl::DataLossError(absl::StrCat(key, ": ", shard.size(), " bytes, shorter than its index"));
  }
  const std::string index = shard.substr(m.index_at_end ? shard.size() - index_size : 0, index_size);
  if (m.index_chain.crc32c) {
    uint32_t stored = 0;
    for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(index[n * 16 + i]);
    if (Crc32c(absl::string_view(index).substr(0, n * 16)) != stored) {
      return absl::DataLossError(absl::StrCat(key, ": the shard index's CRC-32C does not match"));
    }
  }
  const uint64_t inner_elements = Count(m.inner);
  for (uint64_t i = 0; i < n; ++i, Next(grid, &at)) {
    uint64_t offset, bytes;
    std::memcpy(&offset, &index[i * 16], 8);
    std::memcpy(&bytes, &index[i * 16 + 8], 8);
    std::string chunk;
    const std::string what = absl::StrCat(key, " (inner chunk ", absl::StrJoin(at, ","), ")");
    if (offset == UINT64_MAX && bytes == UINT64_MAX) {
      chunk = Filled(m, inner_elements);
    } else if (offset > shard.size() || bytes > shard.size() - offset) {
      return absl::DataLossError(absl::StrCat(what, ": bytes ", offset, " + ", bytes, " past the shard's end"));
    } else {
      TY_ASSIGN_OR_RETURN(chunk, Decode(shard.substr(offset, bytes), m.inner_chain, m.item, inner_elements, what));
    }
    std::vector<int64_t> inner_origin(origin);
    for (size_t d = 0; d < at.size(); ++d) inner_origin[d] += at[d] * m.inner[d];
    Place(chunk, m.inner, inner_origin, m.shape, m.item, array);
  }
  return absl::OkStatus();
}

std::string ChunkKey(const Metadata& m, const std::vector<int64_t>& index) {
  if (!m.default_keys) return index.empty() ? "0" : absl::StrJoin(index, m.separator);
  return index.empty() ? "c" : "c" + m.separator + absl::StrJoin(index, m.separator);
}

}  // namespace

absl::StatusOr<ZarrArray> ReadZarr3Array(const std::string& name, const ZarrKeyReader& read, uint64_t max_bytes) {
  const std::string file = name + "/zarr.json";
  TY_ASSIGN_OR_RETURN(std::optional<std::string> text, read(file));
  if (!text.has_value()) return absl::NotFoundError(absl::StrCat(file, ": cannot read"));
  TY_ASSIGN_OR_RETURN(const Metadata m, ParseMetadata(file, *text));
  uint64_t elements = 1;
  for (size_t d = 0; d < m.shape.size(); ++d) {
    const uint64_t s = static_cast<uint64_t>(m.shape[d]), c = static_cast<uint64_t>(m.chunks[d]);
    if ((s != 0 && elements > max_bytes / s / m.item) || c > max_bytes / m.item) {
      return absl::ResourceExhaustedError(absl::StrCat(file, ": larger than ", max_bytes, " bytes"));
    }
    elements *= s;
  }
  if (Count(m.chunks) > max_bytes / m.item) {
    return absl::ResourceExhaustedError(absl::StrCat(file, ": chunks larger than ", max_bytes, " bytes"));
  }
  ZarrArray out;
  out.dtype = m.dtype;
  out.shape = m.shape;
  out.data.assign(elements * m.item, '\0');
  if (elements == 0) return out;
  std::vector<int64_t> grid(m.shape.size()), index(m.shape.size(), 0), origin(m.shape.size());
  for (size_t d = 0; d < grid.size(); ++d) grid[d] = (m.shape[d] + m.chunks[d] - 1) / m.chunks[d];
  do {
    for (size_t d = 0; d < grid.size(); ++d) origin[d] = index[d] * m.chunks[d];
    const std::string key = name + "/" + ChunkKey(m, index);
    TY_ASSIGN_OR_RETURN(std::optional<std::string> raw, read(key));
    if (!raw.has_value()) {
      Place(Filled(m, Count(m.chunks)), m.chunks, origin, m.shape, m.item, &out.data);
    } else if (m.sharded) {
      TY_RETURN_IF_ERROR(ReadShard(*raw, key, m, origin, &out.data));
    } else {
      TY_ASSIGN_OR_RETURN(const std::string chunk, Decode(std::move(*raw), m.chain, m.item, Count(m.chunks), key));
      Place(chunk, m.chunks, origin, m.shape, m.item, &out.data);
    }
  } while (Next(grid, &index));
  return out;
}

}  // namespace trainyard
