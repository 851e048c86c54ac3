#include "coordinator/job_store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

absl::Status SqliteError(sqlite3* db, const std::string& path, const std::string& what) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", sqlite3_errmsg(db)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    absl::Status status = absl::UnavailableError(
        absl::StrCat(path, ": cannot open the job database: ", db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return status;
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<JobStore> store(new JobStore(db, path));
  MutexLock lock(&store->mu_);
  // A file that is not a database fails here, on the first read.
  if (absl::Status s = store->Exec("PRAGMA journal_mode=WAL"); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a Trainyard job database (", s.message(), ")"));
  }
  for (const char* sql : {"PRAGMA synchronous=FULL",
                          "CREATE TABLE IF NOT EXISTS jobs ("
                          "  job_id TEXT PRIMARY KEY,"
                          "  sequence INTEGER NOT NULL,"
                          "  state INTEGER NOT NULL,"
                          "  info BLOB NOT NULL)",
                          "CREATE TABLE IF NOT EXISTS counters ("
                          "  name TEXT PRIMARY KEY,"
                          "  value INTEGER NOT NULL)"}) {
    if (absl::Status s = store->Exec(sql); !s.ok()) return s;
  }
  // The table may exist with another shape (another program's database).
  sqlite3_stmt* check = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT job_id, sequence, state, info FROM jobs LIMIT 0", -1, &check, nullptr) !=
      SQLITE_OK) {
    absl::Status status =
        absl::InvalidArgumentError(absl::StrCat(path, ": not a Trainyard job database (", sqlite3_errmsg(db), ")"));
    sqlite3_finalize(check);
    return status;
  }
  sqlite3_finalize(check);
  return store;
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status status = absl::InternalError(absl::StrCat(path_, ": ", sql, ": ", error ? error : "?"));
    sqlite3_free(error);
    return status;
  }
  return absl::OkStatus();
}

absl::Status JobStore::Put(const JobInfo& job, int64_t sequence) {
  std::string blob;
  if (!job.SerializeToString(&blob)) return absl::InternalError("cannot serialise JobInfo " + job.job_id());
  MutexLock lock(&mu_);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO jobs (job_id, sequence, state, info) VALUES (?, ?, ?, ?)", -1,
                         &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db_, path_, "prepare");
  }
  sqlite3_bind_text(stmt, 1, job.job_id().data(), static_cast<int>(job.job_id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt, 2, sequence);
  sqlite3_bind_int(stmt, 3, job.state());
  sqlite3_bind_blob(stmt, 4, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return SqliteError(db_, path_, absl::StrCat("writing job ", job.job_id()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobStore::Record>> JobStore::LoadAll() {
  MutexLock lock(&mu_);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT job_id, sequence, info FROM jobs ORDER BY sequence", -1, &stmt, nullptr) !=
      SQLITE_OK) {
    return SqliteError(db_, path_, "prepare");
  }
  std::vector<Record> out;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const std::string id(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    Record record;
    record.sequence = sqlite3_column_int64(stmt, 1);
    const void* data = sqlite3_column_blob(stmt, 2);
    const int size = sqlite3_column_bytes(stmt, 2);
    if (!record.job.ParseFromArray(data, size) || record.job.job_id() != id) {
      sqlite3_finalize(stmt);
      return absl::DataLossError(absl::StrCat(path_, ": the record of job '", id, "' does not parse"));
    }
    out.push_back(std::move(record));
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return SqliteError(db_, path_, "reading jobs");
  return out;
}

absl::Status JobStore::Delete(const std::vector<std::string>& job_ids, int64_t next_sequence) {
  MutexLock lock(&mu_);
  TY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto rollback = [this](absl::Status s) {
    mu_.AssertHeld();
    Exec("ROLLBACK").IgnoreError();
    return s;
  };
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "DELETE FROM jobs WHERE job_id = ?", -1, &stmt, nullptr) != SQLITE_OK) {
    return rollback(SqliteError(db_, path_, "prepare"));
  }
  for (const std::string& id : job_ids) {
    sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    const int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    if (rc != SQLITE_DONE) {
      absl::Status s = SqliteError(db_, path_, absl::StrCat("deleting job ", id));
      sqlite3_finalize(stmt);
      return rollback(s);
    }
  }
  sqlite3_finalize(stmt);
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO counters (name, value) VALUES ('next_sequence', ?) "
                         "ON CONFLICT(name) DO UPDATE SET value = MAX(value, excluded.value)",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return rollback(SqliteError(db_, path_, "prepare"));
  }
  sqlite3_bind_int64(stmt, 1, next_sequence);
  const int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return rollback(SqliteError(db_, path_, "recording next_sequence"));
  return Exec("COMMIT");
}

absl::StatusOr<int64_t> JobStore::RecordedNextSequence() {
  MutexLock lock(&mu_);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM counters WHERE name = 'next_sequence'", -1, &stmt, nullptr) !=
      SQLITE_OK) {
    return SqliteError(db_, path_, "prepare");
  }
  int64_t value = 0;
  const int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) value = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqliteError(db_, path_, "reading next_sequence");
  return value;
}

}  // namespace trainyard
