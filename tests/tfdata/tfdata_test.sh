#!/usr/bin/env bash
# TFRecord files of tf.train.Example written by TensorFlow itself
# (tf.io.TFRecordWriter, in .venv-tf made by scripts/setup.sh), read by
# trainyard:
#   - a plain and a GZIP file (by name and by its magic bytes) read back as
#     the same text examples, in order, other features left out;
#   - a flipped byte in a record's data refused, naming the file and the
#     record's byte offset, exit 2;
#   - a job (`trainyard local`, the tiny model) training on TFRecord shards
#     whose features a rekey renames, and the same job on a damaged shard
#     failing with the file and offset named;
#   - a seqio-style cache (token ids) read back id for id, and a job
#     training on it;
#   - a TFDS builder's download_and_prepare: a slice read back as tfds reads
#     it, and a job training on it.
# Every check is a test case (tests/testing/cases.sh).
set -u
source tests/testing/cases.sh
trainyard="$1"
read_tfrecord="$2"
source tests/require_python.sh
require_python TRAINYARD_TF_PYTHON tensorflow
tf_python="$python"
work="${TEST_TMPDIR:-$(mktemp -d)}/tfdata"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1

case_check "TensorFlow writes the TFRecord files" "$tf_python" tests/tfdata/write_tfrecords.py "$work" || exit 1
for file in plain.tfrecord gzip.tfrecord.gz gzip_unnamed.tfrecord; do
  "$read_tfrecord" "$work/$file" >"$work/$file.jsonl" 2>"$work/err"
  if [ $? -eq 0 ] && cmp -s "$work/$file.jsonl" "$work/expected.jsonl"; then
    case_pass "$file: the same examples in order"
  else
    case_fail "$file: the same examples in order" "$(cat "$work/err"; diff "$work/$file.jsonl" "$work/expected.jsonl" | head)"
  fi
done

offset=$(cat "$work/damaged_offset.txt")
"$read_tfrecord" "$work/damaged.tfrecord" >/dev/null 2>"$work/err"
code=$?
if [ "$code" -eq 2 ] && grep -qF "$work/damaged.tfrecord: damaged record at byte offset $offset: the data's CRC does not match" "$work/err"; then
  case_pass "a flipped byte: refused naming the file and offset, exit 2"
else
  case_fail "a flipped byte: refused naming the file and offset, exit 2" "exit $code, $(cat "$work/err")"
fi

job() {  # NAME TRAIN_PATTERN
  cat >"$work/$1.textproto" <<EOF2
name: "$1"
model { preset: "tiny" }
task: "qa"
task_definitions {
  name: "qa"
  splits { key: "train" value: "$2" }
  splits { key: "validation" value: "$work/validation.tfrecord-00000-of-00001" }
  preprocessors { rekey { key_map { key: "inputs" value: "question" } key_map { key: "targets" value: "answer" } } }
}
feature_lengths { inputs: 16 targets: 16 }
batch_size: 8
total_steps: 3
output_dir: "$work/$1"
checkpoint { async: false }
EOF2
}
job tfrecord_job "$work/train.tfrecord-*-of-00002"
if case_check "a job trains on TFRecord shards (trainyard local)" \
  "$trainyard" local "$work/tfrecord_job.textproto" --state-dir "$work/state"; then
  [ -d "$work/tfrecord_job/checkpoint_3" ] && case_pass "the job saved checkpoint_3" \
    || case_fail "the job saved checkpoint_3" "$(ls "$work/tfrecord_job" 2>&1)"
fi
job damaged_job "$work/damaged.tfrecord"
sed -i 's/key: "inputs" value: "question"/key: "inputs" value: "inputs"/; s/key: "targets" value: "answer"/key: "targets" value: "targets"/' \
  "$work/damaged_job.textproto"
sed -i "s|$work/validation.tfrecord-00000-of-00001|$work/plain.tfrecord|" "$work/damaged_job.textproto"
"$trainyard" local "$work/damaged_job.textproto" --state-dir "$work/state2" >"$work/out" 2>&1
code=$?
if [ "$code" -ne 0 ] && grep -qF "$work/damaged.tfrecord: damaged record at byte offset $offset" "$work/out"; then
  case_pass "a job on a damaged file fails naming the file and offset"
else
  case_fail "a job on a damaged file fails naming the file and offset" "exit $code, $(tail -20 "$work/out")"
fi

