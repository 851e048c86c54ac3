#include "coordinator/worker_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainyard {

std::string DescribeWorker(const std::string& worker_id, const std::string& host, const std::string& address) {
  return absl::StrCat("worker ", worker_id, " on host ", host, ", ", address);
}

const char* WorkerStateName(WorkerRecord::State state) {
  switch (state) {
    case WorkerRecord::State::kIdle:
      return "IDLE";
    case WorkerRecord::State::kBusy:
      return "BUSY";
    case WorkerRecord::State::kDraining:
      return "DRAINING";
  }
  return "?";
}

absl::StatusOr<std::string> WorkerRegistry::Register(const std::string& host, const std::string& address,
                                                     const std::string& device, int32_t pid,
                                                     const std::string& held_job_id, bool keep_job) {
  if (address.empty()) return absl::InvalidArgumentError("RegisterWorker.address: empty; expected HOST:PORT");
  MutexLock lock(&mu_);
  WorkerRecord record;
  record.sequence = next_sequence_++;
  record.worker_id =
      absl::StrCat("w", record.sequence, "-", host.empty() ? "host" : host, instance_.empty() ? "" : ".", instance_);
  record.host = host;
  record.address = address;
  record.device = device.empty() ? "cpu" : device;
  record.pid = pid;
  record.last_heartbeat = clock_->Now();
  if (!held_job_id.empty()) {
    record.state = keep_job ? WorkerRecord::State::kBusy : WorkerRecord::State::kDraining;
    record.job_id = held_job_id;
  }
  const std::string id = record.worker_id;
  workers_[id] = std::move(record);
  return id;
}

absl::Status WorkerRegistry::Heartbeat(const std::string& worker_id, const std::string& job_id, bool* let_go) {
  MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  it->second.last_heartbeat = clock_->Now();
  if (let_go != nullptr) {
    *let_go = !job_id.empty() && (it->second.state != WorkerRecord::State::kBusy || it->second.job_id != job_id);
  }
  if (it->second.state == WorkerRecord::State::kDraining && job_id.empty()) {
    it->second.state = WorkerRecord::State::kIdle;
    it->second.job_id.clear();
  } else if (it->second.state == WorkerRecord::State::kIdle && !job_id.empty()) {
    it->second.state = WorkerRecord::State::kDraining;  // still tearing an old job down
    it->second.job_id = job_id;
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerRegistry::Idle() const {
  MutexLock lock(&mu_);
  std::vector<const WorkerRecord*> idle;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerRecord::State::kIdle) idle.push_back(&w);
  }
  std::sort(idle.begin(), idle.end(), [](auto* a, auto* b) { return a->sequence < b->sequence; });
  std::vector<std::string> out;
  for (const WorkerRecord* w : idle) out.push_back(w->worker_id);
  return out;
}

absl::Status WorkerRegistry::Assign(const std::vector<std::string>& worker_ids, const std::string& job_id) {
  MutexLock lock(&mu_);
  for (const std::string& id : worker_ids) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
    if (it->second.state != WorkerRecord::State::kIdle) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", id, " is ", WorkerStateName(it->second.state)));
    }
  }
  for (const std::string& id : worker_ids) {
    workers_[id].state = WorkerRecord::State::kBusy;
    workers_[id].job_id = job_id;
  }
  return absl::OkStatus();
}

void WorkerRegistry::Release(const std::vector<std::string>& worker_ids) {
  MutexLock lock(&mu_);
  for (const std::string& id : worker_ids) {
    auto it = workers_.find(id);
    if (it != workers_.end() && it->second.state == WorkerRecord::State::kBusy) {
      it->second.state = WorkerRecord::State::kDraining;
    }
  }
}

std::vector<WorkerRecord> WorkerRegistry::Expire() {
  MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<WorkerRecord> out;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.last_heartbeat > heartbeat_timeout_) {
      out.push_back(it->second);
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

absl::StatusOr<WorkerRecord> WorkerRegistry::Get(const std::string& worker_id) const {
  MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  return it->second;
}

std::vector<WorkerRecord> WorkerRegistry::List() const {
  MutexLock lock(&mu_);
  std::vector<WorkerRecord> out;
  for (const auto& [id, w] : workers_) out.push_back(w);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  return out;
}

}  // namespace trainyard
