// Prints the examples of TFRecord files, a TFDS split or a seqio cache as a
// task reads them, one JSON object per line (keys sorted; a seqio cache's
// token features as arrays of ids), for the data tests to compare.
//
// usage: read_tfrecord [--fields inputs,targets] FILE_OR_PATTERN...
//        read_tfrecord [--fields ...] --tfds tfds:NAME...:SPLIT[SLICE] --data-dir DIR
//        read_tfrecord [--fields ...] --seqio-cache DIR --split SPLIT
// Exit code 0, or 2 with the error on stderr.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "data/prepared_data.h"
#include "data/tfrecord.h"
#include "nlohmann/json.hpp"

namespace {

struct Args {
  trainyard::FileSourceOptions options;
  std::vector<std::string> paths;
  std::string tfds, data_dir, seqio_cache, split;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--fields" && has_value) {
      a.options.fields = absl::StrSplit(argv[++i], ',');
    } else if (arg == "--tfds" && has_value) {
      a.tfds = argv[++i];
    } else if (arg == "--data-dir" && has_value) {
      a.data_dir = argv[++i];
    } else if (arg == "--seqio-cache" && has_value) {
      a.seqio_cache = argv[++i];
    } else if (arg == "--split" && has_value) {
      a.split = argv[++i];
    } else {
      a.paths.push_back(arg);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const bool tokens = !a.seqio_cache.empty();
  auto source = tokens            ? trainyard::OpenSeqioCacheSource(a.seqio_cache, a.split, a.options.fields)
                : !a.tfds.empty() ? trainyard::OpenTfdsSource(a.tfds, a.data_dir, a.options)
                                  : trainyard::OpenTfRecordSource(a.paths, a.options);
  if (!source.ok()) {
    std::cerr << "error: " << source.status().message() << "\n";
    return 2;
  }
  for (int64_t i = 0; i < (*source)->size(); ++i) {
    auto example = (*source)->Get(i);
    if (!example.ok()) {
      std::cerr << "error: " << example.status().message() << "\n";
      return 2;
    }
    nlohmann::json line = nlohmann::json::object();
    for (const auto& [name, value] : *example) {
      if (tokens) {
        line[name] = trainyard::UnpackTokenIds(value);
      } else {
        line[name] = value;
      }
    }
    std::cout << line.dump() << "\n";
  }
  return 0;
}
