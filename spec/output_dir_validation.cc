#include "spec/output_dir_validation.h"

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace trainyard {
namespace {

std::string CleanPath(absl::string_view path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part != ".") parts.push_back(part);
  }
  std::string joined = absl::StrJoin(parts, "/");
  if (absl::StartsWith(path, "/")) return "/" + joined;
  return joined.empty() ? "." : joined;
}

}  // namespace

namespace spec_internal {

void ValidateOutputDir(Errors* errors, JobSpec* spec, const ValidationOptions& options) {
  const std::string& dir = spec->output_dir();
  if (dir.empty()) {
    errors->Add("output_dir",
                "missing; the directory for checkpoints, TensorBoard events "
                "and config.textproto");
    return;
  }
  if (!CheckPath(errors, "output_dir", dir)) return;
  if (options.output_root.empty()) {
    spec->set_output_dir(CleanPath(dir));
    return;
  }
  const std::string root = CleanPath(options.output_root);
  const std::string resolved = absl::StartsWith(dir, "/") ? CleanPath(dir) : CleanPath(root + "/" + dir);
  if (resolved != root && !absl::StartsWith(resolved, root == "/" ? "/" : root + "/")) {
    errors->Add("output_dir", absl::StrCat(Quote(dir), " is outside the allowed output root ", Quote(root)));
    return;
  }
  // The same check after symbolic links: the existing part of the path must
  // not lead out of the root either.
  std::error_code ec1, ec2;
  const std::filesystem::path real_root = std::filesystem::weakly_canonical(root, ec1);
  const std::filesystem::path real = std::filesystem::weakly_canonical(resolved, ec2);
  if (!ec1 && !ec2) {
    const std::string r = real_root.string(), p = real.string();
    if (p != r && !absl::StartsWith(p, r == "/" ? "/" : r + "/")) {
      errors->Add("output_dir", absl::StrCat(Quote(dir), " leads through a symbolic link to ", Quote(p),
                                             ", outside the allowed output root ", Quote(root)));
      return;
    }
  }
  spec->set_output_dir(resolved);
}

}  // namespace spec_internal

absl::StatusOr<std::string> ResolveOutputDir(const std::string& field, const std::string& dir,
                                             const ValidationOptions& options) {
  JobSpec spec;
  spec.set_output_dir(dir);
  spec_internal::Errors errors;
  spec_internal::ValidateOutputDir(&errors, &spec, options);
  absl::Status status = errors.ToStatus();
  if (!status.ok()) {
    std::string message(status.message());
    if (absl::StartsWith(message, "output_dir")) message = field + message.substr(10);
    return absl::InvalidArgumentError(message);
  }
  return spec.output_dir();
}

}  // namespace trainyard
