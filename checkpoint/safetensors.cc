#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "checkpoint/crash_points.h"
#include "common/durable_file.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

// A header larger than this is not a real header (HF caps it at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeEntry {
  SafeDtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {SafeDtype::kF64, "F64", 8},   {SafeDtype::kF32, "F32", 4}, {SafeDtype::kF16, "F16", 2},
    {SafeDtype::kBF16, "BF16", 2}, {SafeDtype::kI64, "I64", 8}, {SafeDtype::kI32, "I32", 4},
    {SafeDtype::kI16, "I16", 2},   {SafeDtype::kI8, "I8", 1},   {SafeDtype::kU8, "U8", 1},
    {SafeDtype::kBool, "BOOL", 1},
};

bool ParseDtype(const std::string& name, SafeDtype* dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (name == e.name) {
      *dtype = e.dtype;
      return true;
    }
  }
  return false;
}

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": not a valid safetensors file: ", what));
}

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// The JSON header of the file mapped at `bytes` (`file_size` bytes); its
// length in `header_len`.
absl::StatusOr<nlohmann::json> ParseHeader(const std::string& path, const uint8_t* bytes, uint64_t file_size,
                                           uint64_t* header_len) {
  *header_len = 0;
  for (int i = 7; i >= 0; --i) *header_len = (*header_len << 8) | bytes[i];
  if (*header_len > kMaxHeaderBytes || *header_len > file_size - 8) {
    return Corrupt(path, absl::StrCat("header length ", *header_len, " exceeds the file (", file_size,
                                      " bytes): truncated or not safetensors"));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + *header_len);
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(path, absl::StrCat("header is not JSON: ", e.what()));
  }
  if (!header.is_object()) return Corrupt(path, "header is not a JSON object");
  return header;
}

// The header's "__metadata__" entry: a map of strings.
absl::Status ParseMetadata(const std::string& path, const nlohmann::json& entry,
                           std::map<std::string, std::string>* metadata) {
  if (!entry.is_object()) return Corrupt(path, "__metadata__ is not an object");
  for (auto m = entry.begin(); m != entry.end(); ++m) {
    if (!m.value().is_string()) {
      return Corrupt(path, absl::StrCat("__metadata__ value of \"", m.key(), "\" is not a string"));
    }
    (*metadata)[m.key()] = m.value().get<std::string>();
  }
  return absl::OkStatus();
}

// The header's entry for tensor `name`: its dtype, shape and byte range,
// which must lie in the `data_size` bytes of data and match the shape.
absl::StatusOr<SafeTensorInfo> ParseTensor(const std::string& path, const std::string& name,
                                           const nlohmann::json& entry, uint64_t data_size) {
  auto bad = [&](absl::string_view what) { return Corrupt(path, absl::StrCat("tensor \"", name, "\": ", what)); };
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
    return bad("needs dtype, shape and data_offsets");
  }
  SafeTensorInfo info;
  info.name = name;
  if (!entry["dtype"].is_string() || !ParseDtype(entry["dtype"].get<std::string>(), &info.dtype)) {
    return bad(absl::StrCat("unknown dtype ", entry["dtype"].dump()));
  }
  uint64_t numel = 1;
  if (!entry["shape"].is_array()) return bad("shape is not an array");
  for (const auto& dim : entry["shape"]) {
    if (!dim.is_number_unsigned()) return bad(absl::StrCat("bad dimension ", dim.dump()));
    const uint64_t d = dim.get<uint64_t>();
    if (d != 0 && numel > (1ull << 62) / d) return bad("shape overflows");
    numel *= d;
    info.shape.push_back(static_cast<int64_t>(d));
  }
  const auto& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return bad("data_offsets is not [begin, end]");
  }
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return bad(
        absl::StrCat("data_offsets [", begin, ", ", end, ") outside the ", data_size, " data bytes (truncated file?)"));
  }
  if (end - begin != numel * SafeDtypeSize(info.dtype)) {
    return bad(absl::StrCat(end - begin, " bytes for ", numel, " elements of ", SafeDtypeName(info.dtype)));
  }
  info.offset = begin;
  info.size = end - begin;
  return info;
}

