// Files that are never seen half-written: the one way Trainyard replaces a
// file that a reader (another process, or the same job after a crash) may
// open. The contents go to PATH.tmp-<pid> in the same directory, which is
// fsynced, renamed over PATH, and the directory fsynced: a reader sees the
// old file or the new one, a crash at any point leaves one of them, and a
// successful return means the new one survives a power loss.
//
// Thread-safety: safe for different paths; two writers of one path from one
// process race on the temporary file.
#ifndef TRAINYARD_COMMON_DURABLE_FILE_H_
#define TRAINYARD_COMMON_DURABLE_FILE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainyard {

// Where a write stands, for fault-injection hooks (checkpoint/crash_points.h).
enum class DurableWritePoint {
  kWrittenNotSynced,  // the temporary file is written, not fsynced
  kSyncedNotRenamed,  // fsynced, not yet renamed over the target
  kRenamed,           // renamed; the directory not yet fsynced
};

// A failed file operation as a Status: "<what> <path>: <the system's
// reason>". A full disk or an exceeded quota (ENOSPC, EDQUOT) is
// kUnavailable: a condition outside the job that can clear (space freed), so
// a job failing on it may be retried; any other error is kInternal.
absl::Status FileError(absl::string_view what, const std::string& path, int error);

// Writes `contents` to `path` as above. FileError naming the file and the
// system's reason on failure (the temporary file is removed; `path` is
// untouched).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The same, with the contents written by `write` to the open temporary
// file's descriptor (large buffers without a copy); `write` returns false
// with errno set on failure. `at`, if set, is called at each point.
absl::Status WriteFileAtomically(const std::string& path, const std::function<bool(int fd)>& write,
                                 const std::function<void(DurableWritePoint)>& at = nullptr);

// write(2) until all `size` bytes are written (retrying EINTR); false with
// errno set on failure.
bool WriteFully(int fd, const void* data, size_t size);

// fsync(2) of a file or, with `directory`, of a directory (its entries).
absl::Status FsyncPath(const std::string& path, bool directory);

// The directory part of `path` ("." for a bare name).
std::string ParentDirectory(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_DURABLE_FILE_H_
