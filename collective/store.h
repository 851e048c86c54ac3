// The rendezvous key-value store through which the ranks of a job find each
// other (Gloo's connection addresses, NCCL's unique id). Values are bytes;
// Get and Wait block until the keys exist or the timeout passes.
//
// Implementations: InMemoryStore (ranks in one process, and the
// coordinator's own table); the coordinator-backed client in
// worker/coordinator_store.h (ranks in different processes and hosts).
//
// Thread-safety: every implementation is thread-safe.
#ifndef TRAINYARD_COLLECTIVE_STORE_H_
#define TRAINYARD_COLLECTIVE_STORE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace trainyard {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // kDeadlineExceeded naming the key if it does not appear within `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
  // Adds `delta` to the integer at `key` (0 if absent); returns the new
  // value. kFailedPrecondition if the key holds something else.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists.
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
  // Whether every key exists now.
  virtual absl::StatusOr<bool> Check(const std::vector<std::string>& keys) = 0;
};

// The rendezvous scope of one group of a job's ranks: its attempt and, for
// ELASTIC, its generation ("<job>/<attempt>/g<generation>"). The worker
// meets its peers there; the coordinator closes it when a rank's call
// fails (InMemoryStore::CloseScope).
std::string GroupScope(const std::string& job_id, int attempt, int generation);

class InMemoryStore : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;

  // Removes every key that starts with `prefix` (a finished job's scope),
  // and the closed scopes that do.
  void ErasePrefix(const std::string& prefix);
  // From now on Get and Wait of a key in `scope` (a key starting with
  // scope + "/") fail at once with kAborted naming the scope and `reason`,
  // those waiting now included: ranks still finding each other stop
  // waiting for a peer whose call has failed.
  void CloseScope(const std::string& scope, const std::string& reason);
  size_t size() const;

 private:
  mutable Mutex mu_;
  CondVar changed_;
  // kAborted if `key` is in a closed scope.
  absl::Status ClosedLocked(const std::string& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> closed_ ABSL_GUARDED_BY(mu_);  // scope + "/" -> reason
};

// A view of `base` where every key is prefixed with `prefix` (one job
// attempt's namespace).
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store* base) : prefix_(std::move(prefix)), base_(base) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return base_->Set(prefix_ + key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return base_->Get(prefix_ + key, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    return base_->Add(prefix_ + key, delta);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;

 private:
  std::string prefix_;
  Store* base_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_STORE_H_
