"""TFRecord files of tf.train.Example written by TensorFlow itself.

usage: write_tfrecords.py OUT_DIR

Writes into OUT_DIR:
  plain.tfrecord        tf.io.TFRecordWriter, no compression
  gzip.tfrecord.gz      the same examples, TFRecordWriter's GZIP option
  gzip_unnamed.tfrecord the same GZIP file under a plain name
  expected.jsonl        the examples' text features inputs/targets, in order
  damaged.tfrecord      plain.tfrecord with one byte of record 2's data flipped
  damaged_offset.txt    record 2's byte offset
  train.tfrecord-0000K-of-00002, validation.tfrecord-00000-of-00001
                        shards of "question"/"answer" examples for a job
Every example also has an int64 and a float feature, which are not text and
are left out when only inputs/targets are read.
"""
import json
import os
import sys

import tensorflow as tf

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n):
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + words(rest))


def example(features):
    feature = {}
    for name, value in features.items():
        if isinstance(value, str):
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))
        elif isinstance(value, int):
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value, -value]))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write(path, records, compression=None):
    options = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    with tf.io.TFRecordWriter(path, options) as writer:
        for r in records:
            writer.write(r)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    texts = [{"inputs": str(n), "targets": words(n)} for n in range(0, 300, 7)]
    texts.append({"inputs": "caf\u00e9 \u00fcber \u65e5\u672c", "targets": ""})  # UTF-8, an empty text
    texts.append({"inputs": "long " * 2000, "targets": "x"})
    records = [example(dict(t, id=i, score=i / 4)) for i, t in enumerate(texts)]
    write(os.path.join(out, "plain.tfrecord"), records)
    write(os.path.join(out, "gzip.tfrecord.gz"), records, "GZIP")
    write(os.path.join(out, "gzip_unnamed.tfrecord"), records, "GZIP")
    with open(os.path.join(out, "expected.jsonl"), "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
    # Record 2 starts after records 0 and 1 (8 + 4 + data + 4 bytes each).
    offset = sum(16 + len(r) for r in records[:2])
    data = bytearray(open(os.path.join(out, "plain.tfrecord"), "rb").read())
    data[offset + 12 + len(records[2]) // 2] ^= 0x20
    open(os.path.join(out, "damaged.tfrecord"), "wb").write(bytes(data))
    open(os.path.join(out, "damaged_offset.txt"), "w").write(str(offset))
    # TensorFlow itself refuses the damaged file.
    try:
        for _ in tf.data.TFRecordDataset(os.path.join(out, "damaged.tfrecord")):
            pass
        sys.exit("TensorFlow read the damaged file")
    except tf.errors.DataLossError:
        pass
    qa = [example({"question": str(n), "answer": words(n), "id": n}) for n in range(1000)]
    write(os.path.join(out, "train.tfrecord-00000-of-00002"), qa[:400])
    write(os.path.join(out, "train.tfrecord-00001-of-00002"), qa[400:900], "GZIP")
    write(os.path.join(out, "validation.tfrecord-00000-of-00001"), qa[900:])


if __name__ == "__main__":
    main()
