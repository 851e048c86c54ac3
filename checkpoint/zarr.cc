#include "checkpoint/zarr.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/zstd.h"
#include "common/durable_file.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, bool* missing) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (missing != nullptr) {
      *missing = true;
      return std::string();
    }
    return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  }
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return s.str();
}

struct Dtype {
  std::string name;
  int size = 0;
  bool big_endian = false;
};

absl::StatusOr<Dtype> ParseDtype(const std::string& file, const nlohmann::json& j) {
  if (!j.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": dtype: ", j.dump(), " is not a simple dtype string"));
  }
  const std::string s = j.get<std::string>();
  if (s == "bfloat16") return Dtype{"bfloat16", 2, false};
  if (s.size() == 3 && (s[0] == '<' || s[0] == '>' || s[0] == '|')) {
    const std::string kind = s.substr(1);
    const bool big = s[0] == '>';
    if (kind == "f2") return Dtype{"float16", 2, big};
    if (kind == "f4") return Dtype{"float32", 4, big};
    if (kind == "f8") return Dtype{"float64", 8, big};
    if (kind == "i4") return Dtype{"int32", 4, big};
    if (kind == "i8") return Dtype{"int64", 8, big};
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": dtype \"", s, "\" is not supported; allowed: <f2, <f4, <f8, bfloat16, <i4, <i8"));
}

absl::StatusOr<std::vector<int64_t>> Dims(const std::string& file, const nlohmann::json& meta, const char* key) {
  if (!meta.contains(key) || !meta[key].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", key, ": missing or not a list"));
  }
  std::vector<int64_t> out;
  for (const auto& d : meta[key]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": ", key, ": ", meta[key].dump(), " is not a list of sizes"));
    }
    out.push_back(d.get<int64_t>());
  }
  return out;
}

// Inflates `in` into exactly `size` bytes: gzip (windowBits 15 + 16) or zlib.
absl::StatusOr<std::string> Inflate(const std::string& in, uint64_t size, bool gzip, const std::string& what) {
  std::string out(size, '\0');
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  if (inflateInit2(&z, gzip ? 15 + 16 : 15) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(size);
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != size) {
    return absl::DataLossError(absl::StrCat(what, ": does not ", gzip ? "gunzip" : "inflate", " to the chunk's ", size,
                                            " bytes (zlib status ", rc, ", ", produced, " bytes)"));
  }
  return out;
}

// One element of the fill value in little-endian bytes.
absl::StatusOr<std::string> FillBytes(const std::string& file, const nlohmann::json& fill, const Dtype& dtype) {
  std::string out(dtype.size, '\0');
  if (fill.is_null()) return out;
  double v = 0;
  if (fill.is_number()) {
    v = fill.get<double>();
  } else if (fill.is_string() && (fill == "NaN" || fill == "Infinity" || fill == "-Infinity")) {
    v = fill == "NaN" ? NAN : (fill == "Infinity" ? INFINITY : -INFINITY);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(file, ": fill_value ", fill.dump(), " is not a number"));
  }
  if (dtype.name == "float32") {
    const float f = static_cast<float>(v);
    std::memcpy(out.data(), &f, 4);
  } else if (dtype.name == "float64") {
    std::memcpy(out.data(), &v, 8);
  } else if (dtype.name == "int32") {
    const int32_t i = static_cast<int32_t>(v);
    std::memcpy(out.data(), &i, 4);
  } else if (dtype.name == "int64") {
    const int64_t i = static_cast<int64_t>(v);
    std::memcpy(out.data(), &i, 8);
  } else if (v != 0) {
    // float16/bfloat16: only a zero fill (what TensorStore writes).
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": fill_value ", fill.dump(), " for ", dtype.name, "; only null or 0 is supported"));
  }
  return out;
}

// What .zarray says of the array, checked.
struct ArrayMetadata {
  Dtype dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> chunks;
  enum class Compressor { kNone, kGzip, kZlib, kZstd } compressor = Compressor::kNone;
  std::string separator;
  std::string fill;  // one element of the fill value in little-endian bytes
};

// `text`, the contents of `file`, as a JSON object.
absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& file, const std::string& text) {
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(file, ": not JSON: ", e.what()));
  }
  if (!meta.is_object()) return absl::DataLossError(absl::StrCat(file, ": not a JSON object"));
  return meta;
}

