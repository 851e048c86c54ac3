// Writes TensorBoard event files: TFRecord framing (little-endian length,
// masked CRC32C of the length, the serialized Event, masked CRC32C of it), a
// "brain.Event:2" version record first, then one Event per scalar summary.
// Files are named events.out.tfevents.<unix seconds>.<host> as TensorFlow
// names them, so TensorBoard and tf.summary readers find them.
//
// A failed write or flush (a full disk) never leaves a torn record: the file
// is cut back to its length after the last successful Flush, so the records
// written since (one summary) are dropped whole and the file stays readable
// to its end; later writes append after that point.
//
// Thread-safety: not thread-safe (MetricsManager serialises writes).
#ifndef TRAINYARD_TRAINER_EVENT_WRITER_H_
#define TRAINYARD_TRAINER_EVENT_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/crc32c.h"

namespace trainyard {

// TFRecord's masked CRC-32C of `data` (common/crc32c.h), as event files
// frame each record's length and data.
uint32_t MaskedCrc32c(absl::string_view data);

class EventFileWriter {
 public:
  // Creates `dir` (and parents) and a new event file in it.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& dir);
  ~EventFileWriter();

  absl::Status WriteScalar(absl::string_view tag, float value, int64_t step, double wall_time);
  absl::Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(const std::string& data);
  // After a failed write or flush: cuts the file back to `durable_` bytes
  // and reopens it for appending; `error` (with what was dropped) returned.
  absl::Status Rollback(const std::string& what, int error);

  std::string path_;
  std::FILE* file_;      // null after a rollback that could not reopen it
  int64_t durable_ = 0;  // bytes on disk as of the last successful Flush
};

// mkdir -p.
absl::Status MakeDirs(const std::string& dir);

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_EVENT_WRITER_H_
