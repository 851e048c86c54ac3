#!/usr/bin/env bash
# T5X gin configurations in:
#   - our parser reads every statement of T5X-dialect files (gin/testdata/t5x
#     and tricky.gin) as PyPI's gin-config parser does: kinds, scopes,
#     selectors, arguments, values (as Python's repr) and lines;
#   - `trainyard convert --from-gin` turns a pretraining run into a spec that
#     validates, refuses an unhonourable binding naming its file and line
#     (exit 2), lists it with --allow-unmapped, refuses a model vocabulary the
#     task does not read, and gives a task definition the model's vocabulary;
#     the converted span-corruption run trains (`trainyard local`).
set -u
source tests/testing/cases.sh
trainyard="$1"
dump_gin="$2"
source tests/require_python.sh
require_python TRAINYARD_PYTHON gin
work="${TEST_TMPDIR:-$(mktemp -d)}/gin"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
t5x=gin/testdata/t5x

for f in $t5x/models/t5_1_1_base.gin $t5x/models/t5_1_1_small.gin $t5x/runs/pretrain.gin $t5x/runs/finetune.gin \
  tests/gin/tricky.gin; do
  name=$(basename "$f")
  if "$dump_gin" "$f" >"$work/ours.$name.jsonl" 2>"$work/err" &&
    "$python" tests/gin/gin_parse.py "$f" >"$work/gin.$name.jsonl" 2>>"$work/err"; then
    if diff "$work/gin.$name.jsonl" "$work/ours.$name.jsonl" >"$work/diff"; then
      case_pass "$name: parsed as gin-config parses it ($(wc -l <"$work/ours.$name.jsonl") statements)"
    else
      case_fail "$name: parsed as gin-config parses it" "$(cat "$work/diff")"
    fi
  else
    case_fail "$name: parsed as gin-config parses it" "$(cat "$work/err")"
  fi
done

# The bindings a pretraining run needs: its %gin.REQUIRED values, a local
# vocabulary, the task's files rather than a seqio cache, unpacked eval.
bindings=(
  --gin-binding "MODEL_DIR = '$work/run'"
  --gin-binding "TRAIN_STEPS = 1000"
  --gin-binding "MIXTURE_OR_TASK_NAME = 'digits_to_words'"
  --gin-binding "TASK_FEATURE_LENGTHS = {'inputs': 32, 'targets': 32}"
  --gin-binding "DROPOUT_RATE = 0.0"
  --gin-binding "USE_CACHED_TASKS = False"
  --gin-binding "train_eval/utils.DatasetConfig.pack = False"
  --gin-binding "seqio.SentencePieceVocabulary.sentencepiece_model_file = 'data/vocab/digits_to_words.model'"
)
convert() {  # OUT ARGS...: converts t5_1_1 small's pretraining run
  local out="$1"
  shift
  "$trainyard" convert --from-gin $t5x/models/t5_1_1_small.gin --from-gin $t5x/runs/pretrain.gin \
    --gin-search-path $t5x "${bindings[@]}" "$@" --out "$out"
}
case_check "a pretraining run converts" convert "$work/pretrain.textproto"
case_check "the converted spec validates" "$trainyard" validate "$work/pretrain.textproto"
case_check "the converted spec is T5.1.1 small's model" \
  grep -q "d_model: 512" "$work/pretrain.textproto"

expect_refusal() {  # NAME EXPECTED-MESSAGE ARGS...
  local name="$1" want="$2"
  shift 2
  convert "$work/refused.textproto" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "$want" "$work/err" && [ ! -e "$work/refused.textproto" ]; then
    case_pass "$name"
  else
    case_fail "$name" "exit $rc, want 2 and '$want' (no spec written); stderr: $(cat "$work/err")"
  fi
}
printf "include 'runs/pretrain.gin'\npartitioning.PjitPartitioner.num_partitions = 2\n" >"$work/sharded.gin"
bindings+=(--from-gin "$work/sharded.gin")
expect_refusal "model parallelism is refused naming the file and line" \
  "$work/sharded.gin:2: partitioning.PjitPartitioner.num_partitions = 2: Trainyard partitions data only"
case_check "--allow-unmapped converts the rest and records what it left out" \
  bash -c "$(declare -f convert); $(declare -p bindings t5x trainyard); convert '$work/unmapped.textproto' --allow-unmapped \
    && grep -q '^# NOT CONVERTED: $work/sharded.gin:2: partitioning.PjitPartitioner.num_partitions = 2' '$work/unmapped.textproto' \
    && '$trainyard' validate '$work/unmapped.textproto' >/dev/null"
unset 'bindings[${#bindings[@]}-1]' 'bindings[${#bindings[@]}-1]'
bindings=("${bindings[@]}")
expect_refusal "a model vocabulary the task does not read is refused" \
  "the model's vocabulary data/corpus/spm.model (seqio.SentencePieceVocabulary.sentencepiece_model_file) is not task digits_to_words's" \
  --gin-binding "seqio.SentencePieceVocabulary.sentencepiece_model_file = 'data/corpus/spm.model'"

# A span-corruption task of the user's: the definition takes the model's
# vocabulary and its 100 sentinels; a small network trains a few steps.
cat >"$work/tasks.textproto" <<EOT
task_definitions {
  name: "prose"
  splits { key: "train" value: "$PWD/data/corpus/train.txt" }
  splits { key: "validation" value: "$PWD/data/corpus/valid.txt" }
  preprocessors { span_corruption {} }
}
EOT
small=(
  --task-definitions "$work/tasks.textproto"
  --gin-binding "MIXTURE_OR_TASK_NAME = 'prose'"
  --gin-binding "seqio.SentencePieceVocabulary.sentencepiece_model_file = '$PWD/data/corpus/spm.model'"
  --gin-binding "seqio.SentencePieceVocabulary.extra_ids = 100"
  --gin-binding "network.T5Config.vocab_size = 512"
  --gin-binding "network.T5Config.emb_dim = 32"
  --gin-binding "network.T5Config.num_heads = 2"
  --gin-binding "network.T5Config.head_dim = 16"
  --gin-binding "network.T5Config.mlp_dim = 64"
  --gin-binding "network.T5Config.num_encoder_layers = 1"
  --gin-binding "network.T5Config.num_decoder_layers = 1"
  --gin-binding "network.T5Config.dtype = 'float32'"
  --gin-binding "BATCH_SIZE = 4"
  --gin-binding "TRAIN_STEPS = 3"
  --gin-binding "train.eval_period = 3"
  --gin-binding "train.eval_steps = 1"
  --gin-binding "utils.SaveCheckpointConfig.period = 3"
)
if case_check "a run over the user's task converts" convert "$work/prose.textproto" "${small[@]}"; then
  case_check "the task definition carries the model's vocabulary and sentinels" \
    sh -c "grep -q 'vocabulary: \"$PWD/data/corpus/spm.model\"' '$work/prose.textproto' \
      && grep -q 'extra_ids: 100' '$work/prose.textproto'"
  case_check "the converted run trains and evaluates" \
    "$trainyard" local --threads 1 "$work/prose.textproto" --state-dir "$work/state"
  case_check "it wrote its checkpoint at step 3" test -d "$work/run/checkpoint_3"
fi