// The compressor: null (none), gzip, zlib or zstd.
absl::Status ParseCompressor(const std::string& file, const nlohmann::json& meta, ArrayMetadata* out) {
  if (!meta.contains("compressor") || meta["compressor"].is_null()) return absl::OkStatus();
  const nlohmann::json& c = meta["compressor"];
  const std::string id = c.is_object() && c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : "";
  using C = ArrayMetadata::Compressor;
  if (id == "gzip") {
    out->compressor = C::kGzip;
  } else if (id == "zlib") {
    out->compressor = C::kZlib;
  } else if (id == "zstd") {
    out->compressor = C::kZstd;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": compressor ", c.dump(), " is not supported; allowed: gzip, zlib, zstd, null"));
  }
  return absl::OkStatus();
}

// The fields of `meta`, read from `file`, checked in turn: zarr_format,
// order, filters, dtype, shape, chunks, compressor, dimension_separator,
// fill_value.
absl::StatusOr<ArrayMetadata> ParseMetadata(const std::string& file, const nlohmann::json& meta) {
  if (meta.value("zarr_format", 0) != 2) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": zarr_format ",
                                                   meta.value("zarr_format", nlohmann::json()).dump(),
                                                   "; only zarr v2 arrays are supported"));
  }
  if (meta.value("order", std::string("C")) != "C") {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": order ", meta["order"].dump(), "; only \"C\" is supported"));
  }
  if (meta.contains("filters") && !meta["filters"].is_null() && !meta["filters"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": filters ", meta["filters"].dump(), " are not supported"));
  }
  ArrayMetadata out;
  absl::StatusOr<Dtype> dtype = ParseDtype(file, meta.value("dtype", nlohmann::json()));
  if (!dtype.ok()) return dtype.status();
  out.dtype = *dtype;
  absl::StatusOr<std::vector<int64_t>> shape = Dims(file, meta, "shape");
  if (!shape.ok()) return shape.status();
  out.shape = std::move(*shape);
  absl::StatusOr<std::vector<int64_t>> chunks = Dims(file, meta, "chunks");
  if (!chunks.ok()) return chunks.status();
  out.chunks = std::move(*chunks);
  if (out.chunks.size() != out.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": chunks [", absl::StrJoin(out.chunks, ", "), "] and shape [",
                                                   absl::StrJoin(out.shape, ", "), "] differ in rank"));
  }
  for (int64_t c : out.chunks) {
    if (c == 0) return absl::InvalidArgumentError(absl::StrCat(file, ": chunks: a chunk size of 0"));
  }
  absl::Status compressor = ParseCompressor(file, meta, &out);
  if (!compressor.ok()) return compressor;
  out.separator = meta.value("dimension_separator", std::string("."));
  if (out.separator != "." && out.separator != "/") {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": dimension_separator \"", out.separator, "\"; allowed: . /"));
  }
  absl::StatusOr<std::string> fill = FillBytes(file, meta.value("fill_value", nlohmann::json()), out.dtype);
  if (!fill.ok()) return fill.status();
  out.fill = std::move(*fill);
  return out;
}

struct ElementCounts {
  uint64_t array = 1;
  uint64_t chunk = 1;
};

// The elements of the array and of one chunk, refused (kResourceExhausted)
// when either's bytes would pass `max_bytes`, with overflow checked against
// the limit.
absl::StatusOr<ElementCounts> CountElements(const std::string& file, const ArrayMetadata& meta, uint64_t max_bytes) {
  ElementCounts n;
  for (size_t d = 0; d < meta.shape.size(); ++d) {
    const uint64_t s = static_cast<uint64_t>(meta.shape[d]);
    if (s != 0 && n.array > max_bytes / s) {
      return absl::ResourceExhaustedError(absl::StrCat(file, ": larger than ", max_bytes, " bytes"));
    }
    n.array *= s;
    const uint64_t c = static_cast<uint64_t>(meta.chunks[d]);
    if (n.chunk > max_bytes / c) {
      return absl::ResourceExhaustedError(absl::StrCat(file, ": chunks larger than ", max_bytes, " bytes"));
    }
    n.chunk *= c;
  }
  const uint64_t item = static_cast<uint64_t>(meta.dtype.size);
  if (n.array > max_bytes / item || n.chunk > max_bytes / item) {
    return absl::ResourceExhaustedError(absl::StrCat(file, ": larger than ", max_bytes, " bytes"));
  }
  return n;
}

