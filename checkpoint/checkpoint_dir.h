// A checkpoint directory: files written into a temporary sibling directory,
// then a MANIFEST.json with the size and SHA-256 of every file, everything
// fsynced, and the directory renamed into place. A directory without a
// complete, matching manifest is not a checkpoint: VerifyCheckpoint refuses
// it, so a crash at any point never yields a checkpoint that restores wrong.
//
// Layout (the model's files are written by model/weights.h):
//   DIR/metadata.json      format, version, step, model config, ...
//   DIR/params.safetensors
//   DIR/MANIFEST.json      {"files": {name: {"bytes": N, "sha256": hex}}}
//
// Thread-safety: a CheckpointWriter is used by one thread.
#ifndef TRAINYARD_CHECKPOINT_CHECKPOINT_DIR_H_
#define TRAINYARD_CHECKPOINT_CHECKPOINT_DIR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

constexpr char kManifestFile[] = "MANIFEST.json";
constexpr char kMetadataFile[] = "metadata.json";

class CheckpointWriter {
 public:
  // Prepares `final_dir`: files go to a temporary sibling until Commit.
  // An existing `final_dir` is refused (kAlreadyExists) unless `replace`:
  // then Commit swaps the new directory in atomically (readers see the old
  // checkpoint or the new one, never neither) and removes the old one. A
  // restarted job replaces the checkpoints of steps it computes again.
  static absl::StatusOr<CheckpointWriter> Begin(const std::string& final_dir, bool replace = false);
  // The same for a checkpoint that several processes write together: the
  // temporary sibling is named by `token` (the same on every writer, new
  // for every save) and is created if missing, never emptied; one of them
  // commits.
  static absl::StatusOr<CheckpointWriter> BeginShared(const std::string& final_dir, const std::string& token,
                                                      bool replace = false);

  // Where to write file `name` (a plain file name) before Commit.
  std::string Path(const std::string& name) const;
  // Copies an existing file in.
  absl::Status CopyIn(const std::string& source, const std::string& name);
  // Writes metadata.json, then the manifest over every file, fsyncs and
  // renames the directory into place. `expected`: files that must be there
  // (kDataLoss naming the first missing one, before anything is written).
  absl::Status Commit(const std::string& metadata_json, const std::vector<std::string>& expected = {});
  // Removes the temporary directory (when not committed).
  void Abort();

  const std::string& final_dir() const { return final_dir_; }

 private:
  std::string final_dir_;
  std::string tmp_dir_;
  bool replace_ = false;
};

struct CheckpointContents {
  std::string dir;
  std::string metadata_json;
  std::vector<std::string> files;  // as listed in the manifest
};

// Checks the manifest against every file (size and SHA-256). kNotFound if
// there is no manifest (an incomplete or foreign directory); kDataLoss,
// naming the file, if a file is missing, truncated or altered.
absl::StatusOr<CheckpointContents> VerifyCheckpoint(const std::string& dir);

// The same for the files `names` only (a small file read without the
// parameters' cost): kNotFound without a manifest; kDataLoss naming a file
// that the manifest does not cover, or that is missing, truncated or
// altered.
absl::Status VerifyCheckpointFiles(const std::string& dir, const std::vector<std::string>& names);

// Lower-case hex SHA-256 of a file's contents.
absl::StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_CHECKPOINT_DIR_H_
