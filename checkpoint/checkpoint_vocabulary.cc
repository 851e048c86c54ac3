#include "checkpoint/checkpoint_vocabulary.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/durable_file.h"
#include "common/status_macros.h"

namespace trainyard {

absl::StatusOr<std::string> ReadVocabularyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the vocabulary"));
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat(path, ": cannot read the vocabulary"));
  return bytes.str();
}

absl::StatusOr<CheckpointVocabulary> ReadCheckpointVocabulary(const std::string& dir) {
  TY_RETURN_IF_ERROR(VerifyCheckpointFiles(dir, {kMetadataFile}));
  const std::string metadata_path = absl::StrCat(dir, "/", kMetadataFile);
  TY_ASSIGN_OR_RETURN(std::string text, ReadVocabularyFile(metadata_path));
  CheckpointVocabulary out;
  std::string file;
  try {
    const nlohmann::json meta = nlohmann::json::parse(text);
    if (!meta.is_object()) return absl::DataLossError(absl::StrCat(metadata_path, ": not a JSON object"));
    file = meta.value("vocabulary", "");
    out.extra_ids = meta.value("vocabulary_extra_ids", 0);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(metadata_path, ": vocabulary: ", e.what()));
  }
  if (file.empty()) return CheckpointVocabulary();
  if (file != kVocabularyFile || out.extra_ids < 0) {
    return absl::DataLossError(absl::StrCat(metadata_path, ": vocabulary \"", file, "\" with ", out.extra_ids,
                                            " extra ids; a checkpoint's vocabulary is \"", kVocabularyFile,
                                            "\" with extra ids >= 0"));
  }
  TY_RETURN_IF_ERROR(VerifyCheckpointFiles(dir, {file}));
  out.path = absl::StrCat(dir, "/", file);
  return out;
}

absl::Status WriteCheckpointVocabulary(CheckpointWriter* writer, const std::string& model, int extra_ids,
                                       nlohmann::ordered_json* metadata) {
  if (extra_ids < 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary extra ids: ", extra_ids, "; must be >= 0"));
  }
  if (model.empty()) {
    (*metadata)["vocabulary"] = "";
    (*metadata)["vocabulary_extra_ids"] = 0;
    return absl::OkStatus();
  }
  const std::string path = writer->Path(kVocabularyFile);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << model;
    out.flush();
    if (!out) return FileError("cannot write", path, errno);
  }
  (*metadata)["vocabulary"] = kVocabularyFile;
  (*metadata)["vocabulary_extra_ids"] = extra_ids;
  return absl::OkStatus();
}

}  // namespace trainyard
