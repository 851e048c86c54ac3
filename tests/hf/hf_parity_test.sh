#!/usr/bin/env bash
# Parity with Hugging Face transformers, in both directions, for a T5 v1.0
# and a T5.1.1 config: transformers builds and saves random models and their
# outputs; our C++ model imports them and must match (logits, loss, greedy
# decoding); our export must load back into transformers with the same
# logits. Needs the test virtualenv (scripts/setup.sh), named by
# TRAINYARD_PYTHON.
set -u
check="$1"
trainyard="$2"
source tests/require_python.sh
require_python TRAINYARD_PYTHON transformers
work="${TEST_TMPDIR:-$(mktemp -d)}/hf"
mkdir -p "$work"
export OMP_NUM_THREADS=1
"$python" tests/hf/make_reference.py "$work" || exit 1
status=0
for variant in v1_0 v1_1; do
  mkdir -p "$work/out_$variant"
  "$check" "$work/$variant" "$work/out_$variant" || status=1
  "$python" tests/hf/verify_export.py "$work/out_$variant/exported" \
    "$work/out_$variant/ours.safetensors" "$work/$variant/reference.safetensors" || status=1
  # The same through the CLI: HF -> Trainyard checkpoint -> HF.
  "$trainyard" convert --from-hf "$work/$variant" --out "$work/ckpt_$variant" || status=1
  "$trainyard" convert --checkpoint "$work/ckpt_$variant" --to-hf "$work/back_$variant" || status=1
  "$python" tests/hf/verify_export.py "$work/back_$variant" \
    "$work/out_$variant/ours.safetensors" "$work/$variant/reference.safetensors" || status=1
done

# A damaged checkpoint is refused with the file named, and exit code 2.
printf 'X' | dd of="$work/ckpt_v1_0/params.safetensors" bs=1 seek=100 conv=notrunc status=none
"$trainyard" convert --checkpoint "$work/ckpt_v1_0" --to-hf "$work/never" 2>"$work/err"
code=$?
if [ "$code" -ne 2 ] || ! grep -q 'params.safetensors: SHA-256 mismatch' "$work/err" || [ -e "$work/never" ]; then
  echo "FAIL: damaged checkpoint: exit $code, $(cat "$work/err")"
  status=1
fi
# A truncated Hugging Face file names the tensor it cut.
cp -r "$work/v1_1" "$work/v1_1_cut"
size=$(stat -c %s "$work/v1_1/model.safetensors")
truncate -s $((size - 100)) "$work/v1_1_cut/model.safetensors"
"$trainyard" convert --from-hf "$work/v1_1_cut" --out "$work/never" 2>"$work/err"
code=$?
if [ "$code" -ne 2 ] || ! grep -q 'not a valid safetensors file: tensor ".*": data_offsets' "$work/err" || [ -e "$work/never" ]; then
  echo "FAIL: truncated HF file: exit $code, $(cat "$work/err")"
  status=1
fi
exit "$status"