// The chunk stored at `path` as `chunk_elements` little-endian elements:
// decompressed, byte-swapped from big-endian, or the fill value when the
// key is missing.
absl::StatusOr<std::string> ReadChunk(const std::string& path, const ZarrKeyReader& read, const ArrayMetadata& meta,
                                      uint64_t chunk_elements) {
  const uint64_t item = static_cast<uint64_t>(meta.dtype.size);
  absl::StatusOr<std::optional<std::string>> raw = read(path);
  if (!raw.ok()) return raw.status();
  std::string chunk;
  using C = ArrayMetadata::Compressor;
  if (!raw->has_value()) {
    chunk.resize(chunk_elements * item);
    for (uint64_t e = 0; e < chunk_elements; ++e) std::memcpy(&chunk[e * item], meta.fill.data(), item);
  } else if (meta.compressor == C::kGzip || meta.compressor == C::kZlib) {
    absl::StatusOr<std::string> inflated = Inflate(**raw, chunk_elements * item, meta.compressor == C::kGzip, path);
    if (!inflated.ok()) return inflated.status();
    chunk = std::move(*inflated);
  } else {
    if (meta.compressor == C::kZstd) {
      absl::StatusOr<std::string> z = ZstdDecompress(**raw, chunk_elements * item, path);
      if (!z.ok()) return z.status();
      **raw = std::move(*z);
    }
    if ((*raw)->size() != chunk_elements * item) {
      return absl::DataLossError(
          absl::StrCat(path, ": ", (*raw)->size(), " bytes; the chunk has ", chunk_elements * item));
    }
    chunk = std::move(**raw);
  }
  if (meta.dtype.big_endian) {
    for (uint64_t e = 0; e < chunk_elements; ++e) std::reverse(&chunk[e * item], &chunk[e * item] + item);
  }
  return chunk;
}

// Calls `run(chunk_offset, array_offset, bytes)` for each innermost run of
// the in-bounds part of the chunk at grid position `index`, offsets in
// bytes. `stride` and `chunk_stride` are the row-major strides of the array
// and of a chunk, in elements.
template <typename Run>
void ForEachRun(const std::vector<int64_t>& index, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& chunks, uint64_t item, const std::vector<uint64_t>& stride,
                const std::vector<uint64_t>& chunk_stride, Run run) {
  const int rank = static_cast<int>(shape.size());
  std::vector<int64_t> origin(rank), extent(rank);
  uint64_t runs = 1;
  for (int d = 0; d < rank; ++d) {
    origin[d] = index[d] * chunks[d];
    extent[d] = std::min(chunks[d], shape[d] - origin[d]);
    if (d < rank - 1) runs *= static_cast<uint64_t>(extent[d]);
  }
  const uint64_t run_bytes = (rank == 0 ? 1 : static_cast<uint64_t>(extent[rank - 1])) * item;
  std::vector<int64_t> within(rank, 0);
  for (uint64_t r = 0; r < runs; ++r) {
    uint64_t src = 0, dst = 0;
    for (int d = 0; d < rank; ++d) {
      src += static_cast<uint64_t>(within[d]) * chunk_stride[d];
      dst += static_cast<uint64_t>(origin[d] + within[d]) * stride[d];
    }
    run(src * item, dst * item, run_bytes);
    for (int d = rank - 2; d >= 0; --d) {
      if (++within[d] < extent[d]) break;
      within[d] = 0;
    }
  }
}

// Row-major strides of an array of `shape` and of its chunks, in elements.
void Strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& chunks, std::vector<uint64_t>* stride,
             std::vector<uint64_t>* chunk_stride) {
  const int rank = static_cast<int>(shape.size());
  stride->assign(rank, 1);
  chunk_stride->assign(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    (*stride)[d] = (*stride)[d + 1] * static_cast<uint64_t>(shape[d + 1]);
    (*chunk_stride)[d] = (*chunk_stride)[d + 1] * static_cast<uint64_t>(chunks[d + 1]);
  }
}

// The next grid position after `index` in C order; false after the last.
bool NextChunk(const std::vector<int64_t>& grid, std::vector<int64_t>* index) {
  for (int d = static_cast<int>(grid.size()) - 1; d >= 0; --d) {
    if (++(*index)[d] < grid[d]) return true;
    (*index)[d] = 0;
  }
  return false;
}

// A chunk's key: its grid position joined with `separator`; "0" for a scalar.
std::string ChunkKey(const std::vector<int64_t>& index, const std::string& separator) {
  return index.empty() ? "0" : absl::StrJoin(index, separator);
}

