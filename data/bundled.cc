#include "data/bundled.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

absl::StatusOr<std::string> FindBundledFile(const std::string& relative) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TRAINYARD_DATA_DIR")) candidates.push_back(absl::StrCat(env, "/", relative));
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    const std::string exe(self, static_cast<size_t>(n));
    const std::string dir = exe.substr(0, exe.rfind('/'));
    candidates.push_back(absl::StrCat(dir, "/../share/trainyard/", relative));
    candidates.push_back(absl::StrCat(exe, ".runfiles/trainyard/data/", relative));
    // trainyard-torch, run by `trainyard` from the same directory of a
    // Bazel build: the data is in trainyard's runfiles.
    candidates.push_back(absl::StrCat(dir, "/trainyard.runfiles/trainyard/data/", relative));
  }
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* env = std::getenv(var)) candidates.push_back(absl::StrCat(env, "/trainyard/data/", relative));
  }
  candidates.push_back(absl::StrCat("data/", relative));  // the source tree, or a test's runfiles
  for (const std::string& path : candidates) {
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return absl::NotFoundError(
      absl::StrCat("bundled data file '", relative,
                   "' not found (set TRAINYARD_DATA_DIR); searched: ", absl::StrJoin(candidates, ", ")));
}

absl::Status RegisterBundledTasks(TaskRegistry* registry, const std::string& vocabulary) {
  if (!vocabulary.empty()) return RegisterDigitsToWords(vocabulary, registry);
  absl::StatusOr<std::string> vocab = FindBundledFile("vocab/digits_to_words.model");
  if (!vocab.ok()) return vocab.status();
  return RegisterDigitsToWords(*vocab, registry);
}

}  // namespace trainyard
