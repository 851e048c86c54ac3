#!/usr/bin/env bash
# Parity with Hugging Face transformers, in both directions, for a T5 v1.0
# and a T5.1.1 config: transformers builds and saves random models and their
# outputs; our C++ model imports them and must match (logits, loss, greedy
# decoding); our export must load back into transformers with the same
# logits. Needs the test virtualenv (scripts/setup.sh), named by
# TRAINYARD_PYTHON. Every check is a test case (tests/testing/cases.sh): the
# gtest cases of each variant under "<variant>/", then each script step.
set -u
source tests/testing/cases.sh
check="$1"
trainyard="$2"
source tests/require_python.sh
require_python TRAINYARD_PYTHON transformers
work="${TEST_TMPDIR:-$(mktemp -d)}/hf"
mkdir -p "$work"
export OMP_NUM_THREADS=1
case_check "make the transformers reference models" "$python" tests/hf/make_reference.py "$work" || exit 1
for variant in v1_0 v1_1; do
  mkdir -p "$work/out_$variant"
  case_gtest "$variant" "$check" "$work/$variant" "$work/out_$variant"
  case_check "$variant: our export loads into transformers with the same logits" \
    "$python" tests/hf/verify_export.py "$work/out_$variant/exported" \
    "$work/out_$variant/ours.safetensors" "$work/$variant/reference.safetensors"
  # The same through the CLI: HF -> Trainyard checkpoint -> HF.
  case_check "$variant: trainyard convert --from-hf" \
    "$trainyard" convert --from-hf "$work/$variant" --out "$work/ckpt_$variant"
  case_check "$variant: trainyard convert --to-hf" \
    "$trainyard" convert --checkpoint "$work/ckpt_$variant" --to-hf "$work/back_$variant"
  case_check "$variant: HF -> Trainyard -> HF gives the same logits" \
    "$python" tests/hf/verify_export.py "$work/back_$variant" \
    "$work/out_$variant/ours.safetensors" "$work/$variant/reference.safetensors"
done

# A damaged checkpoint is refused with the file named, and exit code 2.
if [ -f "$work/ckpt_v1_0/params.safetensors" ]; then
  printf 'X' | dd of="$work/ckpt_v1_0/params.safetensors" bs=1 seek=100 conv=notrunc status=none
  "$trainyard" convert --checkpoint "$work/ckpt_v1_0" --to-hf "$work/never" 2>"$work/err"
  code=$?
  if [ "$code" -ne 2 ] || ! grep -q 'params.safetensors: SHA-256 mismatch' "$work/err" || [ -e "$work/never" ]; then
    case_fail "a damaged checkpoint is refused" "exit $code, $(cat "$work/err")"
  else
    case_pass "a damaged checkpoint is refused"
  fi
else
  case_fail "a damaged checkpoint is refused" "no checkpoint to damage: convert --from-hf failed above"
fi
# A truncated Hugging Face file names the tensor it cut.
cp -r "$work/v1_1" "$work/v1_1_cut"
size=$(stat -c %s "$work/v1_1/model.safetensors")
truncate -s $((size - 100)) "$work/v1_1_cut/model.safetensors"
"$trainyard" convert --from-hf "$work/v1_1_cut" --out "$work/never" 2>"$work/err"
code=$?
if [ "$code" -ne 2 ] || ! grep -q 'not a valid safetensors file: tensor ".*": data_offsets' "$work/err" || [ -e "$work/never" ]; then
  case_fail "a truncated Hugging Face file is refused" "exit $code, $(cat "$work/err")"
else
  case_pass "a truncated Hugging Face file is refused"
fi
