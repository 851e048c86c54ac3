#include "checkpoint/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/crash_points.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("cannot list", dir);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void RemoveTree(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListFiles(dir);
  if (names.ok()) {
    for (const std::string& name : *names) unlink((dir + "/" + name).c_str());
  }
  rmdir(dir.c_str());
}

// A file inside the temporary directory: written and fsynced (the
// directory's rename makes it visible, so it needs no rename of its own).
absl::Status WriteFileDurably(const std::string& path, const std::string& content) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
    out.flush();
    if (!out) return FileError("cannot write", path, errno);
  }
  return FsyncPath(path, false);
}

// An existing `final_dir` may be replaced only when asked and only if it is
// a checkpoint (a directory with a manifest): never a file, nor another
// directory that happens to have the name.
absl::Status CheckReplaceable(const std::string& final_dir, bool replace) {
  struct stat st;
  if (stat(final_dir.c_str(), &st) != 0) return absl::OkStatus();
  if (!replace) return absl::AlreadyExistsError(absl::StrCat(final_dir, " already exists"));
  if (!S_ISDIR(st.st_mode) || stat((final_dir + "/" + kManifestFile).c_str(), &st) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat(final_dir, " already exists and is not a checkpoint (no ", kManifestFile, "): not replaced"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("SHA-256 unavailable");
  }
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::Begin(const std::string& final_dir, bool replace) {
  TY_RETURN_IF_ERROR(CheckReplaceable(final_dir, replace));
  CheckpointWriter writer;
  writer.final_dir_ = final_dir;
  writer.replace_ = replace;
  writer.tmp_dir_ = absl::StrCat(final_dir, ".tmp-", getpid());
  RemoveTree(writer.tmp_dir_);  // a leftover of an earlier crash of this pid
  if (mkdir(writer.tmp_dir_.c_str(), 0755) != 0) return ErrnoStatus("cannot create", writer.tmp_dir_);
  CrashPoint("checkpoint: temporary directory created");
  return writer;
}

absl::StatusOr<CheckpointWriter> CheckpointWriter::BeginShared(const std::string& final_dir, const std::string& token,
                                                               bool replace) {
  TY_RETURN_IF_ERROR(CheckReplaceable(final_dir, replace));
  CheckpointWriter writer;
  writer.final_dir_ = final_dir;
  writer.replace_ = replace;
  writer.tmp_dir_ = absl::StrCat(final_dir, ".tmp-", token);
  if (mkdir(writer.tmp_dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("cannot create", writer.tmp_dir_);
  }
  return writer;
}

std::string CheckpointWriter::Path(const std::string& name) const { return tmp_dir_ + "/" + name; }

absl::Status CheckpointWriter::CopyIn(const std::string& source, const std::string& name) {
  std::ifstream in(source, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(source, ": cannot read"));
  std::ofstream out(Path(name), std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  out.flush();
  if (!out) return FileError("cannot write", Path(name), errno);
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Commit(const std::string& metadata_json, const std::vector<std::string>& expected) {
  for (const std::string& name : expected) {
    struct stat st;
    if (stat(Path(name).c_str(), &st) != 0) {
      return absl::DataLossError(absl::StrCat(Path(name), ": missing; the checkpoint is not committed"));
    }
  }
  absl::Status status = WriteFileDurably(Path(kMetadataFile), metadata_json);
  if (!status.ok()) return status;
  CrashPoint("checkpoint: metadata written");
  absl::StatusOr<std::vector<std::string>> names = ListFiles(tmp_dir_);
  if (!names.ok()) return names.status();
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const std::string& name : *names) {
    if (name == kManifestFile) continue;
    const std::string path = Path(name);
    absl::Status synced = FsyncPath(path, false);
    if (!synced.ok()) return synced;
    CrashPoint("checkpoint: a file fsynced");
    absl::StatusOr<std::string> sha = Sha256File(path);
    if (!sha.ok()) return sha.status();
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return ErrnoStatus("cannot stat", path);
    files[name] = {{"bytes", static_cast<uint64_t>(st.st_size)}, {"sha256", *sha}};
  }
  nlohmann::ordered_json manifest = {{"version", 1}, {"files", files}};
  status = WriteFileDurably(Path(kManifestFile), manifest.dump(2) + "\n");
  if (!status.ok()) return status;
  CrashPoint("checkpoint: manifest written");
  status = FsyncPath(tmp_dir_, true);
  if (!status.ok()) return status;
  CrashPoint("checkpoint: directory fsynced, not renamed");
  struct stat st;
  if (replace_ && stat(final_dir_.c_str(), &st) == 0) {
    // What stands there now must still be a checkpoint.
    TY_RETURN_IF_ERROR(CheckReplaceable(final_dir_, true));
    // Swapped in one step: the old checkpoint moves to the temporary name
    // and is removed after.
    if (renameat2(AT_FDCWD, tmp_dir_.c_str(), AT_FDCWD, final_dir_.c_str(), RENAME_EXCHANGE) != 0) {
      return ErrnoStatus("cannot swap in the new", final_dir_);
    }
    CrashPoint("checkpoint: swapped, the old one not removed");
    RemoveTree(tmp_dir_);
  } else if (rename(tmp_dir_.c_str(), final_dir_.c_str()) != 0) {
    return ErrnoStatus("cannot rename to", final_dir_);
  }
  CrashPoint("checkpoint: renamed, parent not fsynced");
  return FsyncPath(ParentDirectory(final_dir_), true);
}

void CheckpointWriter::Abort() { RemoveTree(tmp_dir_); }

namespace {

absl::StatusOr<nlohmann::json> ReadManifest(const std::string& dir) {
  const std::string manifest_path = dir + "/" + kManifestFile;
  std::ifstream in(manifest_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(dir, " is not a checkpoint: no ", kManifestFile, " (an incomplete write, or another directory)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": not JSON: ", e.what()));
  }
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_object()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": no \"files\" object"));
  }
  return manifest;
}

// One file of the manifest: its size and SHA-256.
absl::Status VerifyEntry(const std::string& dir, const std::string& name, const nlohmann::json& entry) {
  const std::string path = dir + "/" + name;
  if (!entry.is_object() || !entry.contains("bytes") || !entry.contains("sha256") ||
      !entry["bytes"].is_number_unsigned() || !entry["sha256"].is_string()) {
    return absl::DataLossError(absl::StrCat(dir, "/", kManifestFile, ": bad entry for ", name));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": listed in the manifest but missing"));
  }
  if (static_cast<uint64_t>(st.st_size) != entry["bytes"].get<uint64_t>()) {
    return absl::DataLossError(absl::StrCat(path, ": ", st.st_size, " bytes, the manifest says ",
                                            entry["bytes"].get<uint64_t>(), " (truncated?)"));
  }
  absl::StatusOr<std::string> sha = Sha256File(path);
  if (!sha.ok()) return sha.status();
  if (*sha != entry["sha256"].get<std::string>()) {
    return absl::DataLossError(absl::StrCat(path, ": SHA-256 mismatch (the file was altered)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointContents> VerifyCheckpoint(const std::string& dir) {
  TY_ASSIGN_OR_RETURN(nlohmann::json manifest, ReadManifest(dir));
  CheckpointContents contents;
  contents.dir = dir;
  for (auto it = manifest["files"].begin(); it != manifest["files"].end(); ++it) {
    TY_RETURN_IF_ERROR(VerifyEntry(dir, it.key(), it.value()));
    contents.files.push_back(it.key());
  }
  if (std::find(contents.files.begin(), contents.files.end(), kMetadataFile) == contents.files.end()) {
    return absl::DataLossError(absl::StrCat(dir, "/", kManifestFile, ": does not cover ", kMetadataFile));
  }
  std::ifstream meta(dir + "/" + kMetadataFile, std::ios::binary);
  std::stringstream meta_text;
  meta_text << meta.rdbuf();
  contents.metadata_json = meta_text.str();
  return contents;
}

absl::Status VerifyCheckpointFiles(const std::string& dir, const std::vector<std::string>& names) {
  TY_ASSIGN_OR_RETURN(nlohmann::json manifest, ReadManifest(dir));
  for (const std::string& name : names) {
    if (!manifest["files"].contains(name)) {
      return absl::DataLossError(absl::StrCat(dir, "/", kManifestFile, ": does not cover ", name));
    }
    TY_RETURN_IF_ERROR(VerifyEntry(dir, name, manifest["files"][name]));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
