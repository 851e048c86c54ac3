#include "trainer/event_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "proto/tensorboard.pb.h"

namespace trainyard {
namespace {

std::string LittleEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

std::string LittleEndian32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

uint32_t MaskedCrc32c(absl::string_view data) { return MaskCrc32c(Crc32c(data)); }

absl::Status MakeDirs(const std::string& dir) {
  std::string prefix;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = dir.find('/', pos + 1);
    prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("cannot create ", prefix, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& dir) {
  absl::Status made = MakeDirs(dir);
  if (!made.ok()) return made;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string path = absl::StrCat(dir, "/events.out.tfevents.", std::time(nullptr), ".", host);
  // Two writers in the same second (e.g. a restart) must not share a file.
  for (int i = 1; access(path.c_str(), F_OK) == 0; ++i) {
    path = absl::StrCat(dir, "/events.out.tfevents.", std::time(nullptr), ".", host, ".", i);
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  tensorboard::Event version;
  version.set_wall_time(static_cast<double>(std::time(nullptr)));
  version.set_file_version("brain.Event:2");
  absl::Status status = writer->WriteRecord(version.SerializeAsString());
  if (status.ok()) status = writer->Flush();  // the point a failed summary is cut back to
  if (!status.ok()) return status;
  return writer;
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EventFileWriter::WriteRecord(const std::string& data) {
  const std::string length = LittleEndian64(data.size());
  const std::string record =
      absl::StrCat(length, LittleEndian32(MaskedCrc32c(length)), data, LittleEndian32(MaskedCrc32c(data)));
  if (file_ == nullptr) {
    file_ = std::fopen(path_.c_str(), "ab");
    if (file_ == nullptr) return Rollback("reopen", errno);
  }
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) return Rollback("write", errno);
  return absl::OkStatus();
}

absl::Status EventFileWriter::Rollback(const std::string& what, int error) {
  if (file_ != nullptr) std::fclose(file_);  // what it still buffers may fail too: cut below
  file_ = nullptr;
  std::string detail = absl::StrCat("the records since its last flush were dropped; it ends at byte ", durable_);
  if (::truncate(path_.c_str(), durable_) != 0) {
    detail = absl::StrCat("and cutting it back to byte ", durable_, " failed: ", std::strerror(errno));
  } else {
    file_ = std::fopen(path_.c_str(), "ab");  // null: the next write tries again
  }
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path_, ": ", std::strerror(error), "; ", detail));
}

absl::Status EventFileWriter::WriteScalar(absl::string_view tag, float value, int64_t step, double wall_time) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(value);
  return WriteRecord(event.SerializeAsString());
}

absl::Status EventFileWriter::Flush() {
  if (file_ == nullptr) return absl::OkStatus();  // nothing written since the rollback
  if (std::fflush(file_) != 0) return Rollback("flush", errno);
  const long end = std::ftell(file_);  // NOLINT(runtime/int): ftell's type
  if (end < 0) return Rollback("tell the length of", errno);
  durable_ = end;
  return absl::OkStatus();
}

}  // namespace trainyard
