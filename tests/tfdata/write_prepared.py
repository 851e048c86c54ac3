"""A seqio-style cached task and a TFDS-prepared dataset, made with
TensorFlow and TensorFlow Datasets.

usage: write_prepared.py OUT_DIR

  OUT_DIR/seqio_cache/qa/   seqio's cache layout for splits train and
      validation: info.<split>.json, stats.<split>.json and the shards
      <split>.tfrecord-0000K-of-0000N of tf.train.Example whose token
      features inputs/targets are int64 lists (as seqio writes int32
      features), beside an inputs_pretokenized text feature
  OUT_DIR/expected_cache.<split>.jsonl   their token ids, in order
  OUT_DIR/tfds/toy_qa/small/1.0.0/   a tfds.core.GeneratorBasedBuilder's
      download_and_prepare (dataset_info.json, features.json, shards)
  OUT_DIR/expected_tfds.jsonl   tfds's own reading of train[:60%] (not
      shuffled), as {"answer": ..., "question": ...}
  OUT_DIR/tfds/wmt_t2t_translate/de-en/1.0.0/   a builder with the name,
      config, version and features (a tfds.features.Translation of de and
      en) of TFDS's wmt_t2t_translate, which T5's wmt_t2t_ende_v003 reads:
      numbers in German and English words
"""
import json
import os
import sys

import tensorflow as tf
import tensorflow_datasets as tfds


def token_example(inputs, targets, text):
    feature = {
        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=inputs)),
        "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=targets)),
        "inputs_pretokenized": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_cache(out):
    cache = os.path.join(out, "seqio_cache", "qa")
    os.makedirs(cache, exist_ok=True)
    for split, count, shards in (("train", 300, 2), ("validation", 20, 1)):
        rows = []
        for i in range(count):
            n = 3 + i % 60
            rows.append(([3 + (i * 7 + k) % 120 for k in range(1 + i % 5)], [3 + (n + k) % 120 for k in range(2 + i % 4)]))
        per_shard = (count + shards - 1) // shards
        for s in range(shards):
            path = os.path.join(cache, "%s.tfrecord-%05d-of-%05d" % (split, s, shards))
            with tf.io.TFRecordWriter(path) as w:
                for inputs, targets in rows[s * per_shard:(s + 1) * per_shard]:
                    w.write(token_example(inputs, targets, "text"))
        info = {"num_shards": shards, "seqio_version": "0.0.19", "features": {
            "inputs": {"shape": [None], "dtype": "int32"},
            "targets": {"shape": [None], "dtype": "int32"},
            "inputs_pretokenized": {"shape": [], "dtype": "string"}}}
        stats = {"examples": count, "inputs_tokens": sum(len(r[0]) for r in rows),
                 "targets_tokens": sum(len(r[1]) for r in rows)}
        json.dump(info, open(os.path.join(cache, "info.%s.json" % split), "w"), indent=2)
        json.dump(stats, open(os.path.join(cache, "stats.%s.json" % split), "w"), indent=2)
        with open(os.path.join(out, "expected_cache.%s.jsonl" % split), "w") as f:
            for inputs, targets in rows:
                f.write(json.dumps({"inputs": inputs, "targets": targets}, separators=(",", ":")) + "\n")


ONES = "zero one two three four five six seven eight nine".split()


class ToyQa(tfds.core.GeneratorBasedBuilder):
    """Numbers and their digits spelled out."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="small", description="60 and 20 examples")]

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "question": tfds.features.Text(),
                "answer": tfds.features.Text(),
                "id": tf.int64,
            }),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # generated, nothing to download
        return {"train": self._generate_examples(0, 60), "test": self._generate_examples(60, 80)}

    def _generate_examples(self, first, last):
        for n in range(first, last):
            yield n, {"question": str(n), "answer": " ".join(ONES[int(d)] for d in str(n)), "id": n}


GERMAN = "null eins zwei drei vier fünf sechs sieben acht neun".split()


class WmtT2tTranslate(tfds.core.GeneratorBasedBuilder):
    """Digits spelled out in German and English, as TFDS's WMT builders lay
    out a language pair."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="de-en", description="German and English")]

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.Translation(languages=["de", "en"]))

    def _split_generators(self, dl_manager):
        del dl_manager  # generated, nothing to download
        return {"train": self._generate_examples(0, 64), "validation": self._generate_examples(64, 72)}

    def _generate_examples(self, first, last):
        for n in range(first, last):
            digits = str(n)
            yield n, {"de": " ".join(GERMAN[int(d)] for d in digits), "en": " ".join(ONES[int(d)] for d in digits)}


def write_tfds(out):
    data_dir = os.path.join(out, "tfds")
    builder = ToyQa(data_dir=data_dir)
    builder.download_and_prepare()
    ds = builder.as_dataset(split="train[:60%]", shuffle_files=False)
    with open(os.path.join(out, "expected_tfds.jsonl"), "w") as f:
        for ex in ds.as_numpy_iterator():
            row = {"answer": ex["answer"].decode(), "question": ex["question"].decode()}
            f.write(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n")
    WmtT2tTranslate(data_dir=data_dir).download_and_prepare()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write_cache(out)
    write_tfds(out)


if __name__ == "__main__":
    main()
