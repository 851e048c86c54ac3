#!/usr/bin/env bash
# Parity with Hugging Face transformers, in both directions, for a T5 v1.0
# and a T5.1.1 config: transformers builds and saves random models and their
# outputs; our C++ model imports them and must match (logits, loss, greedy
# decoding); our export must load back into transformers with the same
# logits. Needs the test virtualenv (scripts/setup.sh), named by
# TRAINYARD_PYTHON.
set -u
check="$1"
python="${TRAINYARD_PYTHON:-}"
if [ -z "$python" ] || ! "$python" -c 'import transformers' 2>/dev/null; then
  echo "FAIL: TRAINYARD_PYTHON ('$python') is not a Python with transformers; run scripts/setup.sh"
  exit 1
fi
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
done
exit "$status"