// `in` gzipped at `level` (zlib's gzip wrapper, as TensorStore writes it).
absl::StatusOr<std::string> Gzip(const std::string& in, int level) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError(absl::StrCat("zlib: deflateInit2 failed (level ", level, ")"));
  }
  std::string out(deflateBound(&z, in.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return absl::InternalError(absl::StrCat("zlib: deflate failed (status ", rc, ")"));
  return out;
}

// Creates `path` (which must not exist) with `contents`, fsynced if `sync`.
absl::Status WriteNewFile(const std::string& path, const std::string& contents, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("create", path, errno);
  if (!WriteFully(fd, contents.data(), contents.size()) || (sync && ::fsync(fd) != 0)) {
    const int error = errno;
    ::close(fd);
    return FileError("write", path, error);
  }
  if (::close(fd) != 0) return FileError("close", path, errno);
  return absl::OkStatus();
}

// The zarr dtype string of a ZarrArray dtype ("" for an unknown one).
std::string ZarrDtype(const std::string& dtype) {
  if (dtype == "bfloat16") return "bfloat16";
  if (dtype == "float16") return "<f2";
  if (dtype == "float32") return "<f4";
  if (dtype == "float64") return "<f8";
  if (dtype == "int32") return "<i4";
  if (dtype == "int64") return "<i8";
  return "";
}

// Why `array` cannot be written with `chunks` as a zarr array, or OK.
absl::Status CheckWritable(const std::string& dir, const ZarrArray& array, const std::vector<int64_t>& chunks) {
  const int item = ZarrDtypeSize(array.dtype);
  if (item == 0) return absl::InvalidArgumentError(absl::StrCat(dir, ": dtype \"", array.dtype, "\" has no zarr form"));
  if (chunks.size() != array.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": chunks [", absl::StrJoin(chunks, ", "), "] for shape [",
                                                   absl::StrJoin(array.shape, ", "), "]"));
  }
  uint64_t elements = 1;
  for (size_t d = 0; d < chunks.size(); ++d) {
    if (chunks[d] < 1 || array.shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": chunks [", absl::StrJoin(chunks, ", "), "] for shape [",
                                                     absl::StrJoin(array.shape, ", "), "]"));
    }
    elements *= static_cast<uint64_t>(array.shape[d]);
  }
  if (array.data.size() != elements * static_cast<uint64_t>(item)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", array.data.size(), " bytes for shape [",
                                                   absl::StrJoin(array.shape, ", "), "] of ", array.dtype));
  }
  return absl::OkStatus();
}

}  // namespace

int ZarrDtypeSize(const std::string& dtype) {
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float64" || dtype == "int64") return 8;
  return 0;
}

absl::StatusOr<ZarrArray> ReadZarrArray(const std::string& dir, uint64_t max_bytes) {
  return ReadZarrArrayFrom(
      dir,
      [](const std::string& path) -> absl::StatusOr<std::optional<std::string>> {
        bool missing = false;
        absl::StatusOr<std::string> raw = ReadWhole(path, &missing);
        if (!raw.ok()) return raw.status();
        if (missing) return std::optional<std::string>();
        return std::optional<std::string>(std::move(*raw));
      },
      max_bytes);
}

absl::StatusOr<ZarrArray> ReadZarrArrayFrom(const std::string& dir, const ZarrKeyReader& read, uint64_t max_bytes) {
  const std::string file = dir + "/.zarray";
  absl::StatusOr<std::optional<std::string>> text = read(file);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return absl::NotFoundError(absl::StrCat(file, ": cannot read"));
  absl::StatusOr<nlohmann::json> json = ParseJsonObject(file, **text);
  if (!json.ok()) return json.status();
  absl::StatusOr<ArrayMetadata> meta = ParseMetadata(file, *json);
  if (!meta.ok()) return meta.status();
  absl::StatusOr<ElementCounts> elements = CountElements(file, *meta, max_bytes);
  if (!elements.ok()) return elements.status();
  const uint64_t item = static_cast<uint64_t>(meta->dtype.size);
  ZarrArray out;
  out.dtype = meta->dtype.name;
  out.shape = meta->shape;
  out.data.resize(elements->array * item);
  if (elements->array == 0) return out;

  const int rank = static_cast<int>(meta->shape.size());
  std::vector<uint64_t> stride, chunk_stride;
  Strides(meta->shape, meta->chunks, &stride, &chunk_stride);
  std::vector<int64_t> grid(rank), index(rank, 0);
  for (int d = 0; d < rank; ++d) grid[d] = (meta->shape[d] + meta->chunks[d] - 1) / meta->chunks[d];
  do {
    absl::StatusOr<std::string> chunk =
        ReadChunk(dir + "/" + ChunkKey(index, meta->separator), read, *meta, elements->chunk);
    if (!chunk.ok()) return chunk.status();
    ForEachRun(index, meta->shape, meta->chunks, item, stride, chunk_stride,
               [&](uint64_t in_chunk, uint64_t in_array, uint64_t bytes) {
                 std::memcpy(&out.data[in_array], &(*chunk)[in_chunk], bytes);
               });
  } while (NextChunk(grid, &index));
  return out;
}

