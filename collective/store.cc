#include "collective/store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

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
