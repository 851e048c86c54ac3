#!/usr/bin/env bash
# Our Adafactor against optax.adafactor (in .venv-jax, made by
# scripts/setup.sh and named by TRAINYARD_JAX_PYTHON).
set -u
check="$1"
python="${TRAINYARD_JAX_PYTHON:-}"
if [ -z "$python" ] || ! "$python" -c 'import optax' 2>/dev/null; then
  echo "FAIL: TRAINYARD_JAX_PYTHON ('$python') is not a Python with optax; run scripts/setup.sh"
  exit 1
fi
work="${TEST_TMPDIR:-$(mktemp -d)}"
JAX_PLATFORMS=cpu "$python" tests/optax/make_reference.py "$work/reference.safetensors" || exit 1
"$check" "$work/reference.safetensors"
