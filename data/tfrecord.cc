#include "data/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/tf_example.pb.h"

namespace trainyard {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + its CRC
constexpr size_t kFooterBytes = 4;   // the data's CRC

uint32_t LoadLe32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts (x86-64, aarch64)
  return v;
}

uint64_t LoadLe64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void StoreLe32(uint32_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 4); }
void StoreLe64(uint64_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 8); }

bool HeaderValid(const char* header) { return LoadLe32(header + 8) == MaskCrc32c(Crc32c({header, 8})); }

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

// GZIP (one or more members, as TFRecordWriter's GZIP option and
// concatenated files make) to the stream it holds.
absl::StatusOr<std::string> Gunzip(const std::string& path, const std::string& compressed) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  std::array<char, 1 << 16> chunk;
  int rc = Z_OK;
  while (true) {
    zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
    zs.avail_out = chunk.size();
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(chunk.data(), chunk.size() - zs.avail_out);
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // the next member
      continue;
    }
    if (rc != Z_OK) break;
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      rc = Z_BUF_ERROR;  // the input ended inside a member
      break;
    }
  }
  const std::string why = zs.msg != nullptr ? zs.msg : (rc == Z_BUF_ERROR ? "truncated" : "not GZIP data");
  const uint64_t at = zs.total_in;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    return absl::DataLossError(absl::StrCat(path, ": damaged GZIP data near compressed byte ", at, " (", why, ")"));
  }
  return out;
}

}  // namespace

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() + kFooterBytes);
  StoreLe64(data.size(), &out);
  StoreLe32(MaskCrc32c(Crc32c(out)), &out);
  out.append(data);
  StoreLe32(MaskCrc32c(Crc32c({data.data(), data.size()})), &out);
  return out;
}

