// Data prepared by TensorFlow's tools, read as it lies on disk:
//
//  - seqio's cached tasks (seqio_cache_tasks): a task's cache directory
//    holds, per split, info.<split>.json (the features, their dtypes, the
//    number of shards), stats.<split>.json (the number of examples) and the
//    TFRecord shards <split>.tfrecord-XXXXX-of-YYYYY of tf.train.Example
//    whose token features are int64 lists. Read without tokenising: the
//    examples' features are token ids (PackTokenIds), for a task with
//    Task::pretokenized.
//  - TFDS-prepared datasets (download_and_prepare): DATA_DIR/NAME/CONFIG/
//    VERSION/ holds dataset_info.json (the splits and their shards'
//    lengths), features.json and the shards NAME-SPLIT.tfrecord-XXXXX-of-
//    YYYYY, whose text features are read as ParseTfExample reads them; a
//    slice of the split ("train[:95%]") is a contiguous range of its
//    examples in shard order, as TFDS reads them unshuffled.
//
// Both check what they read against the metadata (shard count, example
// counts) and fail naming the file; the sources are random access as
// data/tfrecord.h's are.
#ifndef TRAINYARD_DATA_PREPARED_DATA_H_
#define TRAINYARD_DATA_PREPARED_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/source.h"

namespace trainyard {

// The split `split` of the seqio cache `dir`, its token features `fields`.
// kNotFound when `dir` holds no info.<split>.json; kInvalidArgument when a
// feature is missing or not integer; kDataLoss when the shards or their
// examples do not match the info and stats.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSeqioCacheSource(const std::string& dir, const std::string& split,
                                                                    const std::vector<std::string>& fields);

// A TFDS split, "tfds:NAME[/CONFIG][:VERSION]:SPLIT[SLICE]" (see
// spec/task_spec.h's ParseTfdsSplit), under `data_dir` (empty: the
// environment's TFDS_DATA_DIR, else ~/tensorflow_datasets, as TFDS does).
// Without a version, the newest prepared one. kNotFound naming what is
// missing (listing the splits or versions there).
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfdsSource(const std::string& value, const std::string& data_dir,
                                                              const FileSourceOptions& options);

// Examples [begin, end) of `base`.
std::unique_ptr<ExampleSource> SliceSource(std::unique_ptr<ExampleSource> base, int64_t begin, int64_t end);

// TFDS's slice bounds of a split of `n` examples: [begin, end).
std::pair<int64_t, int64_t> TfdsSliceBounds(bool has_from, int64_t from, bool has_to, int64_t to, bool percent,
                                            int64_t n);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_PREPARED_DATA_H_
