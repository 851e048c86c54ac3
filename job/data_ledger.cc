#include "job/data_ledger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

// Entries as an [n, 3] int64 tensor (the digest's bits as int64) and back.
torch::Tensor ToTensor(const std::vector<LedgerEntry>& entries) {
  torch::Tensor t = torch::zeros({static_cast<int64_t>(entries.size()), 3}, torch::kLong);
  auto a = t.accessor<int64_t, 2>();
  for (size_t i = 0; i < entries.size(); ++i) {
    a[i][0] = entries[i].step;
    a[i][1] = entries[i].examples;
    a[i][2] = static_cast<int64_t>(entries[i].digest);
  }
  return t;
}

std::vector<LedgerEntry> FromTensor(const torch::Tensor& t) {
  std::vector<LedgerEntry> out;
  auto a = t.accessor<int64_t, 2>();
  for (int64_t i = 0; i < t.size(0); ++i) out.push_back({a[i][0], a[i][1], static_cast<uint64_t>(a[i][2])});
  return out;
}

absl::Status IoError(const std::string& path, const char* what) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// Cuts a last line without its newline (a write a crash interrupted);
// *end: the file's size after.
absl::Status CutPartialLine(int fd, const std::string& path, off_t* out) {
  struct stat st;
  if (fstat(fd, &st) != 0) return IoError(path, "stat");
  off_t end = st.st_size;
  char c = '\n';
  while (end > 0) {
    if (pread(fd, &c, 1, end - 1) != 1) return IoError(path, "read");
    if (c == '\n') break;
    --end;
  }
  if (end != st.st_size && ftruncate(fd, end) != 0) return IoError(path, "truncate");
  *out = end;
  return absl::OkStatus();
}

}  // namespace

void DataLedger::Add(int64_t step, const BatchIds& ids) { pending_.push_back({step, ids.examples, ids.digest}); }

void DataLedger::DropAfter(int64_t step) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const LedgerEntry& e) { return e.step > step; }),
                 pending_.end());
}

absl::StatusOr<std::vector<LedgerEntry>> DataLedger::TakeGlobal(Collective* collective, bool whole_batches) {
  std::vector<LedgerEntry> mine = std::move(pending_);
  pending_.clear();
  if (whole_batches || collective->world_size() == 1) return mine;
  // The ranks' steps first (count, first, last): the shares are summed
  // only when every rank holds the same steps.
  const int64_t first = mine.empty() ? 0 : mine.front().step, last = mine.empty() ? 0 : mine.back().step;
  std::vector<torch::Tensor> heads;
  TY_RETURN_IF_ERROR(
      collective->AllGather(torch::tensor({static_cast<int64_t>(mine.size()), first, last}, torch::kLong), &heads));
  std::string ranks;
  bool agree = true;
  for (size_t r = 0; r < heads.size(); ++r) {
    auto h = heads[r].accessor<int64_t, 1>();
    agree = agree && h[0] == static_cast<int64_t>(mine.size()) && h[1] == first && h[2] == last;
    absl::StrAppend(&ranks, r == 0 ? "" : ", ", "rank ", r, ": ", h[0], " step(s) ", h[1], "..", h[2]);
  }
  if (!agree) {
    return absl::InternalError(absl::StrCat("data ledger: the ranks took batches for different steps (", ranks, ")"));
  }
  if (mine.empty()) return mine;
  std::vector<torch::Tensor> shares;
  TY_RETURN_IF_ERROR(collective->AllGather(ToTensor(mine), &shares));
  std::vector<LedgerEntry> global = mine;
  for (LedgerEntry& e : global) e = {e.step, 0, 0};
  for (const torch::Tensor& share : shares) {
    const std::vector<LedgerEntry> theirs = FromTensor(share);
    for (size_t i = 0; i < global.size(); ++i) {
      global[i].examples += theirs[i].examples;
      global[i].digest += theirs[i].digest;  // mod 2^64
    }
  }
  return global;
}

absl::Status DataLedger::ShareFrom(Collective* collective, int source) {
  const bool mine = collective->rank() == source;
  std::vector<torch::Tensor> count = {torch::tensor({mine ? static_cast<int64_t>(pending_.size()) : 0}, torch::kLong)};
  TY_RETURN_IF_ERROR(collective->Broadcast(count, source));
  const int64_t n = count[0].item<int64_t>();
  if (n == 0) {
    pending_.clear();
    return absl::OkStatus();
  }
  std::vector<torch::Tensor> entries = {mine ? ToTensor(pending_) : torch::zeros({n, 3}, torch::kLong)};
  TY_RETURN_IF_ERROR(collective->Broadcast(entries, source));
  if (!mine) pending_ = FromTensor(entries[0]);
  return absl::OkStatus();
}

absl::Status AppendLedger(const std::string& path, const std::vector<LedgerEntry>& entries) {
  if (entries.empty()) return absl::OkStatus();
  std::string text;
  for (const LedgerEntry& e : entries) {
    absl::StrAppend(&text, "{\"step\":", e.step, ",\"examples\":", e.examples, ",\"digest\":\"",
                    absl::StrFormat("%016x", e.digest), "\"}\n");
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);  // open() names a failure
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(path, "open");
  off_t end = 0;
  absl::Status status = CutPartialLine(fd, path, &end);
  // One write: a crash leaves at most one partial line, cut by the next. A
  // short write (a full disk) is taken back whole.
  if (status.ok() && write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    status = IoError(path, "write");
    (void)ftruncate(fd, end);
  }
  if (close(fd) != 0 && status.ok()) status = IoError(path, "close");
  return status;
}

absl::StatusOr<std::vector<LedgerEntry>> ReadLedger(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no data ledger"));
  std::vector<LedgerEntry> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    uint64_t digest = 0;
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() || !j.contains("examples") ||
        !j["examples"].is_number_integer() || !j.contains("digest") || !j["digest"].is_string() ||
        j["digest"].get<std::string>().size() != 16 || !absl::SimpleHexAtoi(j["digest"].get<std::string>(), &digest)) {
      return absl::DataLossError(
          absl::StrCat(path, ":", n, ": want {\"step\":INT,\"examples\":INT,\"digest\":\"16 hex digits\"}"));
    }
    out.push_back({j["step"].get<int64_t>(), j["examples"].get<int64_t>(), digest});
  }
  return out;
}

absl::Status DataLedger::Write(const std::string& path, const std::vector<LedgerEntry>& entries) {
  unwritten_.insert(unwritten_.end(), entries.begin(), entries.end());
  absl::Status written = AppendLedger(path, unwritten_);
  if (written.ok()) unwritten_.clear();
  return written;
}

std::string LedgerPath(const std::string& output_dir) { return absl::StrCat(output_dir, "/data_ledger.jsonl"); }

}  // namespace trainyard