absl::StatusOr<std::unique_ptr<TfRecordFile>> TfRecordFile::Open(const std::string& path, const Visitor& visit) {
  auto file = std::unique_ptr<TfRecordFile>(new TfRecordFile(path));
  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd_ < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot read (", std::strerror(errno), ")"));
  const off_t size = ::lseek(file->fd_, 0, SEEK_END);
  if (size < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot read (", std::strerror(errno), ")"));
  file->size_ = static_cast<uint64_t>(size);
  // GZIP by name, or by its magic bytes where they are not a valid record.
  std::string head;
  if (file->size_ >= 3) {
    if (absl::Status s = file->ReadAt(0, std::min<uint64_t>(kHeaderBytes, file->size_), &head); !s.ok()) return s;
  }
  const bool magic = head.size() >= 3 && head.compare(0, 3, "\x1f\x8b\x08") == 0;
  file->gzip_ = absl::EndsWith(path, ".gz") || (magic && !(head.size() == kHeaderBytes && HeaderValid(head.data())));
  if (file->gzip_) {
    absl::StatusOr<std::string> compressed = ReadWholeFile(path);
    if (!compressed.ok()) return compressed.status();
    absl::StatusOr<std::string> stream = Gunzip(path, *compressed);
    if (!stream.ok()) return stream.status();
    file->contents_ = std::move(*stream);
    file->size_ = file->contents_.size();
    ::close(file->fd_);
    file->fd_ = -1;
  }
  if (absl::Status s = file->Index(visit); !s.ok()) return s;
  return file;
}

TfRecordFile::~TfRecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TfRecordFile::ReadAt(uint64_t offset, size_t n, std::string* out) const {
  out->resize(n);
  if (gzip_) {
    if (offset > contents_.size() || n > contents_.size() - offset) return absl::OutOfRangeError("past the end");
    std::memcpy(out->data(), contents_.data() + offset, n);
    return absl::OkStatus();
  }
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out->data() + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::DataLossError(absl::StrCat(path_, ": cannot read: ", std::strerror(errno)));
    if (got == 0) return absl::OutOfRangeError("past the end");
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status TfRecordFile::Damaged(uint64_t offset, const std::string& why) const {
  return absl::DataLossError(absl::StrCat(path_, ": damaged record at byte offset ", offset,
                                          gzip_ ? " of the decompressed stream" : "", ": ", why));
}

absl::Status TfRecordFile::Index(const Visitor& visit) {
  std::string header, body;
  uint64_t offset = 0;
  while (offset < size_) {
    if (size_ - offset < kHeaderBytes) return Damaged(offset, "truncated (the file ends inside its header)");
    if (absl::Status s = ReadAt(offset, kHeaderBytes, &header); !s.ok()) return s;
    if (!HeaderValid(header.data())) return Damaged(offset, "the length's CRC does not match");
    const uint64_t length = LoadLe64(header.data());
    if (length > size_ - offset - kHeaderBytes || size_ - offset - kHeaderBytes - length < kFooterBytes) {
      return Damaged(offset, absl::StrCat("truncated (a record of ", length, " bytes; the file ends first)"));
    }
    if (absl::Status s = ReadAt(offset + kHeaderBytes, length + kFooterBytes, &body); !s.ok()) return s;
    const std::string_view data(body.data(), length);
    if (LoadLe32(body.data() + length) != MaskCrc32c(Crc32c({data.data(), data.size()}))) {
      return Damaged(offset, "the data's CRC does not match");
    }
    if (visit) {
      if (absl::Status s = visit(size(), static_cast<int64_t>(offset), data); !s.ok()) return s;
    }
    records_.push_back({offset, length});
    offset += kHeaderBytes + length + kFooterBytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TfRecordFile::Read(int64_t index) const {
  if (index < 0 || index >= size()) return absl::OutOfRangeError(absl::StrCat("record ", index, " of ", size()));
  const Record& r = records_[static_cast<size_t>(index)];
  std::string bytes;
  if (!ReadAt(r.offset, kHeaderBytes + r.length + kFooterBytes, &bytes).ok()) {
    return Damaged(r.offset, "the file changed while in use (it ends first)");
  }
  if (!HeaderValid(bytes.data()) || LoadLe64(bytes.data()) != r.length) {
    return Damaged(r.offset, "the length's CRC does not match, or the file changed while in use");
  }
  const std::string_view data(bytes.data() + kHeaderBytes, r.length);
  if (LoadLe32(bytes.data() + kHeaderBytes + r.length) != MaskCrc32c(Crc32c({data.data(), data.size()}))) {
    return Damaged(r.offset, "the data's CRC does not match");
  }
  return std::string(data);
}

namespace {

// Feature `name` of `features`, or kInvalidArgument listing the ones there.
absl::StatusOr<const tfexample::Feature*> FindFeature(
    const google::protobuf::Map<std::string, tfexample::Feature>& features, const std::string& name) {
  auto it = features.find(name);
  if (it != features.end()) return &it->second;
  std::vector<std::string> names;
  for (const auto& [k, v] : features) names.push_back(k);
  std::sort(names.begin(), names.end());
  return absl::InvalidArgumentError(absl::StrCat(
      "no feature \"", name, "\"; the example has: ", names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
}

const char* KindName(const tfexample::Feature& f) {
  switch (f.kind_case()) {
    case tfexample::Feature::kBytesList:
      return "bytes_list";
    case tfexample::Feature::kFloatList:
      return "float_list";
    case tfexample::Feature::kInt64List:
      return "int64_list";
    default:
      return "empty";
  }
}

absl::StatusOr<tfexample::Example> ParseProto(std::string_view serialized) {
  tfexample::Example proto;
  if (!proto.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    return absl::InvalidArgumentError("not a tf.train.Example");
  }
  return proto;
}

}  // namespace

std::string PackTokenIds(const std::vector<int32_t>& ids) {
  std::string out(ids.size() * 4, '\0');
  if (!ids.empty()) std::memcpy(out.data(), ids.data(), out.size());  // little-endian hosts
  return out;
}

std::vector<int32_t> UnpackTokenIds(std::string_view packed) {
  std::vector<int32_t> ids(packed.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), packed.data(), ids.size() * 4);
  return ids;
}

absl::StatusOr<Example> ParseTfExampleTokens(std::string_view serialized, const std::vector<std::string>& fields) {
  absl::StatusOr<tfexample::Example> proto = ParseProto(serialized);
  if (!proto.ok()) return proto.status();
  Example ex;
  for (const std::string& name : fields) {
    absl::StatusOr<const tfexample::Feature*> f = FindFeature(proto->features().feature(), name);
    if (!f.ok()) return f.status();
    if ((*f)->kind_case() != tfexample::Feature::kInt64List) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature \"", name, "\" is ", KindName(**f), ", not token ids (an int64_list)"));
    }
    std::vector<int32_t> ids;
    ids.reserve(static_cast<size_t>((*f)->int64_list().value_size()));
    for (int64_t id : (*f)->int64_list().value()) {
      if (id < 0 || id > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("feature \"", name, "\" has the token id ", id));
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    ex[name] = PackTokenIds(ids);
  }
  return ex;
}

absl::StatusOr<Example> ParseTfExample(std::string_view serialized, const std::vector<std::string>& fields) {
  absl::StatusOr<tfexample::Example> proto = ParseProto(serialized);
  if (!proto.ok()) return proto.status();
  Example ex;
  for (const std::string& name : fields) {
    absl::StatusOr<const tfexample::Feature*> found = FindFeature(proto->features().feature(), name);
    if (!found.ok()) return found.status();
    const tfexample::Feature& f = **found;
    if (f.kind_case() != tfexample::Feature::kBytesList) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature \"", name, "\" is ", KindName(f), ", not text (a bytes_list of one value)"));
    }
    if (f.bytes_list().value_size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature \"", name, "\" has ", f.bytes_list().value_size(), " values; a text feature has one"));
    }
    if (!IsValidUtf8(f.bytes_list().value(0))) {
      return absl::InvalidArgumentError(absl::StrCat("feature \"", name, "\" is not valid UTF-8 text"));
    }
    ex[name] = f.bytes_list().value(0);
  }
  return ex;
}

