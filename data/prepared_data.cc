#include "data/prepared_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/tfrecord.h"
#include "nlohmann/json.hpp"
#include "spec/task_spec.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::DataLossError(absl::StrCat(path, ": not a JSON object"));
  return j;
}

// Shard names as Beam and TFDS write them: PREFIX-00003-of-00010.
std::vector<std::string> ShardPaths(const std::string& prefix, int64_t shards) {
  std::vector<std::string> paths;
  char suffix[64];
  for (int64_t i = 0; i < shards; ++i) {
    std::snprintf(suffix, sizeof(suffix), "-%05lld-of-%05lld", static_cast<long long>(i),
                  static_cast<long long>(shards));
    paths.push_back(prefix + suffix);
  }
  return paths;
}

absl::Status CheckFilesExist(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    if (!fs::exists(p)) return absl::NotFoundError(absl::StrCat(p, ": missing (a shard the metadata lists)"));
  }
  return absl::OkStatus();
}

// A JSON value TFDS writes as a number or a string of one ("12").
int64_t JsonCount(const nlohmann::json& v) {
  int64_t n = -1;
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string() && absl::SimpleAtoi(v.get<std::string>(), &n)) return n;
  return -1;
}

class Slice : public ExampleSource {
 public:
  Slice(std::unique_ptr<ExampleSource> base, int64_t begin, int64_t end)
      : base_(std::move(base)), begin_(begin), end_(end) {}
  int64_t size() const override { return end_ - begin_; }
  int64_t skipped() const override { return base_->skipped(); }
  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index < 0 || index >= size()) return absl::OutOfRangeError(absl::StrCat("example ", index, " of ", size()));
    return base_->Get(begin_ + index);
  }

 private:
  std::unique_ptr<ExampleSource> base_;
  int64_t begin_, end_;
};

