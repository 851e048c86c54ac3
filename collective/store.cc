#include "collective/store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

std::string GroupScope(const std::string& job_id, int attempt, int generation) {
  return absl::StrCat(job_id, "/", attempt, "/g", generation);
}

absl::Status InMemoryStore::ClosedLocked(const std::string& key) const {
  for (const auto& [prefix, reason] : closed_) {
    if (key.compare(0, prefix.size(), prefix) == 0) {
      return absl::AbortedError(
          absl::StrCat("the rendezvous ", prefix.substr(0, prefix.size() - 1), " was closed: ", reason));
    }
  }
  return absl::OkStatus();
}

void InMemoryStore::CloseScope(const std::string& scope, const std::string& reason) {
  {
    MutexLock lock(&mu_);
    closed_[scope + "/"] = reason;
  }
  changed_.SignalAll();
}

absl::Status InMemoryStore::Set(const std::string& key, const std::string& value) {
  {
    MutexLock lock(&mu_);
    values_[key] = value;
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(const std::string& key, absl::Duration timeout) {
  MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto it = values_.find(key);
    if (it != values_.end()) return it->second;
    if (absl::Status closed = ClosedLocked(key); !closed.ok()) return closed;
    if (changed_.WaitWithDeadline(&mu_, deadline) && !values_.count(key)) {
      return absl::DeadlineExceededError(
          absl::StrCat("store key '", key, "' did not appear within ", absl::FormatDuration(timeout)));
    }
  }
}

absl::StatusOr<int64_t> InMemoryStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    MutexLock lock(&mu_);
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
      return absl::FailedPreconditionError(absl::StrCat("store key '", key, "' does not hold an integer"));
    }
    value += delta;
    values_[key] = absl::StrCat(value);
  }
  changed_.SignalAll();
  return value;
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (!values_.count(k)) missing.push_back(k);
    }
    if (missing.empty()) return absl::OkStatus();
    for (const std::string& k : missing) {
      if (absl::Status closed = ClosedLocked(k); !closed.ok()) return closed;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {  // timed out
      bool all = true;
      for (const std::string& k : missing) all = all && values_.count(k);
      if (all) return absl::OkStatus();
      return absl::DeadlineExceededError(absl::StrCat("store keys [", absl::StrJoin(missing, ", "),
                                                      "] did not appear within ", absl::FormatDuration(timeout)));
    }
  }
}

absl::StatusOr<bool> InMemoryStore::Check(const std::vector<std::string>& keys) {
  MutexLock lock(&mu_);
  for (const std::string& k : keys) {
    if (!values_.count(k)) return false;
  }
  return true;
}

void InMemoryStore::ErasePrefix(const std::string& prefix) {
  MutexLock lock(&mu_);
  auto it = values_.lower_bound(prefix);
  while (it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    it = values_.erase(it);
  }
  for (auto c = closed_.lower_bound(prefix); c != closed_.end() && c->first.compare(0, prefix.size(), prefix) == 0;) {
    c = closed_.erase(c);
  }
}

size_t InMemoryStore::size() const {
  MutexLock lock(&mu_);
  return values_.size();
}

absl::Status PrefixStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  return base_->Wait(full, timeout);
}

absl::StatusOr<bool> PrefixStore::Check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  return base_->Check(full);
}

}  // namespace trainyard