namespace {

using RecordParser = absl::StatusOr<Example> (*)(std::string_view, const std::vector<std::string>&);

class TfRecordSource : public ExampleSource {
 public:
  struct Entry {
    int32_t file;
    int64_t record;
  };

  static absl::StatusOr<std::unique_ptr<ExampleSource>> Open(const std::vector<std::string>& patterns,
                                                             const FileSourceOptions& options, RecordParser parse) {
    if (patterns.empty()) return absl::InvalidArgumentError("no files given");
    absl::StatusOr<std::vector<std::string>> paths = ExpandFilePatterns(patterns);
    if (!paths.ok()) return paths.status();
    auto source = std::unique_ptr<TfRecordSource>(new TfRecordSource(options, parse));
    for (size_t f = 0; f < paths->size(); ++f) {
      const std::string& path = (*paths)[f];
      auto visit = [&](int64_t index, int64_t offset, std::string_view data) -> absl::Status {
        absl::Status bad = parse(data, options.fields).status();
        if (!bad.ok()) {
          if (options.strict) {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": record ", index, " at byte offset ", offset, ": ", bad.message()));
          }
          ++source->skipped_;
          return absl::OkStatus();
        }
        source->entries_.push_back({static_cast<int32_t>(f), index});
        return absl::OkStatus();
      };
      absl::StatusOr<std::unique_ptr<TfRecordFile>> file = TfRecordFile::Open(path, visit);
      if (!file.ok()) return file.status();
      source->files_.push_back(std::move(*file));
    }
    return std::unique_ptr<ExampleSource>(std::move(source));
  }

  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  int64_t skipped() const override { return skipped_; }

  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index < 0 || index >= size()) {
      return absl::OutOfRangeError(absl::StrCat("example ", index, " of ", size()));
    }
    const Entry& e = entries_[static_cast<size_t>(index)];
    const TfRecordFile& file = *files_[static_cast<size_t>(e.file)];
    absl::StatusOr<std::string> data = file.Read(e.record);
    if (!data.ok()) return data.status();
    absl::StatusOr<Example> ex = parse_(*data, options_.fields);
    if (!ex.ok()) {
      return absl::DataLossError(absl::StrCat(file.path(), ": record ", e.record, " at byte offset ",
                                              file.offset(e.record),
                                              ": changed while in use: ", ex.status().message()));
    }
    return ex;
  }

 private:
  TfRecordSource(FileSourceOptions options, RecordParser parse) : options_(std::move(options)), parse_(parse) {}

  FileSourceOptions options_;
  RecordParser parse_;
  std::vector<std::unique_ptr<TfRecordFile>> files_;
  std::vector<Entry> entries_;
  int64_t skipped_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordSource(const std::vector<std::string>& paths,
                                                                  const FileSourceOptions& options) {
  return TfRecordSource::Open(paths, options, ParseTfExample);
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordTokenSource(const std::vector<std::string>& paths,
                                                                       const FileSourceOptions& options) {
  return TfRecordSource::Open(paths, options, ParseTfExampleTokens);
}

}  // namespace trainyard
