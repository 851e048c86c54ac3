// TFRecord files (TensorFlow's record framing) of tf.train.Example, as task
// splits. A record is framed as
//   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
//   `length` bytes of data, uint32 masked CRC32C of the data,
// and every CRC is checked, both when a file is indexed and when a record is
// read again: a damaged or truncated record is kDataLoss naming the file and
// the record's byte offset. GZIP-compressed files (TFRecordWriter's "GZIP"
// option: a name ending in .gz, or GZIP's magic bytes where the file is not
// a valid plain TFRecord) are decompressed into memory once; offsets are
// then bytes of the decompressed stream.
//
// Each file is indexed once (the offset and length of every record), so the
// source is random access like the line-oriented ones (data/source.h): the
// same files give the same example at the same index, which is what
// shuffling, sharding and resuming are made of.
//
// Thread-safety: TfRecordFile and the source are immutable after Open;
// Read and Get are thread-safe.
#ifndef TRAINYARD_DATA_TFRECORD_H_
#define TRAINYARD_DATA_TFRECORD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/crc32c.h"  // Crc32c, MaskCrc32c: TFRecord's checksums
#include "data/source.h"

namespace trainyard {

// One record framed as TFRecordWriter writes it.
std::string FrameTfRecord(std::string_view data);

class TfRecordFile {
 public:
  // Called with each record's index and data while the file is indexed; an
  // error stops indexing and is Open's error.
  using Visitor = std::function<absl::Status(int64_t index, int64_t offset, std::string_view data)>;

  // Indexes `path` (kNotFound if unreadable, kDataLoss for damage).
  static absl::StatusOr<std::unique_ptr<TfRecordFile>> Open(const std::string& path, const Visitor& visit = nullptr);
  ~TfRecordFile();
  TfRecordFile(const TfRecordFile&) = delete;
  TfRecordFile& operator=(const TfRecordFile&) = delete;

  const std::string& path() const { return path_; }
  bool gzip() const { return gzip_; }
  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  // Byte offset of record `index` (of the decompressed stream for GZIP).
  int64_t offset(int64_t index) const { return static_cast<int64_t>(records_[static_cast<size_t>(index)].offset); }
  // Record `index`'s data, its CRCs checked again (kDataLoss if the file
  // changed or was damaged since it was indexed).
  absl::StatusOr<std::string> Read(int64_t index) const;

 private:
  struct Record {
    uint64_t offset;
    uint64_t length;
  };
  explicit TfRecordFile(std::string path) : path_(std::move(path)) {}
  absl::Status ReadAt(uint64_t offset, size_t n, std::string* out) const;
  absl::Status Index(const Visitor& visit);
  absl::Status Damaged(uint64_t offset, const std::string& why) const;

  std::string path_;
  bool gzip_ = false;
  int fd_ = -1;           // plain files: read with pread
  std::string contents_;  // GZIP: the decompressed stream
  uint64_t size_ = 0;     // bytes of the (decompressed) stream
  std::vector<Record> records_;
};

// A serialized tf.train.Example's features named by `fields`, each a
// bytes_list of one value (a text feature, valid UTF-8). kInvalidArgument
// naming the feature otherwise (listing the features the example has).
absl::StatusOr<Example> ParseTfExample(std::string_view serialized, const std::vector<std::string>& fields);

// Token ids as an Example carries them for a pretokenized task
// (Task::pretokenized): little-endian int32s.
std::string PackTokenIds(const std::vector<int32_t>& ids);
std::vector<int32_t> UnpackTokenIds(std::string_view packed);

// As ParseTfExample for token features: each an int64_list (seqio writes
// its int32 token features so), packed with PackTokenIds. kInvalidArgument
// for a missing feature, another kind, or an id outside [0, 2^31).
absl::StatusOr<Example> ParseTfExampleTokens(std::string_view serialized, const std::vector<std::string>& fields);

// Examples of the TFRecord files `paths` (shell patterns such as
// "train.tfrecord-*-of-*" expand to their sorted matches), in order: record
// by record, file by file. `options.fields` names the text features each
// example keeps. A record that is not a tf.train.Example with those
// features fails with file and byte offset (strict) or is skipped and
// counted (lenient); damaged framing is kDataLoss in both modes.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordSource(const std::vector<std::string>& paths,
                                                                  const FileSourceOptions& options = {});
// The same with token features (ParseTfExampleTokens).
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordTokenSource(const std::vector<std::string>& paths,
                                                                       const FileSourceOptions& options = {});

}  // namespace trainyard

#endif  // TRAINYARD_DATA_TFRECORD_H_
