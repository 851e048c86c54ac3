// Durable job records: one SQLite database (jobs.db under the coordinator's
// state dir) holding every job's JobInfo, so that a restarted coordinator
// knows every job it ever accepted. Each write is one transaction with
// synchronous=FULL in WAL mode: a record is either the old or the new one
// after a crash, never half-written.
//
// Thread-safety: thread-safe (one connection behind a mutex).
#ifndef TRAINYARD_COORDINATOR_JOB_STORE_H_
#define TRAINYARD_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "proto/job_service.pb.h"

struct sqlite3;

namespace trainyard {

class JobStore {
 public:
  // Opens or creates the database at `path`; kInvalidArgument naming the
  // file if it is not a Trainyard job database.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();

  // Inserts or replaces the job's record. `sequence` orders jobs by
  // submission.
  absl::Status Put(const JobInfo& job, int64_t sequence);
  struct Record {
    JobInfo job;
    int64_t sequence;
  };
  // Every job, oldest first. kDataLoss naming the job for a record that does
  // not parse.
  absl::StatusOr<std::vector<Record>> LoadAll();

  // Deletes the records of `job_ids` (finished jobs past the retention
  // policy) and records `next_sequence` in the same transaction, so that a
  // coordinator restarted after the newest jobs were deleted never reuses
  // their sequence numbers (nor their ids).
  absl::Status Delete(const std::vector<std::string>& job_ids, int64_t next_sequence);
  // The next_sequence last recorded by Delete; 0 if none.
  absl::StatusOr<int64_t> RecordedNextSequence();

 private:
  JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);  // one connection, one caller at a time
  const std::string path_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_JOB_STORE_H_
