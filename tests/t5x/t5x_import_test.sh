#!/usr/bin/env bash
# T5X checkpoints in and out: random T5 1.0 and T5.1.1 models from
# transformers are written as T5X checkpoints (tensorstore + msgpack, as
# T5X's Checkpointer lays them out; the T5 1.0 one with bfloat16 parameters),
# imported with `trainyard convert --from-t5x`, and checked:
#   - tensor by tensor against what T5X's format holds (parameters and
#     Adafactor's statistics, bit for bit) and the step;
#   - exported again with `trainyard convert --to-t5x` (bfloat16 parameters
#     for T5 1.0, several chunks per array) and read back as T5X's
#     checkpointer reads it: every parameter, statistic and unused slot the
#     original's, bit for bit, stored or inline as there, and the step;
#   - scoring text as its Hugging Face export does in transformers, whose
#     tensors are the original model's;
#   - fine-tuning from it continues at T5X's step with its Adafactor state,
#     and that checkpoint exported to T5X holds the fine-tuned parameters and
#     statistics, bit for bit;
#   - the same models in T5X's Orbax format (the `state` item of Orbax's
#     PyTreeCheckpointHandler, with OCDBT as T5X saves it and without, zarr
#     v2 as Orbax's default and v3),
#     written with orbax-checkpoint and imported: every tensor and statistic
#     as Orbax restores it, bit for bit, and the step;
#   - broken input, and an existing T5X checkpoint to write, refused with the
#     file named, exit 2.
# Every check is a test case (tests/testing/cases.sh).
set -u
source tests/testing/cases.sh
trainyard="$1"
source tests/require_python.sh
require_python TRAINYARD_PYTHON sentencepiece
hf_python="$python"
require_python TRAINYARD_JAX_PYTHON tensorstore
ts_python="$python"
work="${TEST_TMPDIR:-$(mktemp -d)}/t5x"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
vocab="data/vocab/digits_to_words.model"
cat >"$work/examples.jsonl" <<'JSONL'
{"input": "12", "target": "twelve"}
{"input": "7 + 5", "target": "twelve"}
{"input": "one hundred and three", "target": "103"}
{"input": "99", "target": "ninety nine"}
JSONL

case_check "transformers makes the source models" "$hf_python" tests/t5x/make_hf.py "$work/hf" || exit 1
for variant in v1_0 v1_1; do
  step=1000000
  bf16=""
  if [ "$variant" = v1_0 ]; then step=999900; bf16="--bfloat16"; fi
  case_check "$variant: written in T5X's format" \
    "$ts_python" tests/t5x/write_t5x.py "$work/hf/$variant" "$work/t5x_$variant" "$step" $bf16 || continue
  # A model directory: the newest complete checkpoint_<step> is taken (an
  # unfinished .tmp- one is not).
  mkdir -p "$work/t5x_$variant/checkpoint_$((step + 100)).tmp-1700000000"
  case_check "$variant: trainyard convert --from-t5x" \
    "$trainyard" convert --from-t5x "$work/t5x_$variant" --out "$work/ckpt_$variant" || continue
  case_check "$variant: every tensor and statistic as T5X holds it" \
    "$ts_python" tests/t5x/compare.py "$work/t5x_$variant/checkpoint_$step" "$work/ckpt_$variant"
  # Back to T5X, in the original's dtype, chunks of 2048 float32s.
  dtype=float32
  if [ "$variant" = v1_0 ]; then dtype=bfloat16; fi
  case_check "$variant: trainyard convert --to-t5x" \
    "$trainyard" convert --checkpoint "$work/ckpt_$variant" --to-t5x "$work/out_$variant" --dtype "$dtype" \
    --chunk-bytes 8192
  case_check "$variant: T5X -> trainyard -> T5X: every leaf the original's, bit for bit, as T5X reads it" \
    "$ts_python" tests/t5x/compare_t5x.py "$work/t5x_$variant/checkpoint_$step" "$work/out_$variant"
  case_check "$variant: trainyard score on the imported checkpoint" \
    sh -c "'$trainyard' score --checkpoint '$work/ckpt_$variant' --examples '$work/examples.jsonl' --json \
             >'$work/scores_$variant.jsonl'"
  case_check "$variant: trainyard convert --to-hf" \
    "$trainyard" convert --checkpoint "$work/ckpt_$variant" --to-hf "$work/back_$variant"
  case_check "$variant: transformers scores the text as trainyard does" \
    "$hf_python" tests/t5x/score_hf.py "$work/back_$variant" "$work/hf/$variant" "$vocab" \
    "$work/scores_$variant.jsonl" $bf16