# seqio's cached task (token ids, read without tokenising) and a TFDS
# builder's download_and_prepare, both made by the real libraries.
if case_check "a seqio-style cache and a TFDS builder's download_and_prepare" \
  "$tf_python" tests/tfdata/write_prepared.py "$work/prepared"; then
  p="$work/prepared"
  for split in train validation; do
    "$read_tfrecord" --seqio-cache "$p/seqio_cache/qa" --split "$split" >"$p/cache.$split.jsonl" 2>"$work/err"
    if [ $? -eq 0 ] && cmp -s "$p/cache.$split.jsonl" "$p/expected_cache.$split.jsonl"; then
      case_pass "seqio cache, $split: the same token ids in order"
    else
      case_fail "seqio cache, $split: the same token ids in order" "$(cat "$work/err"; diff "$p/cache.$split.jsonl" "$p/expected_cache.$split.jsonl" | head)"
    fi
  done
  "$read_tfrecord" --fields answer,question --tfds "tfds:toy_qa/small:1.0.0:train[:60%]" --data-dir "$p/tfds" \
    >"$p/tfds.jsonl" 2>"$work/err"
  if [ $? -eq 0 ] && cmp -s "$p/tfds.jsonl" "$p/expected_tfds.jsonl"; then
    case_pass "TFDS train[:60%]: the examples tfds reads, in order"
  else
    case_fail "TFDS train[:60%]: the examples tfds reads, in order" "$(cat "$work/err"; diff "$p/tfds.jsonl" "$p/expected_tfds.jsonl" | head)"
  fi
  "$read_tfrecord" --tfds "tfds:toy_qa/small:train[:60%]" --data-dir "$p/tfds" >/dev/null 2>"$work/err"
  code=$?
  if [ "$code" -eq 2 ] && grep -q "no feature \"inputs\"; the example has: answer, id, question" "$work/err"; then
    case_pass "TFDS: features named, missing ones refused listing those there"
  else
    case_fail "TFDS: features named, missing ones refused listing those there" "exit $code, $(cat "$work/err")"
  fi
  cat >"$work/cache_job.textproto" <<EOF2
name: "cache_job"
model { preset: "tiny" }
task: "qa_cached"
task_definitions {
  name: "qa_cached"
  splits { key: "train" value: "seqio_cache:$p/seqio_cache/qa" }
  splits { key: "validation" value: "seqio_cache:$p/seqio_cache/qa" }
}
feature_lengths { inputs: 16 targets: 16 }
batch_size: 8
total_steps: 3
output_dir: "$work/cache_job"
checkpoint { async: false }
EOF2
  case_check "a job trains on the seqio cache (trainyard local)" \
    "$trainyard" local "$work/cache_job.textproto" --state-dir "$work/state3"
  cat >"$work/tfds_job.textproto" <<EOF2
name: "tfds_job"
model { preset: "tiny" }
task: "toy_qa"
task_definitions {
  name: "toy_qa"
  splits { key: "train" value: "tfds:toy_qa/small:1.0.0:train[:90%]" }
  splits { key: "validation" value: "tfds:toy_qa/small:1.0.0:train[90%:]" }
  tfds_data_dir: "$p/tfds"
  preprocessors { rekey { key_map { key: "inputs" value: "question" } key_map { key: "targets" value: "answer" } } }
}
feature_lengths { inputs: 16 targets: 16 }
batch_size: 8
total_steps: 3
output_dir: "$work/tfds_job"
checkpoint { async: false }
EOF2
  case_check "a job trains on the TFDS split (trainyard local)" \
    "$trainyard" local "$work/tfds_job.textproto" --state-dir "$work/state4"

  # T5's wmt_t2t_ende_v003, named in a T5X gin file, read from the local
  # TFDS copy (--tfds-data-dir): the converted run trains and evaluates.
  t5x=gin/testdata/t5x
  if case_check "a T5X run naming wmt_t2t_ende_v003 converts (convert --from-gin --tfds-data-dir)" \
    "$trainyard" convert --from-gin $t5x/models/t5_1_1_small.gin --from-gin $t5x/runs/pretrain.gin \
      --gin-search-path $t5x --tfds-data-dir "$p/tfds" \
      --gin-binding "MODEL_DIR = '$work/wmt_run'" \
      --gin-binding "MIXTURE_OR_TASK_NAME = 'wmt_t2t_ende_v003'" \
      --gin-binding "TASK_FEATURE_LENGTHS = {'inputs': 32, 'targets': 16}" \
      --gin-binding "DROPOUT_RATE = 0.0" \
      --gin-binding "USE_CACHED_TASKS = False" \
      --gin-binding "train_eval/utils.DatasetConfig.pack = False" \
      --gin-binding "seqio.SentencePieceVocabulary.sentencepiece_model_file = '$PWD/data/corpus/spm.model'" \
      --gin-binding "seqio.SentencePieceVocabulary.extra_ids = 100" \
      --gin-binding "network.T5Config.vocab_size = 512" \
      --gin-binding "network.T5Config.emb_dim = 32" \
      --gin-binding "network.T5Config.num_heads = 2" \
      --gin-binding "network.T5Config.head_dim = 16" \
      --gin-binding "network.T5Config.mlp_dim = 64" \
      --gin-binding "network.T5Config.num_encoder_layers = 1" \
      --gin-binding "network.T5Config.num_decoder_layers = 1" \
      --gin-binding "network.T5Config.dtype = 'float32'" \
      --gin-binding "BATCH_SIZE = 4" \
      --gin-binding "TRAIN_STEPS = 3" \
      --gin-binding "train.eval_period = 3" \
      --gin-binding "train.eval_steps = 1" \
      --gin-binding "utils.SaveCheckpointConfig.period = 3" \
      --out "$work/wmt.textproto"; then
    case_check "the spec defines the task over TFDS with T5's translate step" \
      sh -c "grep -q 'tfds:wmt_t2t_translate/de-en:1.0.0:train' '$work/wmt.textproto' \
        && grep -q 'source_language: \"en\"' '$work/wmt.textproto' && grep -q 'tfds_data_dir: \"$p/tfds\"' '$work/wmt.textproto'"
    case_check "the converted run trains and evaluates on the TFDS copy" \
      "$trainyard" local --threads 1 "$work/wmt.textproto" --state-dir "$work/state5"
    case_check "it wrote its checkpoint at step 3" test -d "$work/wmt_run/checkpoint_3"
  fi
fi