// The tensors' byte ranges must tile the `data_size` bytes of data: no
// overlap, no holes.
absl::Status CheckTiling(const std::string& path, const std::vector<SafeTensorInfo>& tensors, uint64_t data_size) {
  std::vector<const SafeTensorInfo*> by_offset;
  for (const SafeTensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const SafeTensorInfo* a, const SafeTensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->size < b->size;
  });
  uint64_t expected = 0;
  for (const SafeTensorInfo* t : by_offset) {
    if (t->offset != expected) {
      return Corrupt(path, absl::StrCat("tensor \"", t->name, "\" starts at ", t->offset,
                                        t->offset < expected ? " inside another tensor" : " after a hole",
                                        " (expected ", expected, ")"));
    }
    expected += t->size;
  }
  if (expected != data_size) {
    return Corrupt(path, absl::StrCat(data_size - expected, " bytes after the last tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* SafeDtypeName(SafeDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t SafeDtypeSize(SafeDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

SafetensorsReader::~SafetensorsReader() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

const SafeTensorInfo* SafetensorsReader::Find(absl::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafeTensorInfo& t, absl::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return ErrnoStatus("cannot open", path);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return ErrnoStatus("cannot stat", path);
  }
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader);
  reader->path_ = path;
  reader->mapping_size_ = static_cast<size_t>(st.st_size);
  if (reader->mapping_size_ < 8) {
    close(fd);
    return Corrupt(path, absl::StrCat("only ", st.st_size, " bytes; the header length alone is 8"));
  }
  reader->mapping_ = mmap(nullptr, reader->mapping_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (reader->mapping_ == MAP_FAILED) {
    reader->mapping_ = nullptr;
    return ErrnoStatus("cannot map", path);
  }
  const uint8_t* bytes = static_cast<const uint8_t*>(reader->mapping_);
  const uint64_t file_size = reader->mapping_size_;
  uint64_t header_len = 0;
  absl::StatusOr<nlohmann::json> header = ParseHeader(path, bytes, file_size, &header_len);
  if (!header.ok()) return header.status();
  reader->data_ = bytes + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;

  for (auto it = header->begin(); it != header->end(); ++it) {
    if (it.key() == "__metadata__") {
      absl::Status s = ParseMetadata(path, it.value(), &reader->metadata_);
      if (!s.ok()) return s;
      continue;
    }
    absl::StatusOr<SafeTensorInfo> info = ParseTensor(path, it.key(), it.value(), data_size);
    if (!info.ok()) return info.status();
    reader->tensors_.push_back(std::move(*info));
  }
  absl::Status tiled = CheckTiling(path, reader->tensors_, data_size);
  if (!tiled.ok()) return tiled;
  std::sort(reader->tensors_.begin(), reader->tensors_.end(),
            [](const SafeTensorInfo& a, const SafeTensorInfo& b) { return a.name < b.name; });
  return reader;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafeTensorView>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafeTensorView& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat("invalid tensor name \"", t.name, "\""));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" given twice"));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\": negative dimension"));
      }
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t size = numel * SafeDtypeSize(t.dtype);
    header[t.name] = {{"dtype", SafeDtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string json = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (as Hugging Face does).
  json.append((8 - json.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(json.size()) >> (8 * i));

  return WriteFileAtomically(
      path,
      [&](int fd) {
        bool ok = WriteFully(fd, len, sizeof(len)) && WriteFully(fd, json.data(), json.size());
        for (const SafeTensorView& t : tensors) {
          if (!ok) break;
          uint64_t numel = 1;
          for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
          ok = WriteFully(fd, t.data, numel * SafeDtypeSize(t.dtype));
        }
        return ok;
      },
      [](DurableWritePoint point) {
        switch (point) {
          case DurableWritePoint::kWrittenNotSynced:
            return CrashPoint("safetensors: data written, not fsynced");
          case DurableWritePoint::kSyncedNotRenamed:
            return CrashPoint("safetensors: fsynced, not renamed");
          case DurableWritePoint::kRenamed:
            return CrashPoint("safetensors: renamed");
        }
      });
}

}  // namespace trainyard