done

# T5X's Orbax format: the `state` item with OCDBT (T5X's use_ocdbt=True) and
# without (a zarr directory per leaf), zarr v2 (Orbax's default) or v3.
for case in v1_0:ocdbt v1_0:no-ocdbt v1_1:ocdbt v1_1:no-ocdbt v1_1:ocdbt-zarr3; do
  variant="${case%%:*}"
  layout="${case#*:}"
  step=1000000
  flags=()
  if [ "$variant" = v1_0 ]; then step=999900; flags+=(--bfloat16); fi
  if [ "$layout" = no-ocdbt ]; then flags+=(--no-ocdbt); fi
  if [ "$layout" = ocdbt-zarr3 ]; then flags+=(--zarr3); fi
  name="orbax_${variant}_$layout"
  case_check "$variant, Orbax ($layout): written as T5X's OrbaxCheckpointManagerInterface saves" \
    env JAX_PLATFORMS=cpu "$ts_python" tests/t5x/write_orbax.py "$work/hf/$variant" "$work/$name" "$step" \
    "${flags[@]}" || continue
  case_check "$variant, Orbax ($layout): trainyard convert --from-t5x" \
    "$trainyard" convert --from-t5x "$work/$name" --out "$work/ckpt_$name" || continue
  case_check "$variant, Orbax ($layout): every tensor and statistic as Orbax restores it, bit for bit" \
    env JAX_PLATFORMS=cpu "$ts_python" tests/t5x/compare.py "$work/$name/checkpoint_$step" "$work/ckpt_$name"
done

# Fine-tuning the T5.1.1 import (dropout on, as fine-tuning has it): the job
# restores T5X's Adafactor statistics and step, and saves at step + 2.
ff="GATED_GELU"
cat >"$work/finetune.textproto" <<EOF2
name: "from-t5x"
kind: FINETUNING
model {
  config {
    vocab_size: 512 d_model: 128 num_heads: 4 d_kv: 32 d_ff: 256 num_encoder_layers: 2 num_decoder_layers: 2
    feed_forward: $ff tie_embeddings: false dropout_rate: 0.1
  }
}
task: "digits_to_words"
feature_lengths { inputs: 16 targets: 32 }
batch_size: 4
total_steps: 1000002
summary_period: 1
restore { mode: SPECIFIC path: "$work/ckpt_v1_1" }
output_dir: "$work/finetune"
checkpoint { async: false }
EOF2
case_check "fine-tuning from the T5X import: trainyard local" \
  "$trainyard" local "$work/finetune.textproto" --state-dir "$work/state"
if [ -f "$work/finetune/checkpoint_1000002/metadata.json" ] && [ ! -e "$work/finetune/checkpoint_2" ]; then
  case_pass "fine-tuning continues at T5X's step (checkpoint_1000002)"
else
  case_fail "fine-tuning continues at T5X's step (checkpoint_1000002)" "$(ls "$work/finetune" 2>&1)"
fi
# Trainyard's own Adafactor state, trained two steps further, to T5X: read
# as T5X reads it, every tensor and statistic is the checkpoint's.
case_check "the fine-tuned checkpoint: trainyard convert --to-t5x" \
  "$trainyard" convert --checkpoint "$work/finetune/checkpoint_1000002" --to-t5x "$work/out_finetune"
case_check "the fine-tuned checkpoint as T5X holds it: every tensor and statistic, the step" \
  "$ts_python" tests/t5x/compare.py "$work/out_finetune/checkpoint_1000002" "$work/finetune/checkpoint_1000002"

