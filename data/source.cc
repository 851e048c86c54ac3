#include "data/source.h"

#include <glob.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/digits_to_words.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

// One parsed line, or the reason it is bad.
using LineParser = absl::StatusOr<Example> (*)(const std::string& line, const std::vector<std::string>& fields);

absl::StatusOr<Example> ParseTsv(const std::string& line, const std::vector<std::string>& fields) {
  std::vector<std::string> columns = absl::StrSplit(line, '\t');
  if (columns.size() != fields.size()) {
    return absl::InvalidArgumentError(absl::StrCat(columns.size(), " tab-separated columns, want ", fields.size()));
  }
  Example ex;
  for (size_t i = 0; i < fields.size(); ++i) ex[fields[i]] = std::move(columns[i]);
  return ex;
}

absl::StatusOr<Example> ParseJsonl(const std::string& line, const std::vector<std::string>& fields) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  Example ex;
  for (const std::string& f : fields) {
    if (!j.contains(f)) return absl::InvalidArgumentError(absl::StrCat("missing field \"", f, "\""));
    if (!j[f].is_string()) return absl::InvalidArgumentError(absl::StrCat("field \"", f, "\" is not a string"));
    ex[f] = j[f].get<std::string>();
  }
  return ex;
}

// A plain-text document: the whole line (less a trailing CR) as the one
// field.
absl::StatusOr<Example> ParseText(const std::string& line, const std::vector<std::string>& fields) {
  if (fields.size() != 1) return absl::InvalidArgumentError("a plain-text source has one field");
  std::string text = line;
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return Example{{fields[0], std::move(text)}};
}

bool IsBlank(const std::string& line) { return line.find_first_not_of(" \t\r\f\v") == std::string::npos; }

class FileSource : public ExampleSource {
 public:
  struct Line {
    int file;
    std::streamoff offset;
  };

  static absl::StatusOr<std::unique_ptr<ExampleSource>> Open(const std::vector<std::string>& patterns,
                                                             const FileSourceOptions& options, LineParser parser) {
    if (patterns.empty()) return absl::InvalidArgumentError("no files given");
    absl::StatusOr<std::vector<std::string>> expanded = ExpandFilePatterns(patterns);
    if (!expanded.ok()) return expanded.status();
    const std::vector<std::string>& paths = *expanded;
    auto source = std::unique_ptr<FileSource>(new FileSource(paths, options, parser));
    for (size_t f = 0; f < paths.size(); ++f) {
      std::ifstream in(paths[f], std::ios::binary);
      if (!in) return absl::NotFoundError(absl::StrCat(paths[f], ": cannot read"));
      std::string line;
      int64_t number = 0;
      std::streamoff offset = in.tellg();
      while (std::getline(in, line)) {
        ++number;
        const std::streamoff here = offset;
        offset = in.tellg();
        if (line.empty() || (parser == ParseText && IsBlank(line))) continue;
        absl::Status bad =
            IsValidUtf8(line) ? parser(line, options.fields).status() : absl::InvalidArgumentError("invalid UTF-8");
        if (!bad.ok()) {
          if (options.strict) {
            return absl::InvalidArgumentError(absl::StrCat(paths[f], ":", number, ": ", bad.message()));
          }
          ++source->skipped_;
          continue;
        }
        source->lines_.push_back({static_cast<int>(f), here});
      }
    }
    return std::unique_ptr<ExampleSource>(std::move(source));
  }

  int64_t size() const override { return static_cast<int64_t>(lines_.size()); }
  int64_t skipped() const override { return skipped_; }

  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index < 0 || index >= size()) {
      return absl::OutOfRangeError(absl::StrCat("example ", index, " of ", size()));
    }
    const Line& l = lines_[static_cast<size_t>(index)];
    std::ifstream in(paths_[l.file], std::ios::binary);
    in.seekg(l.offset);
    std::string line;
    if (!std::getline(in, line)) {
      return absl::DataLossError(absl::StrCat(paths_[l.file], ": changed while in use"));
    }
    return parser_(line, options_.fields);
  }

 private:
  FileSource(std::vector<std::string> paths, FileSourceOptions options, LineParser parser)
      : paths_(std::move(paths)), options_(std::move(options)), parser_(parser) {}

  std::vector<std::string> paths_;
  FileSourceOptions options_;
  LineParser parser_;
  std::vector<Line> lines_;
  int64_t skipped_ = 0;
};

class VectorSource : public ExampleSource {
 public:
  explicit VectorSource(std::vector<Example> examples) : examples_(std::move(examples)) {}
  int64_t size() const override { return static_cast<int64_t>(examples_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index < 0 || index >= size()) return absl::OutOfRangeError(absl::StrCat("example ", index));
    return examples_[static_cast<size_t>(index)];
  }

 private:
  std::vector<Example> examples_;
};

class DigitsSource : public ExampleSource {
 public:
  explicit DigitsSource(DigitsToWordsSplit split) {
    for (int64_t n = 0; n <= kDigitsToWordsMaxNumber; ++n) {
      if (SplitOfNumber(n) == split) numbers_.push_back(static_cast<int32_t>(n));
    }
  }
  int64_t size() const override { return static_cast<int64_t>(numbers_.size()); }
  absl::StatusOr<Example> Get(int64_t index) const override {
    if (index < 0 || index >= size()) return absl::OutOfRangeError(absl::StrCat("example ", index));
    const int64_t n = numbers_[static_cast<size_t>(index)];
    return Example{{"inputs", std::to_string(n)}, {"targets", NumberToWords(n)}};
  }

 private:
  std::vector<int32_t> numbers_;
};

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t extra;
    if (c < 0x80) {
      extra = 0;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
    } else {
      return false;
    }
    if (i + extra >= n && extra > 0) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += 1 + extra;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(const std::vector<std::string>& patterns) {
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      paths.push_back(pattern);
      continue;
    }
    glob_t matches;
    const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
    if (rc == GLOB_NOMATCH) {
      globfree(&matches);
      return absl::NotFoundError(absl::StrCat(pattern, ": no file matches"));
    }
    if (rc != 0) {
      globfree(&matches);
      return absl::InternalError(absl::StrCat(pattern, ": cannot list"));
    }
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.push_back(matches.gl_pathv[i]);
    globfree(&matches);
  }
  return paths;
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTsvSource(const std::vector<std::string>& paths,
                                                             const FileSourceOptions& options) {
  return FileSource::Open(paths, options, ParseTsv);
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenJsonlSource(const std::vector<std::string>& paths,
                                                               const FileSourceOptions& options) {
  return FileSource::Open(paths, options, ParseJsonl);
}

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTextSource(const std::vector<std::string>& paths,
                                                              const std::string& field, bool strict) {
  FileSourceOptions options;
  options.fields = {field};
  options.strict = strict;
  return FileSource::Open(paths, options, ParseText);
}

std::unique_ptr<ExampleSource> InMemorySource(std::vector<Example> examples) {
  return std::make_unique<VectorSource>(std::move(examples));
}

absl::StatusOr<std::unique_ptr<ExampleSource>> DigitsToWordsSource(const std::string& split) {
  if (split == "train") return std::unique_ptr<ExampleSource>(new DigitsSource(DigitsToWordsSplit::kTrain));
  if (split == "validation") {
    return std::unique_ptr<ExampleSource>(new DigitsSource(DigitsToWordsSplit::kValidation));
  }
  if (split == "test") return std::unique_ptr<ExampleSource>(new DigitsSource(DigitsToWordsSplit::kTest));
  return absl::InvalidArgumentError(absl::StrCat("split \"", split, "\" is not one of train, validation, test"));
}

}  // namespace trainyard