std::vector<int64_t> ChooseZarrChunks(const std::vector<int64_t>& shape, uint64_t target_elements) {
  // divisors[d]: the divisors of shape[d] in increasing order; the chunk's
  // dimension d is the last one left.
  std::vector<std::vector<int64_t>> divisors(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    for (int64_t i = 1; i <= shape[d]; ++i) {
      if (shape[d] % i == 0) divisors[d].push_back(i);
    }
    if (divisors[d].empty()) divisors[d].push_back(1);
  }
  const uint64_t target = std::max<uint64_t>(target_elements, 1);
  auto total = [&divisors] {
    uint64_t t = 1;
    for (const auto& f : divisors) {
      const uint64_t size = static_cast<uint64_t>(f.back());
      t = t > UINT64_MAX / size ? UINT64_MAX : t * size;
    }
    return t;
  };
  while (total() > target) {
    // The largest dimension (the first of equal ones) to its next divisor.
    size_t largest = 0;
    for (size_t d = 1; d < divisors.size(); ++d) {
      if (divisors[d].back() > divisors[largest].back()) largest = d;
    }
    divisors[largest].pop_back();
  }
  std::vector<int64_t> chunks;
  for (const auto& f : divisors) chunks.push_back(f.back());
  return chunks;
}

std::string ZarrMetadataJson(const std::string& dtype, const std::vector<int64_t>& shape,
                             const std::vector<int64_t>& chunks, int gzip_level) {
  // nlohmann::json keeps keys sorted, as TensorStore writes them.
  const nlohmann::json meta = {
      {"chunks", chunks},
      {"compressor", {{"id", "gzip"}, {"level", gzip_level}}},
      {"dimension_separator", "."},
      {"dtype", ZarrDtype(dtype)},
      {"fill_value", nullptr},
      {"filters", nullptr},
      {"order", "C"},
      {"shape", shape},
      {"zarr_format", 2},
  };
  return meta.dump();
}

absl::Status WriteZarrArray(const std::string& dir, const ZarrArray& array, const std::vector<int64_t>& chunks,
                            const ZarrWriteOptions& options) {
  absl::Status writable = CheckWritable(dir, array, chunks);
  if (!writable.ok()) return writable;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno == EEXIST) return absl::AlreadyExistsError(absl::StrCat(dir, ": already exists"));
    return FileError("create directory", dir, errno);
  }
  absl::Status s = WriteNewFile(dir + "/.zarray",
                                ZarrMetadataJson(array.dtype, array.shape, chunks, options.gzip_level), options.sync);
  if (!s.ok()) return s;
  const int rank = static_cast<int>(array.shape.size());
  const uint64_t item = static_cast<uint64_t>(ZarrDtypeSize(array.dtype));
  uint64_t chunk_elements = 1;
  std::vector<int64_t> grid(rank), index(rank, 0);
  for (int d = 0; d < rank; ++d) {
    chunk_elements *= static_cast<uint64_t>(chunks[d]);
    grid[d] = (array.shape[d] + chunks[d] - 1) / chunks[d];
    if (grid[d] == 0) return options.sync ? FsyncPath(dir, /*directory=*/true) : absl::OkStatus();  // no chunks
  }
  std::vector<uint64_t> stride, chunk_stride;
  Strides(array.shape, chunks, &stride, &chunk_stride);
  std::string chunk;
  do {
    chunk.assign(chunk_elements * item, '\0');  // the part outside the array: zero
    ForEachRun(index, array.shape, chunks, item, stride, chunk_stride,
               [&](uint64_t in_chunk, uint64_t in_array, uint64_t bytes) {
                 std::memcpy(&chunk[in_chunk], &array.data[in_array], bytes);
               });
    absl::StatusOr<std::string> compressed = Gzip(chunk, options.gzip_level);
    if (!compressed.ok()) return compressed.status();
    s = WriteNewFile(dir + "/" + ChunkKey(index, "."), *compressed, options.sync);
    if (!s.ok()) return s;
  } while (NextChunk(grid, &index));
  return options.sync ? FsyncPath(dir, /*directory=*/true) : absl::OkStatus();
}

}  // namespace trainyard