# Broken input: exit 2, the file named, nothing written.
expect_refusal() {  # NAME PATTERN ARGS...
  local name="$1" pattern="$2"
  shift 2
  "$trainyard" convert "$@" 2>"$work/err"
  local code=$?
  if [ "$code" -eq 2 ] && grep -q -- "$pattern" "$work/err" && [ ! -e "$work/never" ]; then
    case_pass "$name"
  else
    case_fail "$name" "exit $code, $(cat "$work/err")"
  fi
}
cp -r "$work/t5x_v1_1/checkpoint_1000000" "$work/cut"
chunk=$(ls "$work/cut/target.encoder.layers_0.mlp.wo.kernel/" | grep -v zarray | head -1)
truncate -s 10 "$work/cut/target.encoder.layers_0.mlp.wo.kernel/$chunk"
expect_refusal "a truncated chunk is refused, naming it" \
  "target.encoder.layers_0.mlp.wo.kernel/$chunk: does not gunzip" --from-t5x "$work/cut" --out "$work/never"
cp -r "$work/t5x_v1_1/checkpoint_1000000" "$work/missing"
rm -r "$work/missing/target.decoder.decoder_norm.scale"
expect_refusal "a missing array is refused, naming it" \
  "target.decoder.decoder_norm.scale/.zarray: cannot read" --from-t5x "$work/missing" --out "$work/never"
cp -r "$work/orbax_v1_1_ocdbt/checkpoint_1000000" "$work/orbax_cut"
truncate -s -1 "$work/orbax_cut/state/manifest.ocdbt"
expect_refusal "Orbax: a truncated OCDBT manifest is refused, naming it" \
  "orbax_cut/state/manifest.ocdbt: the header says" --from-t5x "$work/orbax_cut" --out "$work/never"
# The merged database's B+tree nodes (state/d/): a damaged one fails its
# CRC-32C.
cp -r "$work/orbax_v1_1_ocdbt/checkpoint_1000000" "$work/orbax_crc"
node_file=$(ls "$work/orbax_crc/state/d/" | head -1)
printf 'XXXX' | dd of="$work/orbax_crc/state/d/$node_file" bs=1 seek=20 conv=notrunc status=none
expect_refusal "Orbax: a damaged OCDBT node is refused, naming its file" \
  "orbax_crc/state/d/$node_file (B+tree node at byte [0-9]*): CRC-32C" --from-t5x "$work/orbax_crc" --out "$work/never"
cp -r "$work/orbax_v1_1_no-ocdbt/checkpoint_1000000" "$work/orbax_text"
sed -i 's/"value_type": "np.ndarray"/"value_type": "string"/' "$work/orbax_text/state/_METADATA"
expect_refusal "Orbax: a leaf that is not an array is refused with the reason" \
  "orbax_text/state/_METADATA: .*value_type \"string\"; allowed: jax.Array" --from-t5x "$work/orbax_text" \
  --out "$work/never"
expect_refusal "a directory that is not a checkpoint is refused" \
  "neither a T5X checkpoint" --from-t5x "$work/hf" --out "$work/never"
expect_refusal "--vocab is refused with --from-t5x" \
  "--vocab goes with --from-hf" --from-t5x "$work/t5x_v1_1" --vocab "$vocab" --out "$work/never"
expect_refusal "an existing T5X checkpoint is not written over" \
  "out_v1_1/checkpoint_1000000: already exists" --checkpoint "$work/ckpt_v1_1" --to-t5x "$work/out_v1_1"
if [ "$(ls "$work/out_v1_1")" = "checkpoint_1000000" ]; then
  case_pass "the refused export left the model directory as it was"
else
  case_fail "the refused export left the model directory as it was" "$(ls "$work/out_v1_1" 2>&1)"
fi
expect_refusal "--dtype other than float32 or bfloat16 is refused" \
  "--dtype float16: float32 or bfloat16" --checkpoint "$work/ckpt_v1_1" --to-t5x "$work/never" --dtype float16
expect_refusal "--dtype is refused without --to-t5x" \
  "--dtype and --chunk-bytes with --to-t5x" --checkpoint "$work/ckpt_v1_1" --to-hf "$work/never" --dtype bfloat16
