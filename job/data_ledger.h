// The data ledger: which examples every trained step's global batch held.
//
// Rank 0 appends one JSON line per trained step to
// <output_dir>/data_ledger.jsonl:
//   {"step":12,"examples":32,"digest":"9f1c0e5a77b2d403"}
// `step` is the step the batch's update produced (checkpoint_12 holds steps
// 1..12), `examples` the example segments of the global batch and `digest`
// the sum (mod 2^64, hex) of their ExampleIdDigest (data/iterator.h). A
// step trained again (after a restart from an older checkpoint, or a
// failed ELASTIC step) is appended again: in a run where nothing was
// skipped or trained on other data, every line of a step holds the same
// digest as an uninterrupted run's, and every step appears.
//
// A rank records its batches as it takes them (Add), forgets those put
// back (DropAfter), and at the end of a chunk the ranks combine them
// (TakeGlobal): with rank-strided data the global batch is the union of the
// ranks' shares, so the digests and counts are summed over the ranks (one
// all-gather per chunk); ELASTIC ranks each read the whole global batch, so
// every rank's entries already are the global ones. After a failed ELASTIC
// chunk the entries of the steps the survivors kept stay pending, and
// Regroup hands the furthest rank's to the others (ShareFrom).
//
// Thread-safety: one thread (the rank's) drives a ledger.
#ifndef TRAINYARD_JOB_DATA_LEDGER_H_
#define TRAINYARD_JOB_DATA_LEDGER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "data/iterator.h"

namespace trainyard {

struct LedgerEntry {
  int64_t step = 0;
  int64_t examples = 0;
  uint64_t digest = 0;
  bool operator==(const LedgerEntry& o) const { return step == o.step && examples == o.examples && digest == o.digest; }
};

class DataLedger {
 public:
  // The batch of the step that ends at `step` was taken.
  void Add(int64_t step, const BatchIds& ids);
  // Forgets entries of steps after `step` (their batches were put back).
  void DropAfter(int64_t step);
  const std::vector<LedgerEntry>& pending() const { return pending_; }

  // Every rank at the same point, on the same steps: the global entries of
  // the pending steps (summed over the ranks unless `whole_batches`), which
  // leave the ledger. kInvalidArgument when the ranks' steps differ.
  absl::StatusOr<std::vector<LedgerEntry>> TakeGlobal(Collective* collective, bool whole_batches);

  // After an ELASTIC regroup in which `source` (at the group's furthest
  // step) broadcast its state, every rank of `collective` calls it: the
  // others take the source's pending entries in place of theirs. The ranks
  // last combined their entries together, so the source's (the furthest)
  // cover every step the group kept since.
  absl::Status ShareFrom(Collective* collective, int source);

  // Rank 0: AppendLedger of the entries a failed Write kept, then
  // `entries`; on failure they are all kept for the next Write.
  absl::Status Write(const std::string& path, const std::vector<LedgerEntry>& entries);
  int64_t unwritten() const { return static_cast<int64_t>(unwritten_.size()); }

 private:
  std::vector<LedgerEntry> pending_;
  std::vector<LedgerEntry> unwritten_;
};

// Appends `entries` to the ledger at `path` (created, with its directory,
// if missing). A last line left half written by a crash is cut off first,
// and a short write (a full disk) is taken back, so the file holds whole
// lines only. kInternal naming the path on an I/O error.
absl::Status AppendLedger(const std::string& path, const std::vector<LedgerEntry>& entries);

// Every line of the ledger at `path`, in file order. kNotFound without the
// file; kDataLoss naming the line for one that is not an entry.
absl::StatusOr<std::vector<LedgerEntry>> ReadLedger(const std::string& path);

// "<output_dir>/data_ledger.jsonl".
std::string LedgerPath(const std::string& output_dir);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_DATA_LEDGER_H_
