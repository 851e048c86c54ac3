#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) { return FileError(what, path, errno); }

}  // namespace

absl::Status FileError(absl::string_view what, const std::string& path, int error) {
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) return absl::UnavailableError(std::move(message));
  return absl::InternalError(std::move(message));
}

bool WriteFully(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path);
  const int rc = fsync(fd);
  const int saved = errno;
  close(fd);
  errno = saved;
  if (rc != 0) return ErrnoStatus("cannot fsync", path);
  return absl::OkStatus();
}

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status WriteFileAtomically(const std::string& path, const std::function<bool(int fd)>& write,
                                 const std::function<void(DurableWritePoint)>& at) {
  const std::string tmp = absl::StrCat(path, ".tmp-", getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", tmp);
  bool ok = write(fd);
  if (at) at(DurableWritePoint::kWrittenNotSynced);
  ok = ok && fsync(fd) == 0;
  const int saved = errno;
  close(fd);
  if (!ok) {
    unlink(tmp.c_str());
    errno = saved;
    return ErrnoStatus("cannot write", tmp);
  }
  if (at) at(DurableWritePoint::kSyncedNotRenamed);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status status = ErrnoStatus("cannot rename to", path);
    unlink(tmp.c_str());
    return status;
  }
  if (at) at(DurableWritePoint::kRenamed);
  // The rename itself becomes durable with the directory.
  return FsyncPath(ParentDirectory(path), true);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  return WriteFileAtomically(path, [contents](int fd) { return WriteFully(fd, contents.data(), contents.size()); });
}

}  // namespace trainyard
