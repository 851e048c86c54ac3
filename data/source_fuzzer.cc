// libFuzzer entry point for example files named by job specs
// (task_definitions): the bytes as a JSONL file, a TSV file, a TFRecord
// file, and as the data of TFRecord records (a tf.train.Example read for
// text and for token features), read strictly and leniently. Every outcome is a Status or examples with the
// requested fields; never a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "data/source.h"
#include "data/tfrecord.h"

namespace {

void ReadAll(absl::StatusOr<std::unique_ptr<trainyard::ExampleSource>> source) {
  if (!source.ok()) return;
  for (int64_t i = 0; i < (*source)->size(); ++i) {
    absl::StatusOr<trainyard::Example> ex = (*source)->Get(i);
    if (!ex.ok()) continue;
    if (!ex->count("inputs") || !ex->count("targets")) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/trainyard-source-fuzz-XXXXXX";
    const char* made = mkdtemp(tmpl);
    if (made == nullptr) std::abort();
    return std::string(made);
  }();
  for (const char* name : {"/f.jsonl", "/f.tsv", "/f.tfrecord"}) {
    std::ofstream(dir + name, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  }
  const std::string record = trainyard::FrameTfRecord(std::string_view(reinterpret_cast<const char*>(data), size));
  std::ofstream(dir + "/records.tfrecord", std::ios::binary | std::ios::trunc) << record << record;
  for (bool strict : {true, false}) {
    trainyard::FileSourceOptions options;
    options.strict = strict;
    ReadAll(trainyard::OpenJsonlSource({dir + "/f.jsonl"}, options));
    ReadAll(trainyard::OpenTsvSource({dir + "/f.tsv"}, options));
    ReadAll(trainyard::OpenTfRecordSource({dir + "/f.tfrecord"}, options));
    ReadAll(trainyard::OpenTfRecordSource({dir + "/records.tfrecord"}, options));
    ReadAll(trainyard::OpenTfRecordTokenSource({dir + "/records.tfrecord"}, options));
  }
  return 0;
}