// The newest of the versions ("1.2.0") prepared in `dir`.
absl::StatusOr<std::string> NewestVersion(const std::string& dir) {
  std::vector<std::tuple<int, int, int, std::string>> versions;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int a = 0, b = 0, c = 0;
    const std::string name = entry.path().filename().string();
    char end = 0;
    if (std::sscanf(name.c_str(), "%d.%d.%d%c", &a, &b, &c, &end) == 3 &&
        fs::exists(entry.path() / "dataset_info.json")) {
      versions.emplace_back(a, b, c, name);
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot list (", ec.message(), ")"));
  if (versions.empty())
    return absl::NotFoundError(absl::StrCat(dir, ": no prepared version (VERSION/dataset_info.json)"));
  return std::get<3>(*std::max_element(versions.begin(), versions.end()));
}

std::string DefaultTfdsDataDir() {
  if (const char* env = std::getenv("TFDS_DATA_DIR"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "", "/tensorflow_datasets");
}

// The split's entry of dataset_info.json, with its shards' lengths.
absl::StatusOr<std::vector<int64_t>> TfdsShardLengths(const std::string& info_path, const nlohmann::json& info,
                                                      const std::string& split) {
  std::vector<std::string> names;
  if (info.contains("splits") && info["splits"].is_array()) {
    for (const nlohmann::json& s : info["splits"]) {
      if (!s.is_object() || !s.contains("name") || !s["name"].is_string()) continue;
      names.push_back(s["name"].get<std::string>());
      if (names.back() != split) continue;
      std::vector<int64_t> lengths;
      if (s.contains("shardLengths") && s["shardLengths"].is_array()) {
        for (const nlohmann::json& n : s["shardLengths"]) lengths.push_back(JsonCount(n));
      }
      for (int64_t n : lengths) {
        if (n < 0) return absl::DataLossError(absl::StrCat(info_path, ": split ", split, ": bad shardLengths"));
      }
      if (lengths.empty()) return absl::DataLossError(absl::StrCat(info_path, ": split ", split, ": no shards"));
      return lengths;
    }
  }
  return absl::NotFoundError(absl::StrCat(info_path, ": no split \"", split,
                                          "\"; it has: ", names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
}

}  // namespace

std::pair<int64_t, int64_t> TfdsSliceBounds(bool has_from, int64_t from, bool has_to, int64_t to, bool percent,
                                            int64_t n) {
  // Percentages: the closest example, halves to even (Python's round).
  auto absolute = [&](int64_t v) {
    return percent ? static_cast<int64_t>(std::nearbyint(static_cast<double>(v) * static_cast<double>(n) / 100.0)) : v;
  };
  int64_t begin = has_from ? absolute(from) : 0;
  int64_t end = has_to ? absolute(to) : n;
  if (begin < 0) begin = std::max<int64_t>(n + begin, 0);
  if (end < 0) end = std::max<int64_t>(n + end, 0);
  begin = std::min(begin, n);
  end = std::min(end, n);
  return {begin, std::max(begin, end)};
}

std::unique_ptr<ExampleSource> SliceSource(std::unique_ptr<ExampleSource> base, int64_t begin, int64_t end) {
  return std::make_unique<Slice>(std::move(base), begin, end);
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSeqioCacheSource(const std::string& dir, const std::string& split,
                                                                    const std::vector<std::string>& fields) {
  const std::string info_path = absl::StrCat(dir, "/info.", split, ".json");
  if (!fs::exists(info_path)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no info.", split, ".json: not a seqio cache of split ", split));
  }
  absl::StatusOr<nlohmann::json> info = ReadJson(info_path);
  if (!info.ok()) return info.status();
  const nlohmann::json features = info->value("features", nlohmann::json::object());
  for (const std::string& f : fields) {
    if (!features.contains(f)) {
      std::vector<std::string> names;
      for (const auto& [k, v] : features.items()) names.push_back(k);
      return absl::InvalidArgumentError(absl::StrCat(info_path, ": no feature \"", f, "\"; the cache has: ",
                                                     names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
    }
    const std::string dtype = features[f].value("dtype", "");
    if (dtype != "int32" && dtype != "int64") {
      return absl::InvalidArgumentError(absl::StrCat(info_path, ": feature \"", f, "\" is ", dtype,
                                                     ", not token ids (int32): cache the task after tokenize"));
    }
  }
  const int64_t shards = JsonCount(info->value("num_shards", nlohmann::json(-1)));
  std::vector<std::string> paths;
  if (shards > 0) {
    paths = ShardPaths(absl::StrCat(dir, "/", split, ".tfrecord"), shards);
    if (absl::Status s = CheckFilesExist(paths); !s.ok()) return s;
  } else {
    paths = {absl::StrCat(dir, "/", split, ".tfrecord-*-of-*")};
  }
  FileSourceOptions options;
  options.fields = fields;
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenTfRecordTokenSource(paths, options);
  if (!source.ok()) return source.status();
  const std::string stats_path = absl::StrCat(dir, "/stats.", split, ".json");
  if (fs::exists(stats_path)) {
    absl::StatusOr<nlohmann::json> stats = ReadJson(stats_path);
    if (!stats.ok()) return stats.status();
    const int64_t examples = JsonCount(stats->value("examples", nlohmann::json(-1)));
    if (examples >= 0 && examples != (*source)->size()) {
      return absl::DataLossError(absl::StrCat(dir, ": split ", split, " holds ", (*source)->size(), " examples; stats.",
                                              split, ".json says ", examples));
    }
  }
  return source;
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfdsSource(const std::string& value, const std::string& data_dir,
                                                              const FileSourceOptions& options) {
  absl::StatusOr<TfdsSplit> spec = ParseTfdsSplit(value);
  if (!spec.ok()) return spec.status();
  std::string dir = absl::StrCat(data_dir.empty() ? DefaultTfdsDataDir() : data_dir, "/", spec->name);
  if (!spec->config.empty()) dir = absl::StrCat(dir, "/", spec->config);
  std::string version = spec->version;
  if (version.empty()) {
    absl::StatusOr<std::string> newest = NewestVersion(dir);
    if (!newest.ok()) return newest.status();
    version = *newest;
  }
  dir = absl::StrCat(dir, "/", version);
  const std::string info_path = dir + "/dataset_info.json";
  absl::StatusOr<nlohmann::json> info = ReadJson(info_path);
  if (!info.ok()) return info.status();
  absl::StatusOr<std::vector<int64_t>> lengths = TfdsShardLengths(info_path, *info, spec->split);
  if (!lengths.ok()) return lengths.status();
  const std::string format = info->value("fileFormat", "tfrecord");
  if (format != "tfrecord") {
    return absl::InvalidArgumentError(absl::StrCat(info_path, ": file format ", format, "; only tfrecord is read"));
  }
  const std::vector<std::string> paths =
      ShardPaths(absl::StrCat(dir, "/", spec->name, "-", spec->split, ".tfrecord"), lengths->size());
  if (absl::Status s = CheckFilesExist(paths); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenTfRecordSource(paths, options);
  if (!source.ok()) return source.status();
  int64_t expected = 0;
  for (int64_t n : *lengths) expected += n;
  if ((*source)->size() + (*source)->skipped() != expected) {
    return absl::DataLossError(absl::StrCat(dir, ": split ", spec->split, " holds ", (*source)->size(),
                                            " examples; dataset_info.json says ", expected));
  }
  const auto [begin, end] =
      TfdsSliceBounds(spec->has_from, spec->from, spec->has_to, spec->to, spec->percent, (*source)->size());
  return SliceSource(std::move(*source), begin, end);
}

}  // namespace trainyard
